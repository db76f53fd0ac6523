"""A pinned simulated rank runs its BLAS on one thread (its CPU is its own)."""

from __future__ import annotations

import ctypes
import os

import pytest

import simdist

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
