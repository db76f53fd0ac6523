"""The experiments behind docs/performance.md (``python -m simdist.bench.<name>``) run, tiny."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simdist.bench import allreduce_floor, datatypes, direct_read, new_communicators, python_floor, transposes


def test_allreduce_floor_times_the_call_two_copies_and_the_targets_limit():
    (row,) = allreduce_floor.measure([0.25], calls=3)
    assert row["wrong"] == 0 and row["bytes"] == 1 << 18
    assert row["call_us"] > 0 and row["two_copies_us"] > 0 and row["limit_us"] > 0


def test_python_floor_times_a_barrier_and_a_broadcast_in_python():
    floor = python_floor.python_floor(2, 200)
    assert set(floor) == {"barrier", "broadcast"} and all(v > 0 for v in floor.values())


def test_direct_read_gets_the_same_alltoall_both_ways():
    try:
        got = direct_read.measure(2, 8 << 10, 3)  # each rank asserts its result
    except SystemExit as exc:
        pytest.skip(f"process_vm_readv is not allowed here: {exc}")
    assert got["shm"] > 0 and got["cma"] > 0


def test_broadcast_none_runs_as_a_module():
    done = subprocess.run([sys.executable, "-m", "simdist.bench.broadcast_none", "2", "1"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "broadcast with None" in done.stdout


def test_datatypes_cycles_run_on_the_stand_in():
    import fake_backends.mpi4py.MPI as standin

    dtlib = datatypes.dtlib_on(standin)
    if dtlib is None:
        pytest.skip("mpi4py is not installed")
    for cycle in datatypes.cases(standin, dtlib).values():
        cycle()  # a round trip asserts that it gives its dtype back


@pytest.mark.slow
def test_datatypes_runs_as_a_module_against_open_mpi():
    done = subprocess.run([sys.executable, "-m", "simdist.bench.datatypes", "10", "1"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert '"implementation": "simdist"' in done.stdout and "Dup + Free" in done.stdout


@pytest.mark.slow
def test_transposes_run_under_both_launchers_and_check_their_results():
    cells = transposes.measure([8], [2], rounds=1, reps=1, loop=3)
    assert [c["call"] for c in cells] == list(transposes.CALLS)
    assert all(c["ok"] and c["open_mpi_ms"] > 0 and c["simdist_ms"] > 0 for c in cells), cells


@pytest.mark.slow
def test_new_communicators_run_under_both_launchers_and_check_their_results():
    cells = new_communicators.measure([2], rounds=1, repeats=1, calls=3)
    assert [c["loop"] for c in cells] == list(new_communicators.LOOPS)
    assert all(c["ok"] and c["open_mpi_us"] > 0 and c["simdist_us"] > 0 for c in cells), cells


def test_waiting_times_each_yield_bound_idle_and_beside_busy_processes():
    done = subprocess.run([sys.executable, "-m", "simdist.bench.waiting", "2,3", "--bounds", "none,0", "--rounds", "1",
                           "--calls", "5", "--busy", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout.splitlines()[-1])
    assert {(r["load"], r["ranks"], r["yield_bound_ns"]) for r in rows} == {
        (load, n, bound) for load in ("idle", "1 busy") for n in (2, 3) for bound in ("none", "0")}
    assert all(r["barrier_us"] > 0 and r["allreduce_us"] > 0 for r in rows)
