"""Driverless SPMD: programs started by the user's own ``mpiexec``.

The MPI tests start real ``mpiexec`` jobs of Open MPI (or the MPI
installed) with no simdist driver, and check what a user running
``mpiexec -n N python script.py`` gets: ``simdist.comm()`` over the job's
world, ``check_calls``, a raising rank aborting the job with its
traceback, a hang aborting it, ``World.run`` joining the job, and the
training example.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

import simdist
from simdist.mpi import _spmd

LAUNCHER_VARIABLES = [v for v, _, _ in _spmd.LAUNCHERS] + ["SLURM_PROCID", "PMI_RANK", "OMPI_COMM_WORLD_RANK"]


@pytest.fixture
def unlaunched(monkeypatch):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_comm_outside_a_world_and_a_launcher_says_how_to_start_one(unlaunched):
    with pytest.raises(simdist.SimdistError, match=r"only available on a rank.*mpiexec -n N python script.py"):
        simdist.comm()


@pytest.mark.parametrize("variable, value, expected", [
    ("OMPI_COMM_WORLD_SIZE", "4", ("Open MPI's mpiexec", 4)),
    ("PMI_SIZE", "3", ("a PMI launcher (MPICH's or Intel MPI's mpiexec, srun --mpi=pmi2)", 3)),
    ("PMIX_RANK", "0", ("a PMIx launcher (prterun, srun --mpi=pmix)", None)),
    ("SLURM_STEP_NUM_TASKS", "8", ("Slurm's srun", 8)),
])
def test_a_launcher_is_recognised_by_its_environment(unlaunched, monkeypatch, variable, value, expected):
    assert _spmd.launched() is None
    monkeypatch.setenv(variable, value)
    assert _spmd.launched() == expected


def test_a_slurm_allocation_without_a_step_is_not_a_launched_job(unlaunched, monkeypatch):
    # An sbatch script (no srun step) may start its own worlds with launcher="srun".
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_JOB_ID", "17")
    assert _spmd.launched() is None


# -- real jobs -----------------------------------------------------------------------------------------------


def _mpiexec() -> str:
    from conftest import mpiexec_or_skip

    return mpiexec_or_skip()


def launch(n: int, args: list[str], tmp_path, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """``mpiexec -n N python ARGS`` as a user would start it, with a TMPDIR
    of its own (removed afterwards)."""
    from simdist.mpi._driver import launch_command, launch_environment, session_tmpdir

    mpiexec = _mpiexec()
    tmpdir = session_tmpdir()
    try:
        full_env = dict(launch_environment(mpiexec, tmpdir), PYTHONPATH=os.pathsep.join(sys.path), **(env or {}))
        for name in LAUNCHER_VARIABLES:  # this test may itself run under a launcher
            full_env.pop(name, None)
        command = launch_command(mpiexec, n) + [sys.executable, *args]
        return subprocess.run(command, env=full_env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def script(tmp_path, text: str) -> str:
    path = tmp_path / "program.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


COLLECTIVES = """
    import json
    import numpy as np
    import simdist

    comm = simdist.comm()
    assert comm is simdist.comm()
    r, n = comm.rank, comm.size
    x = np.arange(4.0) * (r + 1)
    sub = comm.split(color=r % 2)
    out = {
        "rank": r, "size": n,
        "allreduce": comm.allreduce(x).tolist(),
        "max": comm.allreduce(np.array([r]), op="max").tolist(),
        "broadcast": comm.broadcast(np.array([7, 8]) if r == 1 else None, root=1).tolist(),
        "allgather": comm.allgather(np.int64(r)).tolist(),
        "reduce_scatter": comm.reduce_scatter(np.ones((n, 2), np.int32) * r).tolist(),
        "alltoall": comm.alltoall(np.arange(n) + 10 * r).tolist(),
        "sub": sub.allgather(np.int64(r)).tolist(),
    }
    comm.send(np.array([r]), dest=(r + 1) % n)
    out["recv"] = comm.recv(source=(r - 1) % n).tolist()
    sub.free()
    print(json.dumps(out), flush=True)
"""


def _json_objects(text: str) -> list:
    """The JSON objects the ranks printed (MPICH's mpiexec may join two
    ranks' lines into one)."""
    decoder, found, at = json.JSONDecoder(), [], text.find("{")
    while at >= 0:
        obj, end = decoder.raw_decode(text, at)
        found.append(obj)
        at = text.find("{", end)
    return found


@pytest.mark.slow
def test_program_under_mpiexec_gets_the_mpi_communicator_over_the_job(tmp_path):
    done = launch(3, [script(tmp_path, COLLECTIVES)], tmp_path)
    assert done.returncode == 0, done.stderr
    outs = sorted(_json_objects(done.stdout), key=lambda o: o["rank"])
    assert [o["rank"] for o in outs] == [0, 1, 2]
    for r, o in enumerate(outs):
        assert o["size"] == 3
        assert o["allreduce"] == [0.0, 6.0, 12.0, 18.0]
        assert o["max"] == [2]
        assert o["broadcast"] == [7, 8]
        assert o["allgather"] == [0, 1, 2]
        assert o["reduce_scatter"] == [3, 3]
        assert o["alltoall"] == [r, 10 + r, 20 + r]
        assert o["sub"] == ([0, 2] if r % 2 == 0 else [1])
        assert o["recv"] == [(r - 1) % 3]


RAISES = """
    import numpy as np
    import simdist

    comm = simdist.comm()
    comm.allreduce(np.ones(2))
    if comm.rank == 1:
        raise ValueError("bad batch on rank 1")
    comm.allreduce(np.ones(2))   # the peers wait here for rank 1
"""


@pytest.mark.slow
def test_a_raising_rank_aborts_the_job_with_its_traceback(tmp_path):
    started = time.monotonic()
    done = launch(3, [script(tmp_path, RAISES)], tmp_path)
    took = time.monotonic() - started
    assert done.returncode != 0
    assert "simdist: rank 1 of 3 raised ValueError; aborting the MPI job" in done.stderr
    assert 'raise ValueError("bad batch on rank 1")' in done.stderr
    assert "ValueError: bad batch on rank 1" in done.stderr, done.stderr
    assert took < 60, f"the job took {took:.0f} s to end"


MISMATCHED = """
    import numpy as np
    import simdist

    comm = simdist.comm()
    comm.allreduce(np.ones(3, np.float32 if comm.rank == 2 else np.float64))
"""


@pytest.mark.slow
def test_check_calls_turns_mismatched_calls_into_collective_mismatch(tmp_path):
    done = launch(3, [script(tmp_path, MISMATCHED)], tmp_path, env={"SIMDIST_CHECK_CALLS": "1"})
    assert done.returncode != 0
    assert "raised CollectiveMismatch; aborting the MPI job" in done.stderr
    assert "rank 0 called allreduce #1 (float64 (3,), op=sum), rank 2 called allreduce #1 (float32 (3,), op=sum)" in done.stderr


HANGS = """
    import time
    import numpy as np
    import simdist

    comm = simdist.comm()
    if comm.rank == 0:
        time.sleep(600)                     # rank 0 never joins the allreduce
    comm.allreduce(np.ones(4, np.float32))
"""


@pytest.mark.slow
def test_a_hang_aborts_the_job_after_simdist_timeout_saying_where_the_rank_waits(tmp_path):
    started = time.monotonic()
    done = launch(2, [script(tmp_path, HANGS)], tmp_path, env={"SIMDIST_TIMEOUT": "2"})
    took = time.monotonic() - started
    assert done.returncode == _spmd.HUNG, done.stderr
    assert ("simdist: rank 1 of 2: no progress for 2 s; waiting in allreduce #1 (float32 (4,), op=sum) for 2."
            in done.stderr)
    assert took < 60, f"the job took {took:.0f} s to end"


WORLD = """
    import simdist

    with simdist.World(3, backend="mpi") as world:
        values = world.run(lambda comm: comm.allreduce(__import__("numpy").array([comm.rank])).item() * 10 + comm.rank)
        pids = world.pids
    say = lambda line: __import__("os").write(1, (line + "\\n").encode())  # one write a line: Hydra mixes partial writes
    say(f"values {values} mine {pids[simdist.comm().rank] == __import__('os').getpid()}")
    try:
        simdist.World(2, backend="mpi")
    except simdist.InvalidValue as exc:
        say(f"refused {exc}")
    with simdist.World(3, backend="mpi") as world:
        world.run(lambda comm: 1 / (comm.rank - 2))
"""


@pytest.mark.slow
def test_world_under_mpiexec_joins_the_job_and_a_raising_run_aborts_it(tmp_path):
    done = launch(3, [script(tmp_path, WORLD)], tmp_path)
    lines = done.stdout.splitlines()
    assert lines.count("values [30, 31, 32] mine True") == 3, done.stdout + done.stderr
    refused = [line for line in lines if line.startswith("refused World(size=2) in a job of 3 processes started by ")]
    assert len(refused) == 3 and all(line.endswith(": a World of the MPI backend joins that job; give size=3")
                                     for line in refused), done.stdout
    assert done.returncode != 0
    assert "simdist: rank 2 of 3 failed in World.run; aborting the MPI job" in done.stderr
    assert "ZeroDivisionError: division by zero" in done.stderr


CAPTURED = """
    import os, simdist

    with simdist.World(2, backend="mpi") as world:
        world.run(lambda comm: comm.rank)
        os.dup2(os.open("captured.txt", os.O_WRONLY | os.O_CREAT), 2)  # as pytest's capture does
        world.run(lambda comm: 1 / (comm.rank - 1))
"""


@pytest.mark.slow
def test_a_failed_run_is_reported_on_the_launchers_stderr_while_a_harness_captures_the_rank(tmp_path):
    done = launch(2, [script(tmp_path, CAPTURED)], tmp_path)
    assert done.returncode != 0
    assert "simdist: rank 1 of 2 failed in World.run; aborting the MPI job" in done.stderr, done.stderr
    assert "ZeroDivisionError: division by zero" in done.stderr, done.stderr


@pytest.mark.slow
def test_training_under_mpiexec_trains_and_verifies(tmp_path):
    from conftest import installed_or_skip

    installed_or_skip("sklearn", "examples")
    done = launch(2, ["-m", "simdist.train", "--epochs", "1", "--json", "-"], tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # rank 0's alone
    assert report["config"]["size"] == 2 and report["config"]["backend"] == "mpi"
    assert report["verification"] == {"replicas_identical": True, "matches_single_device": True,
                                      "deterministic": True, "matches_simulator": True}


@pytest.mark.slow
def test_check_under_mpiexec_runs_the_suite_on_the_jobs_ranks_and_rank_0_alone_reports(tmp_path):
    out = tmp_path / "check.json"
    done = launch(2, ["-m", "simdist", "check", "-n", "2", "--backend", "mpi", "--quick", "--collectives",
                      "allreduce", "--ops", "sum", "--dtypes", "float64", "--json", str(out)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("collective  dtype") == 1 and done.stdout.count("property suite:") == 1, done.stdout
    assert done.stderr.count("check: running the property suite") == 1, done.stderr
    report = json.loads(out.read_text())
    assert report["ok"] and report["properties"]["ok"] and report["properties"]["passed"] >= 5, report


FIRST_FAILURE_APART = """
    import os
    import time

    from hypothesis import given, settings, strategies as st

    RANK = os.environ["OMPI_COMM_WORLD_RANK"]
    seen = []


    def _drawn(comm, x):
        return x


    @settings(max_examples=20)
    @given(st.integers(0, 100))
    def test_always_fails(world, x):
        drawn = world.run(_drawn, x)
        assert len(set(drawn)) == 1, f"the ranks drew {drawn}"
        if RANK == "1" and not seen:
            time.sleep(8)  # rank 1 meets the first failure 8 s after rank 0
        seen.append(x)
        time.sleep(1)
        assert False, "always fails"
"""


@pytest.mark.slow
def test_property_tests_under_mpiexec_stay_on_one_example_when_the_ranks_clocks_differ(tmp_path):
    # Hypothesis searches on for other bugs for 10 s after the first; each rank
    # timed that from its own first failure, 8 s apart, and drew other examples.
    (tmp_path / "test_apart.py").write_text(textwrap.dedent(FIRST_FAILURE_APART))
    done = launch(2, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no", "test_apart.py",
                      "--simdist-backend", "mpi", "--simdist-np", "2", "--simdist-timeout", "10"], tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-4000:]
    assert out.count("1 failed") == 2 and "AssertionError: always fails" in out, out[-4000:]
    assert "AssertionError: the ranks drew" not in out, out[-4000:]


ONE_RUN_MORE = """
    import os


    def _rank(comm):
        return comm.rank


    def test_rank_1_runs_once_more(world):
        world.run(_rank)
        if os.environ["OMPI_COMM_WORLD_RANK"] == "1":
            world.run(_rank)
"""


@pytest.mark.slow
def test_a_run_that_one_rank_of_a_pytest_job_never_starts_is_a_hang_reported_at_the_timeout(tmp_path):
    (tmp_path / "test_once_more.py").write_text(textwrap.dedent(ONE_RUN_MORE))
    done = launch(2, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_once_more.py", "--simdist-backend", "mpi",
                      "--simdist-np", "2", "--simdist-timeout", "3"], tmp_path, timeout=120)
    assert done.returncode == 124, done.stdout[-3000:] + done.stderr[-3000:]
    assert ("simdist: rank 1 of 2: no progress for 3 s; waiting in the start of World.run #2 (waiting for every "
            "rank to start it)") in done.stderr, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_an_mpi4py_of_another_mpi_than_the_launchers_is_named(tmp_path):
    # A launcher that announces 3 processes, but mpi4py finds a world of one.
    program = script(tmp_path, "import simdist\nsimdist.comm()\n")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env.update(PMI_SIZE="3", PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, program], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "started by a PMI launcher (MPICH's or Intel MPI's mpiexec, srun --mpi=pmi2) for 3 processes, but this " \
           "process's mpi4py finds an MPI world of 1" in done.stderr
