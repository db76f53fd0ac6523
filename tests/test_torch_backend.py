"""The simdist backend of torch.distributed: every c10d call against the
contract's semantics, computed here from each rank's inputs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import simdist
from conftest import Deferred
from simdist._script import run_script

pytestmark = pytest.mark.torch
torch = Deferred("torch")

SIZE = 3


@pytest.fixture(scope="module")
def ranks():
    with simdist.World(SIZE, timeout=60) as w:
        yield w


def _on_ranks(ranks, body, *args):
    """Run ``body(dist, rank, size, *args)`` after init_process_group() with no arguments."""

    def program(comm, *args):
        import torch.distributed as dist

        dist.init_process_group()
        return body(dist, dist.get_rank(), dist.get_world_size(), *args)

    return ranks.run(program, *args)


def _inputs(dtype, rank, n=7):
    g = torch.Generator().manual_seed(100 + rank)
    if dtype == torch.bool:
        return torch.rand(n, generator=g) > 0.5
    if dtype.is_floating_point:
        return (torch.randn(n, generator=g) * 3).to(dtype)
    if dtype.is_complex:
        return torch.randn(n, generator=g, dtype=dtype)
    return torch.randint(-20 if dtype.is_signed else 0, 20, (n,), generator=g).to(dtype)


def _fold(parts, step):
    acc = parts[0].clone()
    for part in parts[1:]:
        acc = step(acc, part)
    return acc


_STEPS = {  # torch's function of each op
    "SUM": "add", "PRODUCT": "mul", "MIN": "minimum", "MAX": "maximum",
    "BAND": "bitwise_and", "BOR": "bitwise_or", "BXOR": "bitwise_xor",
}
_CASES = [(op, dt) for dt in ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")
          for op in ("SUM", "PRODUCT", "MIN", "MAX")]
_CASES += [(op, dt) for dt in ("int32", "int16") for op in ("BAND", "BOR", "BXOR")]
_CASES += [("SUM", "complex64"), ("SUM", "complex128"), ("AVG", "float32"), ("AVG", "bfloat16")]


def _reduce_body(dist, rank, size, op, dtype):
    t = _inputs(dtype, rank)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    return t


@pytest.mark.parametrize("op,dtype", _CASES)
def test_all_reduce_is_the_fold_in_rank_order_to_the_bit_on_every_rank(ranks, op, dtype):
    dtype = getattr(torch, dtype)
    got = _on_ranks(ranks, _reduce_body, op, dtype)
    parts = [_inputs(dtype, r) for r in range(SIZE)]
    if op == "AVG":
        want = _fold(parts, torch.add) / SIZE
    else:
        want = _fold(parts, getattr(torch, _STEPS[op]))
    for rank, t in enumerate(got):
        assert t.dtype == dtype
        assert torch.equal(t.view(-1).view(torch.uint8), want.to(dtype).view(-1).view(torch.uint8)), (rank, t, want)


def _bool_body(dist, rank, size):
    out = {}
    for op in ("SUM", "PRODUCT", "MIN", "MAX"):
        t = torch.tensor([rank == 0, rank < 2, True, False])
        dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
        out[op] = t.tolist()
    return out


def test_bool_sum_and_max_are_or_and_product_and_min_are_and(ranks):
    for got in _on_ranks(ranks, _bool_body):
        assert got["SUM"] == got["MAX"] == [True, True, True, False]
        assert got["PRODUCT"] == got["MIN"] == [False, False, True, False]


def _refused_body(dist, rank, size):
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.AVG)
    except TypeError as exc:
        return str(exc)


def test_an_integer_average_is_refused_naming_the_call(ranks):
    for message in _on_ranks(ranks, _refused_body):
        assert "all_reduce" in message and "AVG" in message and "torch.int32" in message


def _uneven_all_to_all_body(dist, rank, size):
    outs = [torch.empty(j + 1) for j in range(size)]
    try:
        dist.all_to_all(outs, [torch.full((rank + 1,), 1.0) for _ in range(size)])
    except RuntimeError as exc:
        return str(exc)


def test_all_to_all_of_tensors_of_different_shapes_is_refused_as_gloo_refuses_it(ranks):
    for message in _on_ranks(ranks, _uneven_all_to_all_body):
        assert "invalid tensor size at index 1 of output_tensor_list (expected (1,), got (2,))" in message, message


def _sparse_body(dist, rank, size):
    every = [torch.sparse_coo_tensor(torch.randint(0, 6, (2, 5), generator=torch.Generator().manual_seed(r)),
                                     torch.randn(5, generator=torch.Generator().manual_seed(10 + r)), (6, 6))
             for r in range(size)]
    mine = every[rank].clone()
    dist.all_reduce(mine)
    refused = []
    for call in (lambda: dist.all_reduce(every[rank].clone(), op=dist.ReduceOp.MAX),
                 lambda: dist.broadcast(every[rank].clone(), src=0)):
        try:
            call()
        except (RuntimeError, TypeError) as exc:
            refused.append(str(exc))
    return mine.coalesce(), sum(t.to_dense() for t in every), refused


def test_a_sparse_tensor_is_summed_as_gloo_sums_it_and_other_uses_are_refused(ranks):
    results = _on_ranks(ranks, _sparse_body)
    first = results[0][0]
    for got, dense_sum, refused in results:
        assert got.is_coalesced() and torch.equal(got.indices(), first.indices())
        assert torch.equal(got.values(), first.values())  # the same bits on every rank
        assert torch.allclose(got.to_dense(), dense_sum, rtol=0, atol=1e-6)
        assert "ReduceOp.SUM only" in refused[0] and "ReduceOp.MAX" in refused[0], refused
        assert "layout is torch.sparse_coo" in refused[1], refused


def _premul_body(dist, rank, size):
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    return t.tolist()


def test_premul_sum_multiplies_each_rank_then_sums(ranks):
    assert _on_ranks(ranks, _premul_body) == [[0.5 * (1 + 2 + 3)] * 3] * SIZE


def _moves_body(dist, rank, size):
    out = {}
    t = torch.arange(4.0) + 10 * rank
    dist.broadcast(t, src=1)
    out["broadcast"] = t.tolist()
    t = torch.arange(4.0) + rank
    dist.reduce(t, dst=2)
    out["reduce"] = t.tolist() if rank == 2 else None
    parts = [torch.empty(2, 2) for _ in range(size)]
    dist.all_gather(parts, torch.full((2, 2), float(rank)))
    out["all_gather"] = [p[0, 0].item() for p in parts]
    whole = torch.empty(size * 2)
    dist.all_gather_into_tensor(whole, torch.full((2,), float(rank)))
    out["all_gather_into_tensor"] = whole.tolist()
    mine = torch.empty(2)
    dist.reduce_scatter(mine, [torch.full((2,), float(rank * 10 + j)) for j in range(size)])
    out["reduce_scatter"] = mine.tolist()
    mine = torch.empty(2)
    dist.reduce_scatter_tensor(mine, torch.arange(2.0 * size) * (rank + 1))
    out["reduce_scatter_tensor"] = mine.tolist()
    got = [torch.empty(1) for _ in range(size)] if rank == 0 else None
    dist.gather(torch.tensor([rank * 1.5]), got, dst=0)
    out["gather"] = [g.item() for g in got] if rank == 0 else None
    mine = torch.empty(2)
    dist.scatter(mine, [torch.full((2,), float(j)) for j in range(size)] if rank == 0 else None, src=0)
    out["scatter"] = mine.tolist()
    # uneven: rank r sends j + 1 rows to rank j, of width 2
    send = torch.cat([torch.full((j + 1, 2), float(10 * rank + j)) for j in range(size)])
    recv = torch.empty((rank + 1) * size, 2)
    dist.all_to_all_single(recv, send, [rank + 1] * size, [j + 1 for j in range(size)])
    out["all_to_all_single"] = recv[:, 0].tolist()
    outs = [torch.empty(2) for j in range(size)]
    dist.all_to_all(outs, [torch.full((2,), float(rank * 10 + j)) for j in range(size)])
    out["all_to_all"] = [o.tolist() for o in outs]
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "word": "x" * rank})
    out["all_gather_object"] = objs
    items = [("hello", rank)] if rank == 0 else [None]
    dist.broadcast_object_list(items, src=0)
    out["broadcast_object_list"] = items
    dist.barrier()
    return out


def test_every_collective_moves_what_its_docs_say(ranks):
    got = _on_ranks(ranks, _moves_body)
    n = SIZE
    for rank, out in enumerate(got):
        assert out["broadcast"] == [10.0, 11.0, 12.0, 13.0]
        assert out["all_gather"] == [float(r) for r in range(n)]
        assert out["all_gather_into_tensor"] == [float(r) for r in range(n) for _ in range(2)]
        assert out["reduce_scatter"] == [float(sum(r * 10 + rank for r in range(n)))] * 2
        full = sum(np.arange(2.0 * n) * (r + 1) for r in range(n))
        assert out["reduce_scatter_tensor"] == full[2 * rank: 2 * rank + 2].tolist()
        assert out["scatter"] == [float(rank)] * 2
        assert out["all_to_all_single"] == [float(10 * j + rank) for j in range(n) for _ in range(rank + 1)]
        assert out["all_to_all"] == [[float(j * 10 + rank)] * 2 for j in range(n)]
        assert out["all_gather_object"] == [{"rank": r, "word": "x" * r} for r in range(n)]
        assert out["broadcast_object_list"] == [("hello", 0)]
    assert got[2]["reduce"] == [float(sum(i + r for r in range(n))) for i in range(4)]
    assert got[0]["gather"] == [r * 1.5 for r in range(n)]


def _p2p_body(dist, rank, size):
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    big = torch.arange(300_000, dtype=torch.float64) + rank  # larger than a slot: must not block its sender
    got = torch.empty_like(big)
    reqs = [dist.isend(big, nxt, tag=3), dist.irecv(got, prev, tag=3)]
    for req in reqs:
        req.wait()
    ops = [dist.P2POp(dist.isend, torch.tensor([rank]), nxt), dist.P2POp(dist.irecv, small := torch.empty(1, dtype=torch.int64), prev)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    column = torch.zeros(4, 3)
    if rank == 0:
        dist.send(torch.arange(12.0).view(4, 3)[:, 1], 1)
    elif rank == 1:
        dist.recv(column[:, 2], 0)  # a strided view on both sides
    anyone = torch.empty(1)
    if rank == 0:
        sources = sorted(dist.recv(anyone, tag=9) for _ in range(size - 1))
    else:
        dist.send(torch.tensor([float(rank)]), 0, tag=9)
        sources = None
    return got[:3].tolist(), small.item(), column[:, 2].tolist(), sources


def test_point_to_point_posts_without_blocking_and_keeps_views(ranks):
    got = _on_ranks(ranks, _p2p_body)
    for rank, (first, small, column, sources) in enumerate(got):
        prev = (rank - 1) % SIZE
        assert first == [float(prev), prev + 1.0, prev + 2.0]
        assert small == prev
        assert column == ([1.0, 4.0, 7.0, 10.0] if rank == 1 else [0.0] * 4)
    assert got[0][3] == list(range(1, SIZE))


def _subgroup_body(dist, rank, size):
    pair = dist.new_group([0, 2])
    t = torch.tensor([float(rank + 1)])
    if rank in (0, 2):
        dist.all_reduce(t, group=pair)
    evens, _ = dist.new_subgroups_by_enumeration([[0, 2], [1]])
    u = torch.tensor([float(rank)])
    dist.all_reduce(u, group=evens)
    return t.item(), u.item()


def test_groups_are_made_by_their_members_alone(ranks):
    assert _on_ranks(ranks, _subgroup_body) == [(4.0, 2.0), (2.0, 1.0), (4.0, 2.0)]


def _async_and_objects_body(dist, rank, size):
    from torch.distributed.distributed_c10d import _coalescing_manager

    out = {}
    t = torch.ones(2) * rank
    work = dist.all_reduce(t, async_op=True)
    out["future"] = work.get_future().then(lambda f: f.value()[0] * 2).wait().tolist()
    work.wait()
    gathered = [None] * size if rank == 0 else None
    dist.gather_object({"r": rank}, gathered, dst=0)
    out["gather_object"] = gathered
    mine = [None]
    dist.scatter_object_list(mine, [f"x{j}" for j in range(size)] if rank == 0 else None, src=0)
    out["scatter_object_list"] = mine[0]
    dist.monitored_barrier()
    single, _ = dist.new_subgroups(group_size=1)
    u = torch.ones(1)
    dist.all_reduce(u, group=single)
    out["new_subgroups"] = u.item()
    a, b = torch.ones(2) * rank, torch.ones(3) * rank
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    c = torch.ones(1) * rank
    dist.all_reduce_coalesced([c])
    out["coalesced"] = a.tolist() + b.tolist() + c.tolist()
    return out


def test_async_work_object_collectives_monitored_barrier_subgroups_and_coalescing(ranks):
    total = float(sum(range(SIZE)))
    for rank, out in enumerate(_on_ranks(ranks, _async_and_objects_body)):
        assert out["future"] == [2 * total] * 2
        assert out["gather_object"] == ([{"r": r} for r in range(SIZE)] if rank == 0 else None)
        assert out["scatter_object_list"] == f"x{rank}"
        assert out["new_subgroups"] == 1.0
        assert out["coalesced"] == [total] * 6


def _noncontiguous_body(dist, rank, size):
    m = torch.arange(12.0).view(3, 4) * (rank + 1)
    dist.all_reduce(m[:, 1])  # a column: strided
    return m.tolist()


def test_a_strided_view_is_reduced_in_place(ranks):
    scale = sum(range(1, SIZE + 1))
    for rank, m in enumerate(_on_ranks(ranks, _noncontiguous_body)):
        want = (np.arange(12.0).reshape(3, 4) * (rank + 1))
        want[:, 1] = np.arange(12.0).reshape(3, 4)[:, 1] * scale
        assert m == want.tolist()


def _mismatch_body(dist, rank, size):
    dist.all_reduce(torch.ones(6 if rank == 1 else 4))


def test_ranks_that_disagree_raise_collective_mismatch_naming_both_calls_and_each_ranks_line(ranks):
    with pytest.raises(simdist.CollectiveMismatch, match=r"torch group 0 .*float32 \(4,\).*float32 \(6,\)") as caught:
        _on_ranks(ranks, _mismatch_body)
    for rank in range(SIZE):
        assert (f"rank {rank} of the run called it at test_torch_backend.py:{_mismatch_body.__code__.co_firstlineno + 1}: "
                "dist.all_reduce(torch.ones(6 if rank == 1 else 4))") in str(caught.value)


SUBGROUP_HANG = textwrap.dedent("""
    import time, torch, torch.distributed as dist
    dist.init_process_group("gloo")
    group = dist.new_group([1, 2])
    if dist.get_rank() == 1:
        dist.all_reduce(torch.ones(4), group=group)
    if dist.get_rank() == 2:
        time.sleep(60)
""")


@pytest.mark.slow  # waits out its 3 s timeout
def test_a_hang_in_a_subgroup_names_the_collective_and_the_torch_group(tmp_path):
    (tmp_path / "hang.py").write_text(SUBGROUP_HANG)
    outcome = run_script(str(tmp_path / "hang.py"), [], SIZE, timeout=3.0)
    assert outcome.status != 0
    assert ("rank 1: waiting in all_reduce (float32 (4,), op=sum) on torch group 1 of ranks [1, 2] at hang.py:6"
            in outcome.error), outcome.error


DDP_SCRIPT = textwrap.dedent("""
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")  # as under torchrun; simdist run makes it a simdist group
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    ddp = DDP(model, bucket_cap_mb=0.0005)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(48, 8, generator=g), torch.randn(48, 2, generator=g)
    for step in range(4):
        opt.zero_grad()
        ((ddp(x[rank::size]) - y[rank::size]) ** 2).mean().backward()
        opt.step()
    w = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = [torch.empty_like(w) for _ in range(size)]
    dist.all_gather(every, w)
    assert all(torch.equal(every[0], v) for v in every), "replicas differ"
    if rank == 0:
        torch.save(w, "weights.pt")
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_an_unmodified_ddp_script_trains_with_identical_replicas_and_the_same_bits_each_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    weights = []
    for _ in range(2):
        outcome = run_script(str(tmp_path / "train.py"), [], 2, timeout=120)
        assert outcome.status == 0, outcome.error
        weights.append(torch.load(tmp_path / "weights.pt"))
    assert torch.equal(weights[0], weights[1])
    # one device on the global batch, with gradients averaged as DDP does
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(48, 8, generator=g), torch.randn(48, 2, generator=g)
    for _ in range(4):
        opt.zero_grad()
        sum(((model(x[r::2]) - y[r::2]) ** 2).mean() for r in range(2)).div(2).backward()
        opt.step()
    single = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.allclose(weights[0], single, rtol=1e-5, atol=1e-6)


def test_simdist_run_gives_the_environment_torchrun_gives(tmp_path):
    script = tmp_path / "env.py"
    script.write_text("import os, sys\n"
                      "keys = ['RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT',"
                      " 'TORCHELASTIC_RUN_ID']\n"
                      "assert all(os.environ.get(k) for k in keys), [k for k in keys if not os.environ.get(k)]\n"
                      "sys.exit(0 if os.environ['RANK'] == os.environ['LOCAL_RANK'] and"
                      " os.environ['WORLD_SIZE'] == '2' else 3)\n")
    outcome = run_script(str(script), [], 2, timeout=60)
    assert outcome.status == 0, outcome.error


def test_a_rank_variable_of_the_launchers_environment_is_each_ranks_own(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "7")
    monkeypatch.setenv("MASTER_PORT", "12345")
    script = tmp_path / "env.py"
    script.write_text("import os, sys\n"
                      "sys.exit(0 if os.environ['RANK'] in '01' and os.environ['MASTER_PORT'] == '12345' else 3)\n")
    outcome = run_script(str(script), [], 2, timeout=60)
    assert outcome.status == 0, outcome.error


IMPORTED_BEFORE = ("import sys\n"
                   "before = 'torch' in sys.modules, 'torch._dynamo' in sys.modules\n"
                   "{setting}"
                   "import torch, torch.distributed as dist\n"
                   "dist.init_process_group()\n"
                   "t = torch.ones(2)\n"
                   "{use}"
                   "dist.all_reduce(t)\n"
                   "print(dist.get_rank(), *before, torch.get_num_threads(), t.tolist())\n")


@pytest.mark.slow
def test_simdist_run_imports_torch_once_for_its_ranks_unless_the_script_sets_its_environment_first(tmp_path):
    """The ranks inherit the driver's torch with torchrun's one thread a
    rank, and torch._dynamo where the script names DDP (which imports it);
    a script that sets its thread count before its import gets it."""
    ddp = "torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))(t).sum().backward()\n"
    runs = {}
    for name, setting, use in (("plain", "", ""), ("ddp", "", ddp),
                               ("threads", "import os\nos.environ['OMP_NUM_THREADS'] = '2'\n", "")):
        (tmp_path / f"{name}.py").write_text(IMPORTED_BEFORE.format(setting=setting, use=use))
        done = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "3", f"{name}.py"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = sorted(done.stdout.splitlines())
    assert runs["plain"] == [f"{r} True False 1 [3.0, 3.0]" for r in range(3)]
    assert runs["ddp"] == [f"{r} True True 1 [3.0, 3.0]" for r in range(3)]
    assert runs["threads"] == [f"{r} False False 2 [3.0, 3.0]" for r in range(3)]


@pytest.mark.slow
def test_a_process_outside_simdist_makes_a_world_of_its_own_size(tmp_path):
    """No launcher but the process itself: a hosted world of one."""
    import subprocess

    code = ("import torch, torch.distributed as dist, sys\n"
            "dist.init_process_group('simdist', init_method='file://' + sys.argv[1], rank=0, world_size=1)\n"
            "t = torch.arange(3.0)\n"
            "dist.all_reduce(t)\n"
            "print(type(dist.group.WORLD).__name__, t.tolist())\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == "SimdistGroup [0.0, 1.0, 2.0]\n"


def _coalesced_gather_and_profile_body(dist, rank, size):
    inputs = [torch.full((2,), float(rank)), torch.full((3,), 10.0 + rank)]
    outputs = [[torch.zeros(2), torch.zeros(3)] for _ in range(size)]
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        dist.all_gather_coalesced(outputs, inputs)
        t = torch.ones(2, 3, dtype=torch.complex64)
        dist.all_reduce(t)
        if rank < 2:
            (dist.send if rank == 0 else dist.recv)(torch.zeros(4), 1 - rank)
    events = [(e.name, e.is_async, e.input_shapes) for e in prof.function_events if ":" in e.name
              and e.name.split(":")[0] in ("gloo", "simdist")]
    return [[o.tolist() for o in row] for row in outputs], events


def test_all_gather_coalesced_fills_one_row_per_rank_and_calls_are_async_profiler_events(ranks):
    """As under Gloo: ``outputs[r][k]`` is rank r's k-th input, and each call
    is a profiler event named for the group's backend, with its inputs."""
    for rank, (rows, events) in enumerate(_on_ranks(ranks, _coalesced_gather_and_profile_body)):
        assert rows == [[[float(r)] * 2, [10.0 + r] * 3] for r in range(SIZE)]
        # init_process_group() with no backend: the group stands in for Gloo, and its events say so
        expected = [("gloo:all_gather", True, [[2], [3]]), ("gloo:all_reduce", True, [[2, 3, 2]])]
        expected += [(("gloo:send" if rank == 0 else "gloo:recv"), True, [[4]])] if rank < 2 else []
        assert events == expected


@pytest.mark.slow
def test_torch_distributed_debug_detail_runs_ddp_and_a_mismatch_is_still_simdists_report(tmp_path):
    """Under DETAIL torch wraps backends in its checker; a DDP script runs, and
    a rank that disagrees is named with its line as without it."""
    env = {**os.environ, "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "2", "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    (tmp_path / "mismatch.py").write_text("import torch, torch.distributed as dist\n"
                                          "dist.init_process_group('gloo')\n"
                                          "dist.all_reduce(torch.ones(6 if dist.get_rank() == 1 else 4))\n")
    done = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "3", "mismatch.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and "CollectiveMismatch" in done.stderr, done.stderr[-3000:]
    assert "rank 1 of the run called it at mismatch.py:3" in done.stderr, done.stderr[-3000:]
