"""MPI's point-to-point semantics in the mpi4py stand-in (issue 24):
persistent requests, empty messages to the lowercase API, buffered mode
and packing. Each program asserts what mpi4py under Open MPI gives."""

from __future__ import annotations

import textwrap

from simdist._script import run_script

PRELUDE = """\
from mpi4py import MPI
import numpy as np
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size
"""


def ok(tmp_path, source: str, n: int = 2):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent(source))
    outcome = run_script(str(path), [], n, timeout=20.0)
    assert outcome.status == 0, outcome.error


def test_a_completed_persistent_request_is_inactive_not_null_until_freed(tmp_path):
    ok(tmp_path, """
        sbuf, rbuf = np.zeros(3), np.zeros(3)
        send = comm.Send_init(sbuf, right, 4)
        recv = comm.Recv_init(rbuf, left, 4)
        assert send != MPI.REQUEST_NULL and send and recv
        for round in range(3):
            sbuf[:] = 10 * rank + round  # each Start sends the buffer as it is then
            send.Start()
            recv.Start()
            send.Wait()
            status = MPI.Status()
            recv.Wait(status)
            assert rbuf.tolist() == [10.0 * left + round] * 3 and status.Get_source() == left
            assert send != MPI.REQUEST_NULL and recv != MPI.REQUEST_NULL
        assert recv.Test() and recv.Wait()  # inactive: at once
        reqs = [send, recv]
        MPI.Prequest.Startall(reqs)
        first = MPI.Request.Waitany(reqs)
        second = MPI.Request.Waitany(reqs)
        assert {first, second} == {0, 1} and MPI.Request.Waitany(reqs) == MPI.UNDEFINED
        assert reqs[0] != MPI.REQUEST_NULL and reqs[1] != MPI.REQUEST_NULL
        send.Free()
        recv.Free()
        assert send == MPI.REQUEST_NULL and recv == MPI.REQUEST_NULL and not send
    """)


def test_start_of_an_active_request_raises_and_startall_starts_all_or_none(tmp_path):
    ok(tmp_path, """
        rbuf = np.zeros(2)
        recv = comm.Recv_init(rbuf, left, 6)
        recv.Start()
        try:
            recv.Start()
            raise AssertionError("Start of an active request did not raise")
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_REQUEST
        send = comm.Send_init(np.full(2, 1.0 * rank), right, 6)
        try:
            MPI.Prequest.Startall([send, recv])  # recv is active: neither starts
            raise AssertionError("Startall did not raise")
        except MPI.Exception:
            pass
        assert not comm.Iprobe(left, 6)
        comm.Barrier()
        assert not comm.Iprobe(left, 6), "Startall sent although it raised"
        send.Start()
        MPI.Request.Waitall([send, recv])
        assert rbuf.tolist() == [1.0 * left] * 2
        send.Free()
        recv.Free()
    """)


def test_recv_of_an_empty_message_returns_none(tmp_path):
    ok(tmp_path, """
        comm.Send([None, MPI.BYTE], right, 1)
        assert comm.recv(None, left, 1) is None
        req = comm.Isend([None, MPI.BYTE], right, 2)
        assert comm.irecv(source=left, tag=2).wait() is None
        req.Wait()
        comm.Send([None, MPI.BYTE], right, 3)
        assert comm.mprobe(left, 3).recv() is None
    """)
