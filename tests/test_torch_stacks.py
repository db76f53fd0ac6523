"""Training stacks of torch.distributed, unmodified, on the simulator: the
same bits in every run, and one device's result within float32 rounding."""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")

from simdist._script import run_script  # noqa: E402

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
