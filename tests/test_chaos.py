"""A short run of the chaos trials (``tests/chaos.py``): random faults on one
reused world, each followed by a correct allreduce; nothing wrong, nothing
hung, nothing left behind."""

from __future__ import annotations

import pytest

import chaos


@pytest.mark.slow
@pytest.mark.parametrize("backend, start_method, trials", [("sim", "fork", 40), ("sim", "forkserver", 10), ("mpi", None, 6)])
def test_random_faults_on_a_reused_world_give_no_wrong_result_no_hang_and_no_leak(backend, start_method, trials):
    if backend == "mpi":
        from conftest import mpiexec_or_skip

        mpiexec_or_skip()
    report = chaos.chaos(trials, size=3, backend=backend, seed=trials, start_method=start_method)
    summary = {k: report[k] for k in ("wrong_results", "unexpected_outcomes", "hangs")}
    assert summary == {"wrong_results": 0, "unexpected_outcomes": 0, "hangs": 0}, report["failures"]
    assert report["leaked_detail"] == {"processes": [], "descriptors": [], "memfds": 0, "dev_shm": [], "temp_dirs": []}
