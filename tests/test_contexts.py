"""A message reaches only the communicator it was sent on, and a communicator
only the run that made it.

- A message sent on a sub-communicator and never received must not reach a
  later one, although ``split`` gives the new one the freed one's context
  (the simulator's matching key holds the context's first epoch too); on the
  plain communicator and through the simulated mpi4py, whose envelopes
  carry the same key.
- A message left unreceived when a run ends must not reach a later run of
  the same World (on MPI each run has its own duplicate of MPI_COMM_WORLD).
- A communicator kept from an earlier run (in a module's global of the
  rank's process) is refused at once, with the rank, the call and the
  reason, on both backends and in the simulated mpi4py.

The functions that keep a communicator live in this module, so that the
ranks import it (by reference) and its globals outlive a run there.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

import fake_backends.mpi4py
import simdist
from conftest import mpiexec_or_skip

TIMEOUT = 30.0  # a refusal must come at once, far below this
STALE = "on a communicator that belongs to an earlier run"

_kept: list = []  # in each rank's process: what an earlier run kept


@pytest.fixture(scope="module")
def sim_world():
    with simdist.World(3, timeout=TIMEOUT) as w:
        yield w


@pytest.fixture(scope="module")
def mpi_world():
    mpiexec_or_skip()
    with simdist.World(2, backend="mpi", timeout=TIMEOUT) as w:
        yield w


@pytest.fixture(scope="module", params=["sim", pytest.param("mpi", marks=pytest.mark.slow)])
def world(request):  # module-scoped, so the world starts before a test's leak check
    return request.getfixturevalue(f"{request.param}_world")


# -- a message of a freed communicator ------------------------------------------------
def _stale_then_fresh(comm, color_of):
    """Rank 0 sends 111 to rank 1 on a sub-communicator that is freed with
    the message unreceived, then 222 on the next split (``color_of(rank)``);
    rank 1 returns what it receives on the new one."""
    old = comm.split(0 if comm.rank < 2 else None)
    if old is not None and old.rank == 0:
        old.send(np.array([111.0]), 1, tag=7)
    comm.barrier()  # the message is in the ring before the new split
    if old is not None:
        old.free()
    new = comm.split(color_of(comm.rank), key=comm.rank)
    got = None
    if new is not None and new.rank == 0:
        new.send(np.array([222.0]), 1, tag=7)
    elif new is not None and new.rank == 1:
        got = float(new.recv(0, tag=7)[0])
    if new is not None:
        new.free()
    return got


@pytest.mark.parametrize("color_of", [lambda r: 0 if r < 2 else None, lambda r: 0],
                         ids=["same-members", "more-members"])
def test_a_message_left_on_a_freed_communicator_never_reaches_the_next_split(sim_world, color_of):
    assert sim_world.run(_stale_then_fresh, color_of)[1] == 222.0


def test_the_next_split_still_takes_the_freed_context():
    # What makes the test above bite: without the epoch in the key, the new
    # communicator's messages would match the old one's.
    def contexts(comm):
        first = comm.split(0)
        ctx = first.transport.context
        first.free()
        second = comm.split(0)
        return ctx % 64, second.transport.context % 64, ctx != second.transport.context

    assert simdist.run(contexts, 2) == [(1, 1, True)] * 2


def _mpi4py_stale_then_fresh(comm, make):
    """The stand-in: the reproducer of issue 19 with ``make`` (Split or Dup)
    making both communicators; rank 1 also probes the new one first."""
    with fake_backends.mpi4py.installed(comm) as MPI:
        world = MPI.COMM_WORLD
        old = make(world)
        if world.rank == 0:
            old.Send(np.array([111.0]), dest=1, tag=7)
        world.Barrier()
        old.Free()
        new = make(world)
        seen_early = new.Iprobe(source=0, tag=7) if world.rank == 1 else None
        new.Barrier()
        if world.rank == 0:
            new.Send(np.array([222.0]), dest=1, tag=7)
            return None
        buf = np.zeros(1)
        new.Recv(buf, source=0, tag=7)
        return seen_early, float(buf[0])


@pytest.mark.parametrize("make", [lambda w: w.Split(0, w.rank), lambda w: w.Dup()], ids=["Split", "Dup"])
def test_the_simulated_mpi4py_never_delivers_a_freed_communicators_message(make):
    assert simdist.run(_mpi4py_stale_then_fresh, 2, make)[1] == (False, 222.0)


def test_simdist_run_never_delivers_a_freed_communicators_message():
    # The reproducer as a program (compared with mpiexec's output in
    # test_mpi4py_programs, a slow test): under `simdist run` it gave 111.0.
    program = pathlib.Path(__file__).parent / "mpi4py_programs" / "simdist_freed_messages.py"
    done = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "3", str(program)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [
        "Dup: rank 1 probed False before the send and received 444.0",
        "Split of two, then of all: rank 1 probed False before the send and received 666.0",
        "Split: rank 1 probed False before the send and received 222.0",
        "['rank 1 done', 'rank 2 done']",
    ]


# -- a message of an earlier run ----------------------------------------------------------
def _leave(comm):
    if comm.rank == 0:
        comm.send(np.array([111.0]), 1, tag=7)


def _take(comm):
    if comm.rank == 0:
        comm.send(np.array([222.0]), 1, tag=7)
    elif comm.rank == 1:
        return float(comm.recv(0, tag=7)[0])


def test_a_message_left_unreceived_in_one_run_never_reaches_the_next(world):
    world.run(_leave)
    assert world.run(_take)[1] == 222.0


# -- a communicator of an earlier run -------------------------------------------------------
def _keep(comm):
    _kept.clear()
    _kept.extend([comm, comm.split(0)])


def _allreduce_on_kept(comm, which):
    return _kept[which].allreduce(np.ones(2))


def _send_recv_on_kept(comm):
    if comm.rank == 0:
        _kept[0].send(np.ones(2), 1)
    elif comm.rank == 1:
        _kept[0].recv(0)


def _mixed(comm):
    """Rank 0 uses the kept world communicator, the others this run's."""
    return (_kept[0] if comm.rank == 0 else comm).allreduce(np.ones(2))


def _refused(world, fn, *args, calls):
    """Run ``fn``: it must fail at once, each rank in ``calls`` refusing its call."""
    start = time.monotonic()
    with pytest.raises(simdist.RankError) as info:
        world.run(fn, *args)
    assert time.monotonic() - start < 5.0, "the kept communicator was not refused at once"
    for rank, call in calls.items():
        assert f"SimdistError: rank {rank}: {call} {STALE}" in info.value.failures[rank], info.value
    return info.value


@pytest.mark.parametrize("which", [0, 1], ids=["world", "split"])
def test_a_communicator_kept_from_an_earlier_run_is_refused_at_once(world, which):
    world.run(_keep)
    _refused(world, _allreduce_on_kept, which, calls={r: "allreduce" for r in range(world.size)})
    _refused(world, _send_recv_on_kept, calls={0: "send", 1: "recv"})
    assert [r.tolist() for r in world.run(lambda comm: comm.allreduce(np.ones(2)))] == [[world.size] * 2] * world.size


def test_a_kept_communicator_used_by_one_rank_fails_the_run_at_once(sim_world):
    sim_world.run(_keep)
    error = _refused(sim_world, _mixed, calls={0: "allreduce"})
    assert sorted(error.aborted) == [1, 2]


def _stand_in_keep(comm):
    with fake_backends.mpi4py.installed(comm) as MPI:
        _kept.clear()
        sub = MPI.COMM_WORLD.Split(0, 0)
        _kept.extend([sub, sub.irecv(source=MPI.ANY_SOURCE, tag=3)])


def _stand_in_reuse(comm, use):
    with fake_backends.mpi4py.installed(comm):
        return use(_kept)


@pytest.mark.parametrize("use, call, what", [
    (lambda kept: kept[0].allreduce(1), "allreduce", "Split(color=0) of MPI_COMM_WORLD, a communicator"),
    (lambda kept: kept[0].Get_rank(), "Get_rank", "Split(color=0) of MPI_COMM_WORLD, a communicator"),
    (lambda kept: kept[1].wait(), "wait", "a request or message"),
], ids=["allreduce", "Get_rank", "request"])
def test_the_simulated_mpi4py_refuses_a_communicator_or_request_of_an_earlier_run(sim_world, use, call, what):
    sim_world.run(_stand_in_keep)
    with pytest.raises(simdist.RankError) as info:
        sim_world.run(_stand_in_reuse, use)
    for rank in range(sim_world.size):
        assert (f"SimdistError: rank {rank}: {call} on {what} of an earlier run of the mpi4py stand-in"
                in info.value.failures[rank]), info.value
