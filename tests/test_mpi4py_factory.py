"""Collectives written with mpi4py: ``simdist.mpi4py_comm`` and
``simdist.Mpi4pyCommunicator`` on both backends, several installations of
the simulated mpi4py in one run, and what ``import mpi4py`` gives on a
simulated rank.

The ring allreduce under test is tests/mpi4py_ring.py (``mpi4py_ring:make``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import simdist
from simdist import reference

HERE = Path(__file__).resolve().parent
RING = "mpi4py_ring:make"


def _ring_env(**more) -> dict:
    """The environment of a child that must import mpi4py_ring and this simdist."""
    root = str(HERE.parent)
    path = os.pathsep.join([root, str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, **more}


@pytest.fixture(scope="module")
def world3():
    with simdist.World(3, timeout=10) as world:
        yield world


# -- several installations in one run --------------------------------------------------------------


def _installed_blocks(comm, blocks: int):
    """``blocks`` installed() blocks one after the other, each exchanging
    objects, a rendezvous-size buffer and a collective; rank 1 ends each
    block late, when its peers' first messages of the next have arrived."""
    import fake_backends.mpi4py

    out = []
    for k in range(blocks):
        with fake_backends.mpi4py.installed(comm) as MPI:
            world = MPI.COMM_WORLD
            right, left = (world.rank + 1) % world.size, (world.rank - 1) % world.size
            got = world.sendrecv((k, world.rank), dest=right, source=left, sendtag=k, recvtag=k)
            big = np.empty(20_000)  # 160 kB: beyond the eager limit
            world.Sendrecv(np.full(20_000, 10.0 * k + world.rank), right, recvbuf=big, source=left)
            out.append((got, float(big[-1]), world.allreduce(world.rank + k)))
            if world.rank == 1:  # still in this block while the others start the next one
                time.sleep(0.05)
    return out


def _expected_blocks(n: int, blocks: int) -> list:
    total = n * (n - 1) // 2
    return [[((k, (r - 1) % n), 10.0 * k + (r - 1) % n, total + n * k) for k in range(blocks)] for r in range(n)]


def test_installed_blocks_one_after_the_other_in_a_run_and_in_runs(world3):
    assert world3.run(_installed_blocks, 2) == _expected_blocks(3, 2)
    assert world3.run(_installed_blocks, 1) == _expected_blocks(3, 1)  # and a run with one


@pytest.mark.slow
def test_installed_blocks_one_after_the_other_on_two_ranks():
    with simdist.World(2, timeout=10) as world:
        assert world.run(_installed_blocks, 3) == _expected_blocks(2, 3)
        assert world.run(_installed_blocks, 1) == _expected_blocks(2, 1)


# -- mpi4py_comm and Mpi4pyCommunicator on the simulator ------------------------------------------


def _ring_program(comm, arrays):
    import mpi4py_ring

    target = mpi4py_ring.make(comm)
    return target.allreduce(arrays[comm.rank]), target.allreduce(arrays[comm.rank], "max"), target.broadcast(
        arrays[0] if comm.rank == 0 else None)


def test_a_ring_written_with_mpi4py_runs_through_its_factory_run_after_run(world3):
    arrays = [np.arange(10, dtype=np.int32) * (r + 1) for r in range(3)]
    for _ in range(3):
        for total, top, root in world3.run(_ring_program, arrays):
            np.testing.assert_array_equal(total, np.arange(10) * 6)
            np.testing.assert_array_equal(top, np.arange(10) * 3)
            np.testing.assert_array_equal(root, arrays[0])


def _mixed_traffic(comm):
    mpi = simdist.mpi4py_comm(comm)
    assert simdist.mpi4py_comm(comm) is mpi  # one per run
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    comm.send(np.array([comm.rank]), right, tag=0)
    mpi.send(("mpi4py", comm.rank), dest=right, tag=0)
    return mpi.recv(source=left, tag=0), int(comm.recv(left, tag=0)[0]), mpi.Get_size()


def test_mpi4py_messages_never_match_the_base_communicators_and_back(world3):
    assert world3.run(_mixed_traffic) == [(("mpi4py", (r - 1) % 3), (r - 1) % 3, 3) for r in range(3)]


@pytest.mark.slow
def test_on_open_mpi_the_mpi4py_communicator_is_a_duplicate_of_its_own_each_run():
    pytest.importorskip("mpi4py")
    with simdist.World(2, backend="mpi", timeout=30) as world:
        for _ in range(3):
            assert world.run(_mixed_traffic) == [(("mpi4py", 1), 1, 2), (("mpi4py", 0), 0, 2)]
        names = world.run(lambda comm: type(simdist.mpi4py_comm(comm)).__module__)
    assert names == ["mpi4py.MPI"] * 2


def _refusals(comm):
    sub = comm.split(comm.rank % 2)
    errors = []
    for call in (lambda: simdist.mpi4py_comm(sub), lambda: simdist.Mpi4pyCommunicator(comm, allgatherv=len),
                 lambda: simdist.Mpi4pyCommunicator(comm, allreduce=3)):
        try:
            call()
        except (simdist.InvalidType, simdist.InvalidValue) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    sub.free()
    return errors


def test_what_has_no_mpi4py_communicator_is_refused_naming_the_fix(world3):
    errors = world3.run(_refusals)[1]
    assert "InvalidType" in errors[0] and "not a sub-communicator" in errors[0] and "Split" in errors[0]
    assert "InvalidValue" in errors[1] and "allgatherv is not a call of the contract" in errors[1]
    assert "InvalidType" in errors[2] and "allreduce=3 must be a function" in errors[2]
    with pytest.raises(simdist.SimdistError, match="only available on a rank"):
        simdist.mpi4py_comm()


# -- import mpi4py on a simulated rank ----------------------------------------------------------


def _import_mpi4py(comm):
    from mpi4py import MPI

    return MPI.COMM_WORLD.allreduce(comm.rank + 1), MPI.COMM_WORLD.Get_size(), MPI.Is_initialized()


def test_importing_mpi4py_in_a_simulated_rank_gives_the_simulated_world(world3):
    for _ in range(2):  # the second run binds the module imported in the first to its own world
        assert world3.run(_import_mpi4py) == [(6, 3, True)] * 3


def _raise_after_a_send(comm):
    simdist.mpi4py_comm(comm).isend("never received", dest=(comm.rank + 1) % comm.size)
    raise ValueError("the function failed")


def test_a_run_whose_function_raised_leaves_the_next_run_a_fresh_simulated_world(world3):
    with pytest.raises(simdist.RankError, match="the function failed"):
        world3.run(_raise_after_a_send)
    assert world3.run(_installed_now) == [False] * 3  # removed when the function raised
    assert world3.run(_import_mpi4py) == [(6, 3, True)] * 3


def _installed_now(comm):
    from fake_backends.mpi4py import _runtime

    return _runtime.current is not None


@pytest.mark.slow
def test_a_driver_that_imported_the_real_mpi4py_leaves_its_ranks_the_simulated_one(tmp_path):
    """The module of a factory imports mpi4py at the top, in the driver too
    (MPI_Init runs there); the ranks forked from the driver never use it."""
    pytest.importorskip("mpi4py")
    (tmp_path / "usermod.py").write_text(textwrap.dedent("""\
        from mpi4py import MPI
        from mpi4py.MPI import COMM_WORLD, SUM
        import simdist, mpi4py_ring

        class Holder:
            world = MPI.COMM_WORLD

        def total(comm, world=MPI.COMM_WORLD):
            return (world.allreduce(comm.rank, op=SUM), COMM_WORLD.Get_size(), Holder.world.Get_size(),
                    MPI.__name__)

        def make(base):
            return simdist.Mpi4pyCommunicator(base, allreduce=mpi4py_ring.ring_allreduce)
        """))
    (tmp_path / "driver.py").write_text(textwrap.dedent("""\
        import numpy as np, simdist, usermod
        assert usermod.MPI.Is_initialized() and usermod.MPI.COMM_WORLD.Get_size() == 1
        with simdist.World(3, timeout=20) as world:
            print(world.run(usermod.total))
            print(world.run(lambda comm: usermod.make(comm).allreduce(np.full(4, comm.rank + 1)).tolist()))
        """))
    # Open MPI 5's MPI_Init of a process not started by mpiexec leaves its shared-memory
    # segment in /dev/shm; without the sm transport (a world of one needs none) it makes none.
    done = subprocess.run([sys.executable, "driver.py"], cwd=tmp_path, env=_ring_env(OMPI_MCA_btl="self"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str([(3, 3, 3, "fake_backends.mpi4py.MPI")] * 3), str([[6] * 4] * 3)]


# -- checking the factory -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_the_ring_passes_the_quick_sweep_on_the_simulator(n):
    report = reference.sweep(n, factory=RING, quick=True, collectives=["allreduce"],
                             dtypes=["int8", "int64", "float32", "float64", "complex64", "bool"])
    assert report["ok"], [row["reason"] for row in report["rows"] if row["verdict"] == "FAIL"]
    assert report["totals"]["unsupported"] == 0


@pytest.mark.slow
def test_the_ring_passes_the_quick_sweep_on_open_mpi():
    report = reference.sweep(2, backend="mpi", factory=RING, quick=True, collectives=["allreduce"],
                             dtypes=["int8", "float32", "float64", "complex128"])
    assert report["ok"], [row["reason"] for row in report["rows"] if row["verdict"] == "FAIL"]


@pytest.mark.slow
@pytest.mark.parametrize("backend", [["--simdist-backend", RING],
                                     ["--simdist-backend", "mpi", "--simdist-factory", RING]], ids=["sim", "mpi"])
def test_the_ring_passes_the_property_suites_allreduce_properties(backend):
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", "properties.test_collectives",
               "-k", "allreduce", "--simdist-np", "3", *backend]
    done = subprocess.run(command, cwd=HERE.parent, env=_ring_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def _footprint(comm):
    import mpi4py_ring

    mpi4py_ring.make(comm).allreduce(np.ones(1000))
    with open("/proc/self/status") as status:
        rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
    return rss, len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sim", "mpi"])
def test_hundreds_of_runs_through_the_factory_leak_nothing(backend):
    with simdist.World(2, backend=backend, timeout=30) as world:
        for _ in range(50):
            world.run(_footprint)
        before = world.run(_footprint)
        for _ in range(300):
            world.run(_footprint)
        after = world.run(_footprint)
    for (rss0, fds0), (rss1, fds1) in zip(before, after):
        assert fds1 == fds0
        assert rss1 - rss0 < 2048, f"{rss1 - rss0} kB more after 300 runs"
