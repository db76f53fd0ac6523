"""Messages move while their ranks wait in a blocking collective, as MPI's
progress rule has it (the stand-in's engine runs inside the simulator's
collective waits), and a program that still hangs there is reported."""

from __future__ import annotations

import textwrap
import time

import pytest

from simdist._script import run_script

PRELUDE = """\
from mpi4py import MPI
import numpy as np
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size
BIG = 1 << 20  # int32: 4 MiB, sent in pieces
"""


def run(tmp_path, source: str, n: int, timeout: float):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent(source))
    return run_script(str(path), [], n, timeout=timeout)


def test_a_big_send_and_a_posted_receive_move_while_their_ranks_wait_in_collectives(tmp_path):
    outcome = run(tmp_path, """
        got = np.empty(BIG, "i")
        request = comm.Issend(np.full(BIG, rank, "i"), right, 1)
        comm.Recv(got, left, 1)     # ends before the peer's Issend does
        comm.Barrier()              # which goes on moving here
        request.Wait()
        assert (got == left).all()
        got = np.empty(BIG, "i")
        receive = comm.Irecv(got, left, 2)
        send = comm.Isend(np.full(BIG, rank, "i"), right, 2)
        if rank % 2:
            send.Wait()             # its receiver moves the message inside the allreduce
        assert comm.allreduce(1) == size
        MPI.Request.Waitall([receive, send])
        assert (got == left).all()
    """, 3, timeout=60.0)
    assert outcome.status == 0, outcome.error


@pytest.mark.slow
def test_a_hang_with_a_message_in_flight_in_a_collective_is_reported_at_the_timeout(tmp_path):
    start = time.monotonic()
    outcome = run(tmp_path, """
        if rank == 0:
            got = np.empty(BIG, "i")
            receive = comm.Irecv(got, 1, 7)   # in flight: rank 0 moves it inside the Barrier
            comm.Barrier()
        else:
            comm.Recv(np.empty(3), 0, 8)      # never sent
    """, 2, timeout=3.0)
    elapsed = time.monotonic() - start
    assert outcome.status != 0
    assert "rank 0: waiting in barrier" in outcome.error and "rank 1: waiting in Recv(source=0, tag=8)" in outcome.error, (
        outcome.error)
    assert elapsed < 30, f"the hang took {elapsed:.1f} s to report"


def test_a_deadlock_with_nothing_in_flight_is_still_reported_at_once(tmp_path):
    outcome = run(tmp_path, """
        if rank == 0:
            comm.Barrier()
        else:
            comm.Recv(np.empty(3), 0, 8)
    """, 2, timeout=60.0)
    assert outcome.status != 0 and "deadlock" in outcome.error, outcome.error
