"""A pinned simulated rank runs its BLAS on one thread (its CPU is its own)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest

import simdist
from conftest import installed_or_skip

_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_", "openblas_get_num_threads")


def _blas_threads(comm=None):
    """The thread count of the first OpenBLAS loaded here, or None."""
    import numpy  # noqa: F401  (loads numpy's OpenBLAS)

    with open("/proc/self/maps") as fh:
        paths = sorted({line.split()[-1] for line in fh if "openblas" in line.lower() and ".so" in line})
    for path in paths:
        lib = ctypes.CDLL(path)
        for name in _GETTERS:
            getter = getattr(lib, name, None)
            if getter is not None:
                return int(getter())
    return None


def test_a_pinned_rank_runs_blas_on_one_thread():
    if _blas_threads() is None:
        pytest.skip("this numpy uses no OpenBLAS")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: nothing to compare")
    with simdist.World(2) as world:              # 2 ranks on >= 2 CPUs: each is pinned
        assert world.run(_blas_threads) == [1, 1]


def test_unpinned_ranks_run_blas_on_one_thread_and_start_no_pool():
    """More ranks than CPUs: no rank is pinned, and each still gets one BLAS
    thread. No rank starts OpenBLAS's thread pool (its idle thread would
    spin on the rank's CPU): each rank has its main thread and the lifeline
    watcher only."""
    if _blas_threads() is None:
        pytest.skip("this numpy uses no OpenBLAS")
    n = len(os.sched_getaffinity(0)) + 1
    with simdist.World(n) as world:
        assert world.run(_blas_threads) == [1] * n
        assert world.run(_thread_count) == [2] * n


def _thread_count(comm=None):
    return len(os.listdir("/proc/self/task"))


@pytest.mark.slow  # a child imports torch
def test_a_rank_forked_after_its_driver_ran_a_torch_op_runs_torch_ops(tmp_path):
    """GNU OpenMP's pool does not survive a fork: without one torch thread
    per rank, the rank's first product waits for ever (and, as user code,
    is never timed out)."""
    installed_or_skip("torch", "torch")
    script = tmp_path / "driver.py"
    script.write_text(
        "import torch, simdist\n"
        "a = torch.randn(256, 256)\n"
        "(a @ a).sum()  # the driver's OpenMP pool is now alive\n"
        "def product(comm):\n"
        "    import torch\n"
        "    b = torch.ones(256, 256)\n"
        "    return torch.get_num_threads(), float((b @ b).sum())\n"
        "with simdist.World(2, timeout=10) as world:\n"
        "    print(world.run(product))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[(1, 16777216.0), (1, 16777216.0)]"  # 256 * 256 entries of 256
