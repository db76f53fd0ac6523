"""Fault tolerance (MPI 5.0's ULFM calls) in the mpi4py stand-in (issue 20
item 7): without failures, as no process fails alone in a simulated run.

``Agree`` is the bitwise AND of the flags (the remote group's on an
intercommunicator), ``Iagree`` its nonblocking form, ``Shrink``/``Ishrink``
a communicator of the same processes, ``Get_failed`` empty, ``Ack_failed``
0, ``Is_revoked`` False; ``Revoke`` is refused. ``Agree`` is a collective
in the communicator's order: a rank that calls another collective makes
the run fail with ``simdist.CollectiveMismatch``, and an ``Iagree`` one
rank never starts is a hang naming it. (That the program
``mpi4py_programs/simdist_ulfm.py`` prints the same lines under ``mpiexec``,
Open MPI 5, and ``simdist run`` is checked by ``test_mpi4py_programs.py``.)
"""

from __future__ import annotations

import pytest

from simdist._script import HUNG

from mpi4py_prelude import passes, run_program

HEADER = "import numpy as np\n"


def test_agree_is_the_and_of_the_flags_and_iagree_does_not_wait_for_the_others(tmp_path):
    passes(tmp_path, """
    dup = comm.Dup()
    assert dup.Agree(0b1111 ^ (1 << rank)) == 0b1111 & ~((1 << size) - 1)
    assert dup.Agree(-1) == -1 and MPI.COMM_SELF.Agree(5) == 5
    cell = np.array([0b110 | rank], dtype=np.intc)
    if rank == 0:
        request = dup.Iagree(cell)
        assert not request.Test() and cell[0] == 0b110  # rank 1 has not started it: nothing written yet
        dup.send("started", dest=1)
    else:
        assert dup.recv(source=0) == "started"
        request = dup.Iagree(cell)
    request.Wait()
    assert cell[0] == 0b110 and request == MPI.REQUEST_NULL
    failed = dup.Get_failed()
    assert failed.Get_size() == 0 and MPI.Group.Compare(failed, MPI.GROUP_EMPTY) == MPI.IDENT
    assert (dup.Ack_failed(), dup.Ack_failed(0), dup.Is_revoked()) == (0, 0, False)
    shrunk, request = dup.Ishrink()
    request.Wait()
    assert (shrunk.Get_size(), shrunk.Get_rank(), shrunk.Compare(dup)) == (size, rank, MPI.CONGRUENT)
    assert shrunk.allreduce(rank) == size * (size - 1) // 2
    shrunk.Free()
    try:
        dup.Revoke()
    except NotImplementedError as exc:
        assert "Intracomm.Revoke is not supported" in str(exc) and "woken" in str(exc), str(exc)
    else:
        raise AssertionError("Revoke was not refused")
    dup.Free()
    """, 2, header=HEADER)


@pytest.mark.slow
def test_agree_on_an_intercommunicator_gives_the_remote_groups_and(tmp_path):
    passes(tmp_path, """
    low = rank < 2
    half = comm.Split(0 if low else 1, rank)
    inter = half.Create_intercomm(0, comm, 2 if low else 0)
    flags = {0: 0b0111, 1: 0b0011, 2: 0b1110, 3: 0b1100}
    assert inter.Agree(flags[rank]) == (0b1110 & 0b1100 if low else 0b0111 & 0b0011)
    cell = np.array([flags[rank]], dtype=np.intc)
    inter.Iagree(cell).Wait()
    assert cell[0] == (0b1100 if low else 0b0011)
    shrunk = inter.Shrink()
    assert isinstance(shrunk, MPI.Intercomm) and (shrunk.Get_size(), shrunk.Get_remote_size()) == (2, 2)
    shrunk.Free()
    shrunk, request = inter.Ishrink()
    request.Wait()
    assert shrunk.Get_remote_group().Translate_ranks() == inter.Get_remote_group().Translate_ranks()
    assert shrunk.allreduce(rank) == (5 if low else 1)
    shrunk.Free()
    inter.Free()
    half.Free()
    """, 4, header=HEADER)


@pytest.mark.slow
def test_iagree_and_agree_check_their_flag_as_mpi4py_does(tmp_path):
    passes(tmp_path, """
    for bad, error in ((0, TypeError), (bytearray(8), ValueError), (np.zeros(2, np.intc), ValueError),
                       (np.zeros(1, np.int64), ValueError), (bytes(4), BufferError)):
        try:
            comm.Iagree(bad)
        except error:
            pass
        else:
            raise AssertionError(f"Iagree({bad!r}) did not raise {error.__name__}")
    for bad, error in ((1.5, TypeError), (1 << 40, OverflowError)):
        try:
            comm.Agree(bad)
        except error:
            pass
        else:
            raise AssertionError(f"Agree({bad!r}) did not raise {error.__name__}")
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    assert error_class(lambda: comm.Ack_failed(-1)) == MPI.ERR_ARG
    assert comm.Agree(3) == 3  # the calls that raised started nothing: this one matches
    """, 2, header=HEADER)


@pytest.mark.slow
def test_agree_against_another_collective_is_a_collective_mismatch(tmp_path):
    outcome = run_program(tmp_path, """
    if rank == 0:
        comm.Agree(1)
    else:
        comm.Barrier()
    """, 2)
    assert outcome.status != 0 and "CollectiveMismatch" in outcome.error, outcome.error


@pytest.mark.slow
def test_iagree_and_barrier_in_different_orders_is_a_collective_mismatch(tmp_path):
    """MPI orders every collective of a communicator, the agreement too:
    rank 0 starting Iagree before a Barrier that rank 1 enters before its
    Iagree is an error, told so, not a silent pass."""
    outcome = run_program(tmp_path, """
    cell = np.array([1], dtype=np.intc)
    if rank == 0:
        request = comm.Iagree(cell); comm.Barrier()
    else:
        comm.Barrier(); request = comm.Iagree(cell)
    request.Wait()
    """, 2, header=HEADER)
    assert outcome.status != 0 and "CollectiveMismatch" in outcome.error, outcome.error


@pytest.mark.slow
def test_an_iagree_one_rank_never_starts_is_a_hang_naming_it(tmp_path):
    outcome = run_program(tmp_path, """
    if rank == 0:
        comm.Iagree(np.array([1], dtype=np.intc)).Wait()
    else:
        comm.recv(source=0)
    """, 2, timeout=1.0, header=HEADER)
    assert outcome.status == HUNG
    assert "rank 1 never called Iagree" in outcome.error, outcome.error
