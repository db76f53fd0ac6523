"""Training stacks of torch.distributed, unmodified, on the simulator: the
same bits in every run, and one device's result within float32 rounding."""

from __future__ import annotations

import textwrap

import pytest

from conftest import Deferred
from simdist._script import run_script

pytestmark = pytest.mark.torch
torch = Deferred("torch")

MODEL = """
import torch, torch.distributed as dist
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
g = torch.Generator().manual_seed(1)
x, y = torch.randn(24, 8, generator=g), torch.randn(24, 4, generator=g)
"""

FSDP = MODEL + textwrap.dedent("""
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        ((model(x[rank::size]) - y[rank::size]) ** 2).mean().backward()
        opt.step()
    full = torch.cat([p.full_tensor().reshape(-1) for p in model.parameters()])
    if rank == 0:
        torch.save(full, "out.pt")
""")

TENSOR_PARALLEL = MODEL + textwrap.dedent("""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    out = model(x)
    ((out - y) ** 2).mean().backward()
    grads = torch.cat([p.grad.full_tensor().reshape(-1) for p in model.parameters()])
    if dist.get_rank() == 0:
        torch.save(torch.cat([out.reshape(-1), grads]), "out.pt")
""")


def _one_device(kind: str) -> torch.Tensor:
    scope: dict = {}
    exec(MODEL, scope)
    model, x, y = scope["model"], scope["x"], scope["y"]
    if kind == "fsdp":
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            # each rank's mean over its shard, averaged over the 2 ranks, as FSDP averages gradients
            sum(((model(x[r::2]) - y[r::2]) ** 2).mean() for r in range(2)).div(2).backward()
            opt.step()
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    out = model(x)
    ((out - y) ** 2).mean().backward()
    return torch.cat([out.detach().reshape(-1), *[p.grad.reshape(-1) for p in model.parameters()]])


@pytest.mark.slow
@pytest.mark.parametrize("kind,script", [("fsdp", FSDP), ("tensor parallel", TENSOR_PARALLEL)])
def test_a_stack_runs_unmodified_gives_the_same_bits_each_run_and_one_devices_result(tmp_path, monkeypatch,
                                                                                     kind, script):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prog.py").write_text(script)
    results = []
    for _ in range(2):
        outcome = run_script(str(tmp_path / "prog.py"), [], 2, timeout=120)
        assert outcome.status == 0, outcome.error
        results.append(torch.load(tmp_path / "out.pt"))
    assert torch.equal(results[0], results[1])
    assert torch.allclose(results[0], _one_device(kind), rtol=1e-5, atol=1e-6)


DDP_VARIANTS = MODEL + textwrap.dedent("""
    import sys
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.distributed.optim import ZeroRedundancyOptimizer
    variant = sys.argv[1]
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.unused = model, torch.nn.Linear(3, 3)  # unused: find_unused_parameters finds it

        def forward(self, v):
            return self.body(v)

    net = Net() if variant in ("find_unused", "static_graph") else model
    ddp = DDP(net, find_unused_parameters=variant == "find_unused", static_graph=variant == "static_graph")
    if variant == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    if variant == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    if variant == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    params = list(model.parameters())
    if variant == "zero":
        opt = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=0.1)
    else:
        opt = torch.optim.SGD(params, lr=0.1)
    xs, ys = x[rank::size], y[rank::size]
    for step in range(3):
        opt.zero_grad()
        if variant == "no_sync":  # the first half's gradient is kept on the rank, then both are averaged
            with ddp.no_sync():
                ((ddp(xs[:6]) - ys[:6]) ** 2).mean().backward()
            ((ddp(xs[6:]) - ys[6:]) ** 2).mean().backward()
        else:
            ((ddp(xs) - ys) ** 2).mean().backward()
        opt.step()
    torch.save(torch.cat([p.detach().reshape(-1) for p in params]), f"out-{rank}.pt")
    if variant == "checkpoint":
        import torch.distributed.checkpoint as dcp
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        dcp.save({"model": model.state_dict()}, checkpoint_id="ckpt")
        for p in model.parameters():
            p.data.zero_()
        state = {"model": model.state_dict()}
        dcp.load(state, checkpoint_id="ckpt")
        model.load_state_dict(state["model"])
        assert all(torch.equal(saved[k], v) for k, v in model.state_dict().items()), "the checkpoint lost bits"
""")


def _ddp_one_device(variant: str) -> torch.Tensor:
    """The parameters after 3 SGD steps on one device, on the gradient DDP
    averages over 2 ranks (each rank's loss on its rows)."""
    scope: dict = {}
    exec(MODEL, scope)
    model, x, y = scope["model"], scope["x"], scope["y"]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        losses = []
        for r in range(2):
            xs, ys = x[r::2], y[r::2]
            if variant == "no_sync":
                losses += [((model(xs[:6]) - ys[:6]) ** 2).mean(), ((model(xs[6:]) - ys[6:]) ** 2).mean()]
            else:
                losses.append(((model(xs) - ys) ** 2).mean())
        (sum(losses) / 2).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


#: How far each variant may be from one device: float32 rounding, or the
#: compression's (fp16 keeps 11 bits, bf16 8); PowerSGD approximates on purpose.
DDP_BOUNDS = {"no_sync": 1e-5, "find_unused": 1e-5, "static_graph": 1e-5, "zero": 1e-5, "checkpoint": 1e-5,
              "fp16": 1e-3, "bf16": 1e-2, "powersgd": None}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(DDP_BOUNDS))
def test_ddp_variants_run_unmodified_with_identical_replicas_and_the_same_bits_each_run(tmp_path, monkeypatch,
                                                                                     variant):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prog.py").write_text(DDP_VARIANTS)
    runs = []
    for _ in range(2):
        outcome = run_script(str(tmp_path / "prog.py"), [variant], 2, timeout=120)
        assert outcome.status == 0, outcome.error
        runs.append([torch.load(tmp_path / f"out-{r}.pt") for r in range(2)])
    assert torch.equal(runs[0][0], runs[0][1])  # replicas identical to the bit
    assert torch.equal(runs[0][0], runs[1][0])  # a rerun gives the same bits
    if DDP_BOUNDS[variant] is not None:
        assert torch.allclose(runs[0][0], _ddp_one_device(variant), rtol=DDP_BOUNDS[variant], atol=DDP_BOUNDS[variant])


@pytest.mark.slow
def test_torch_steps_compares_a_ddp_step_on_gloo_and_on_the_simulator():
    """``simdist.bench.torch_steps`` (docs/torch.md, "Speed") measures both."""
    from simdist.bench import torch_steps

    (row,) = torch_steps.measure(ranks=(2,), steps=2, kinds=("ddp",), widths={"small": 32})
    assert row["params"] == 1072 and row["gloo_ms"] > 0 and row["simdist_ms"] > 0
