"""Reference checking of torch's backends: Gloo's real process groups on
simulated ranks, judged by the sweep and the property suite; its ring's
order named; NCCL refused with its reason where there is no GPU; a ring
written with torch's send/recv plugged in as one written with mpi4py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fake_backends
import simdist
from conftest import Deferred
from simdist import reference
from simdist._orders import gloo_ring_chunks, in_order

pytestmark = pytest.mark.torch
torch = Deferred("torch")

TESTS = Path(__file__).parent


def _data(rank: int, count: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng([rank, count])
    v = rng.standard_normal(count) * np.exp2(rng.integers(-8, 9, count))
    if np.dtype(dtype).kind == "c":
        v = v + 1j * rng.standard_normal(count)
    return v.astype(dtype)


CASES = [(dtype, count) for dtype in ("float32", "float16", "float64", "complex64") for count in (1, 5, 100, 4099)]


def _gloo_allreduce(comm):
    from simdist.torch.check import gloo

    c = gloo(comm)
    return [c.allreduce(_data(comm.rank, count, dtype)) for dtype, count in CASES]


@pytest.mark.slow  # Gloo groups on simulated ranks, or a `simdist check` in a child
@pytest.mark.parametrize("n", [3, 4])
def test_glooS_allreduce_is_its_named_ring_order_to_the_bit(n):
    """Every rank's result equals ``gloo_ring``'s bits; the ascending fold
    does not (so the check can tell the two apart)."""
    with simdist.World(n, timeout=60) as world:
        outputs = world.run(_gloo_allreduce)
    folds_differ = 0
    for k, (dtype, count) in enumerate(CASES):
        parts = [_data(r, count, dtype) for r in range(n)]
        got = [outputs[r][k] for r in range(n)]
        verdict = reference.check("allreduce", parts, got, op="sum", order="gloo_ring")
        assert verdict.ok, (dtype, count, verdict.reason)
        folds_differ += not reference.check("allreduce", parts, got, op="sum", order="fold").ok
    assert folds_differ >= 4


def test_glooS_ring_cuts_small_buffers_into_its_own_chunks():
    """Segments of ceil(count / segments) elements, segments / N per chunk."""
    assert gloo_ring_chunks(100, 4, 4) == [(0, 26), (26, 52), (52, 78), (78, 100)]
    assert gloo_ring_chunks(1, 4, 4) == [(0, 1), (1, 1), (1, 1), (1, 1)]
    assert gloo_ring_chunks(1 << 20, 4, 4) == [(k << 18, (k + 1) << 18) for k in range(4)]
    parts = [np.array([1.0, 2.0 ** -30], np.float32) * (r + 1) for r in range(3)]
    assert in_order("gloo_ring", "sum", parts).dtype == np.float32
    with pytest.raises(ValueError, match="AVG"):
        in_order("gloo_ring", "mean", parts)


def _check(*args, cwd=None, path=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, SIMDIST_TIMEOUT="20", PYTHONWARNINGS="ignore")
    if path:
        env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "simdist", "check", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=600, cwd=cwd)


@pytest.mark.slow  # Gloo groups on simulated ranks, or a `simdist check` in a child
def test_check_torch_gloo_judges_glooS_rows_and_names_what_it_refuses(tmp_path):
    out = tmp_path / "gloo.json"
    done = _check("-n", "3", "--backend", "torch-gloo", "--quick", "--no-properties", "--collectives",
                  "allreduce,reduce_scatter,broadcast,gather,send_recv,barrier", "--dtypes", "int16,int32,float32,complex64",
                  "--json", str(out))
    report = json.loads(out.read_text())
    rows = {(r["collective"], r["dtype"], r["op"]): r for r in report["rows"]}
    assert report["backend"] == "torch-gloo" and report["factory"] == "simdist.torch.check:gloo"
    for key in [("allreduce", "float32", "sum"), ("allreduce", "complex64", "sum"), ("reduce_scatter", "float32", "max"),
                ("broadcast", "complex64", None), ("send_recv", "float32", None), ("barrier", None, None)]:
        assert rows[key]["verdict"] == "pass", (key, rows[key]["reason"])
    assert rows["allreduce", "int16", "sum"]["verdict"] == "unsupported"
    assert "Invalid scalar type" in rows["allreduce", "int16", "sum"]["reason"]
    assert rows["allreduce", "int32", "land"]["verdict"] == "unsupported"
    assert rows["allreduce", "int32", "bxor"]["verdict"] == "pass"
    assert rows["allreduce", "complex64", "prod"]["verdict"] == "unsupported"
    assert rows["gather", "complex64", None]["verdict"] == "unsupported"
    # the mean of complex numbers in reduce_scatter is not the correctly rounded quotient of each part
    assert rows["allreduce", "complex64", "mean"]["verdict"] == "pass"
    assert rows["reduce_scatter", "complex64", "mean"]["verdict"] == "FAIL"
    assert "bit for bit" in rows["reduce_scatter", "complex64", "mean"]["reason"]
    assert done.returncode == 1, done.stderr
    assert "(torch-gloo via simdist.torch.check:gloo)" in done.stdout


@pytest.mark.slow  # a `simdist check` in a child imports torch
def test_check_torch_nccl_without_a_gpu_says_why_and_checks_nothing():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: torch-nccl runs there")
    done = _check("-n", "2", "--backend", "torch-nccl", "--quick", "--no-properties")
    assert done.returncode == 1
    assert "torch-nccl skipped" in done.stderr and "no CUDA device" in done.stderr
    with pytest.raises(simdist.SimdistError, match="torch.cuda.is_available"):
        reference.sweep(2, "torch-nccl", quick=True)


@pytest.mark.slow  # Gloo groups on simulated ranks, or a `simdist check` in a child
def test_a_ring_written_with_torch_send_and_recv_is_checked_as_one_written_with_mpi4py():
    """On the simdist backend and on Gloo, every (dtype, op) row it supports passes."""
    for factory in ("torch_ring:make", "torch_ring:make_on_gloo"):
        done = _check("-n", "3", "--backend", factory, "--collectives", "allreduce", "--quick", "--no-properties",
                      cwd=TESTS)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "110 rows: 39 passed, 0 failed, 71 unsupported" in done.stdout


BROKEN_RING = '''
import torch
import torch_ring


def off_by_one(group, x, op="sum"):
    out = torch_ring.ring_allreduce(group, x, op)
    if out.numel() > 1 and out.dtype.is_floating_point:
        out.view(-1)[-1] = out.view(-1)[0]  # the last element is the first's
    return out


def make(base):
    from simdist.torch.check import TorchCommunicator, process_group
    return TorchCommunicator(base, process_group(base), allreduce=off_by_one)
'''


@pytest.mark.slow  # Gloo groups on simulated ranks, or a `simdist check` in a child
def test_a_ring_with_a_bug_fails_the_check_naming_the_element(tmp_path):
    (tmp_path / "broken_ring.py").write_text(BROKEN_RING)
    done = _check("-n", "3", "--backend", "broken_ring:make", "--collectives", "allreduce", "--dtypes", "float32",
                  "--ops", "sum", "--quick", "--no-properties", cwd=tmp_path, path=TESTS)
    assert done.returncode == 1
    assert "FAIL allreduce float32 sum" in done.stdout and "element(s) wrong" in done.stdout


@pytest.mark.slow  # Gloo groups on simulated ranks, or a `simdist check` in a child
def test_the_property_suite_takes_a_torch_process_group_as_the_backend_under_test():
    """A factory that returns a ProcessGroup is tested through the contract;
    what Gloo refuses is skipped with its reason, never failed."""
    env = dict(os.environ, SIMDIST_TIMEOUT="20", PYTHONWARNINGS="ignore", SIMDIST_PROPERTY_EXAMPLES="5",
               PYTHONPATH=f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "properties.test_collectives",
         "-k", "allreduce and (sum or land)", "--simdist-backend", "torch_ring:gloo_group", "--simdist-np", "3",
         "-rs"], capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=600, cwd=TESTS)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "passed" in done.stdout and "does not support it" in done.stdout and "'land'" in done.stdout


def test_the_simulator_as_a_contract_group_passes_the_sweep_bit_for_bit():
    """torch's calls on a ContractGroup of the rank's own communicator, and
    the contract over them, give every row the simulator's own results."""
    report = reference.sweep(3, "sim", "fake_backends.torch_groups:simulator", quick=True, timeout=30,
                             dtypes=["float64", "int32", "complex128"], ops=["sum", "mean", "max"])
    failed = [row for row in report["rows"] if row["verdict"] == "FAIL"]
    assert report["ok"] and not failed, failed[:2]
    assert sum(row["verdict"] == "pass" for row in report["rows"]) >= 20


class _Narrowing(fake_backends.Wrapper):
    """Hands back allreduce's result as float32: a dtype torch's tensor does not have."""

    def allreduce(self, x, op="sum"):
        return self.base.allreduce(x, op=op).astype(np.float32)


def _narrowed_all_reduce(comm):
    import torch.distributed as dist

    from simdist.torch.check import ContractGroup

    t = torch.ones(3, dtype=torch.float64)
    try:
        dist.all_reduce(t, group=ContractGroup(_Narrowing(comm)))
    except RuntimeError as exc:
        return str(exc), t.tolist()
    return None, t.tolist()


def test_a_contract_group_refuses_a_result_its_tensor_cannot_hold_naming_rank_and_call():
    with simdist.World(2, timeout=30) as world:
        outcomes = world.run(_narrowed_all_reduce)
    for rank, (error, values) in enumerate(outcomes):
        assert error == (f"rank {rank}: all_reduce: the communicator returned float32 of shape (3,) for a "
                         "torch.float64 tensor of shape (3,)"), error
        assert values == [1.0, 1.0, 1.0]  # nothing written


def _split_twice_on_gloo(comm):
    from simdist.torch.check import gloo

    c = gloo(comm)
    first = c.split(3 if comm.rank == 1 else None, 0)  # a group of rank 1 alone
    if first is not None:
        first.barrier()
    second = c.split(1 if comm.rank == 2 else 2, -comm.rank)  # then one of ranks 1 and 0
    return second.allreduce(np.arange(3.0) + comm.rank)


@pytest.mark.slow  # Gloo groups on simulated ranks
def test_glooS_groups_of_a_second_split_meet_after_a_group_some_members_never_joined():
    """torch names a group made with local synchronization after a count that
    only earlier groups' members advanced; the members agree on it first, or
    the second split's group [0, 1] waits for ever in Gloo's rendezvous."""
    with simdist.World(3, timeout=30) as world:
        outcomes = world.run(_split_twice_on_gloo)
    assert [o.tolist() for o in outcomes] == [[1.0, 3.0, 5.0], [1.0, 3.0, 5.0], [2.0, 3.0, 4.0]]


def _bf16_parts(rank: int, count: int) -> np.ndarray:
    import ml_dtypes

    rng = np.random.default_rng([rank, count, 16])
    return rng.standard_normal(count).astype(np.float32).astype(ml_dtypes.bfloat16)


BF16_COUNTS = (1, 5, 100, 1000, 4099)


def _gloo_bf16(comm):
    from simdist.torch.check import gloo

    c = gloo(comm)
    return [c.allreduce(_bf16_parts(comm.rank, count), op=op) for op in ("sum", "prod") for count in BF16_COUNTS]


@pytest.mark.slow  # Gloo groups on simulated ranks
def test_glooS_bfloat16_allreduce_is_its_ring_order_with_bfloat16_steps():
    """Gloo's sum and product of bfloat16 tensors are the ring's order, each
    step rounded to bfloat16 (ml_dtypes' steps are torch's), to the bit."""
    n = 3
    with simdist.World(n, timeout=60) as world:
        outputs = world.run(_gloo_bf16)
    k, folds_differ = 0, 0
    for op in ("sum", "prod"):
        for count in BF16_COUNTS:
            parts = [_bf16_parts(r, count) for r in range(n)]
            got = [outputs[r][k] for r in range(n)]
            verdict = reference.check("allreduce", parts, got, op=op, order="gloo_ring")
            assert verdict.ok and verdict.dtype == "bfloat16", (op, count, verdict.reason)
            assert reference.check("allreduce", parts, got, op=op).ok  # and within the bound
            folds_differ += not reference.check("allreduce", parts, got, op=op, order="fold").ok
            k += 1
    assert folds_differ >= 4  # the ascending fold is another order: the check can tell


@pytest.mark.slow  # Gloo groups on simulated ranks, or a `simdist check` in a child
def test_check_torch_gloo_sweeps_bfloat16_rows_against_their_bounds(tmp_path):
    out = tmp_path / "bf16.json"
    done = _check("-n", "3", "--backend", "torch-gloo", "--quick", "--collectives",
                  "allreduce,reduce_scatter,broadcast,alltoall,send_recv", "--dtypes", "bfloat16", "--json", str(out))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    rows = {(r["collective"], r["dtype"], r["op"]): r for r in report["rows"][1:]}
    assert {d for _, d, _ in rows} == {"bfloat16"} and report["dtypes"] == ["bfloat16"]
    assert {op for c, _, op in rows if c == "allreduce"} == {"sum", "prod", "min", "max", "mean"}
    assert all(r["verdict"] == "pass" for r in rows.values()), [r["reason"] for r in rows.values()]
    summed = rows["allreduce", "bfloat16", "sum"]
    assert not summed["exact"] and 0 < summed["max_ratio"] <= 1
    assert rows["broadcast", "bfloat16", None]["exact"] and rows["allreduce", "bfloat16", "max"]["exact"]
    assert report["properties"]["skipped"] and "the sweep checked it" in report["properties"]["reason"]


TRUNCATING_SUM = '''
import torch
import torch.distributed as dist


def truncating_sum(group, x, op="sum"):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x, group=group)
    if x.dtype != torch.bfloat16:
        return torch.stack(parts).sum(0)
    total = torch.stack([p.float() for p in parts]).sum(0)
    return (total.view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)  # toward zero: the high 16 bits


def make(base):
    from simdist.torch.check import TorchCommunicator, process_group
    return TorchCommunicator(base, process_group(base), allreduce=truncating_sum)


make.extra_dtypes = ("bfloat16",)
'''


@pytest.mark.slow  # a `simdist check` in a child
def test_a_bfloat16_sum_that_truncates_fails_the_check_where_float32_passes(tmp_path):
    (tmp_path / "truncating.py").write_text(TRUNCATING_SUM)
    done = _check("-n", "2", "--backend", "truncating:make", "--collectives", "allreduce", "--ops", "sum",
                  "--dtypes", "bfloat16,float32", "--quick", "--no-properties", cwd=tmp_path)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "FAIL allreduce bfloat16 sum" in done.stdout and "> bound" in done.stdout
    assert "1 failed" in done.stdout and "FAIL allreduce float32 sum" not in done.stdout
