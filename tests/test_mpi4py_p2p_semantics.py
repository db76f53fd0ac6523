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
        comm.Barrier()
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


def test_buffered_sends_draw_on_the_attached_buffer_and_raise_err_buffer_beyond_it(tmp_path):
    ok(tmp_path, """
        def refused(send):
            try:
                send()
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_BUFFER, exc
                return True
            return False

        big = np.arange(20000.0)  # a rendezvous message: it holds its space until received
        assert refused(lambda: comm.Bsend(big, right, 1))  # nothing attached
        mem = MPI.Alloc_mem(big.nbytes + MPI.BSEND_OVERHEAD)
        MPI.Attach_buffer(mem)
        assert refused(lambda: MPI.Attach_buffer(bytearray(10)))
        comm.Bsend(big, right, 1)  # completes at once, before the receive is posted
        big[:] = -1  # the message was copied
        assert refused(lambda: comm.Bsend(np.zeros(1), right, 2))  # the buffer is full
        assert refused(lambda: comm.bsend("x", right, 2))
        comm.Bsend(None, MPI.PROC_NULL)
        comm.Barrier()  # no rank receives (and frees a peer's buffer) before every rank found it full
        got = np.zeros(20000)
        comm.Recv(got, left, 1)
        assert got[-1] == 19999.0
        assert not comm.Iprobe(left, 2), "a refused Bsend sent its message"
        assert MPI.Detach_buffer() is mem  # waits until the message has left
        MPI.Attach_buffer(MPI.BUFFER_AUTOMATIC)
        comm.Ibsend(np.full(3, 1.0 * rank), right, 3).Wait()
        req = comm.Bsend_init(np.full(3, 2.0 * rank), right, 4)
        for tag in (3, 4, 4):
            if tag == 4:
                req.Start()
                req.Wait()
            comm.Recv(got[:3], left, tag)
            assert got[:3].tolist() == [(tag - 2) * left] * 3
        req.Free()
        comm.bsend({"from": rank}, right, 5)
        assert comm.recv(None, left, 5) == {"from": left}
        assert MPI.Detach_buffer() is MPI.BUFFER_AUTOMATIC
    """)


def test_startall_of_buffered_sends_that_do_not_all_fit_starts_none(tmp_path):
    ok(tmp_path, """
        data = np.arange(20000.0)
        MPI.Attach_buffer(bytearray(data.nbytes + MPI.BSEND_OVERHEAD))
        reqs = [comm.Bsend_init(data, right, 1), comm.Bsend_init(data, right, 2)]
        try:
            MPI.Prequest.Startall(reqs)
            raise AssertionError("Startall did not raise")
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_BUFFER
        comm.Barrier()
        assert not comm.Iprobe(left, MPI.ANY_TAG), "Startall sent although it raised"
        comm.Barrier()
        MPI.Prequest.Startall(reqs[:1])
        MPI.Request.Waitall(reqs)
        got = np.zeros(20000)
        comm.Recv(got, left, 1)
        MPI.Detach_buffer()
        for req in reqs:
            req.Free()
    """)


def test_pack_and_unpack_round_trip_and_external32_is_big_endian(tmp_path):
    ok(tmp_path, """
        ints, doubles = np.arange(3, dtype="i"), np.arange(2.0)
        size = MPI.INT.Pack_size(3, comm) + MPI.DOUBLE.Pack_size(2, comm)
        assert size == 28
        out = bytearray(size)
        position = MPI.INT.Pack(ints, out, 0, comm)
        position = MPI.DOUBLE.Pack(doubles, out, position, comm)
        assert position == 28 and bytes(out[:4]) == ints[:1].tobytes()
        back_i, back_d = np.zeros(3, "i"), np.zeros(2)
        position = MPI.INT.Unpack(out, 0, back_i, comm)
        assert MPI.DOUBLE.Unpack(out, position, back_d, comm) == 28
        assert back_i.tolist() == [0, 1, 2] and back_d.tolist() == [0.0, 1.0]
        ext = bytearray(MPI.INT.Pack_external_size("external32", 3))
        assert MPI.INT.Pack_external("external32", ints, ext, 0) == 12
        assert bytes(ext).hex() == "000000000000000100000002"
        back_i[:] = 0
        assert MPI.INT.Unpack_external("external32", ext, 0, back_i) == 12 and back_i.tolist() == [0, 1, 2]
        for call in (lambda: MPI.DOUBLE.Pack(np.arange(4.0), out, 0, comm),
                     lambda: MPI.DOUBLE.Unpack(out, 24, np.zeros(1), comm)):
            try:
                call()
                raise AssertionError("no ERR_TRUNCATE")
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_TRUNCATE
    """, 1)


def test_waitsome_completes_every_done_request_before_it_raises_the_error_of_one(tmp_path):
    ok(tmp_path, """
        data = np.arange(4.0)
        sends = [comm.Isend(data, right, 7), comm.Isend(data, right, 8)]
        small, whole = np.zeros(2), np.zeros(4)
        recvs = [comm.Irecv(small, left, 7), comm.Irecv(whole, left, 8)]  # the first is truncated
        MPI.Request.Waitall(sends)
        while not all(req.Get_status() for req in recvs):
            pass
        try:
            MPI.Request.Waitsome(recvs)
            raise AssertionError("Waitsome did not raise ERR_TRUNCATE")
        except MPI.Exception:
            pass
        assert recvs[0] == MPI.REQUEST_NULL and recvs[1] == MPI.REQUEST_NULL, recvs
        assert whole.tolist() == data.tolist()
    """)


def test_recv_with_a_buffer_warns_as_mpi4py_and_a_received_no_proc_copy_becomes_null(tmp_path):
    ok(tmp_path, """
        import warnings
        req = comm.isend("42", rank)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert comm.recv(bytearray(128), rank) == "42"
        assert [str(w.message) for w in caught] == ["the 'buf' argument is deprecated"]
        req.wait()
        copy = MPI.Message(MPI.MESSAGE_NO_PROC)
        assert copy == MPI.MESSAGE_NO_PROC and copy.recv() is None
        assert copy == MPI.MESSAGE_NULL and MPI.MESSAGE_NO_PROC and MPI.MESSAGE_NO_PROC.recv() is None
        probed = comm.mprobe(MPI.PROC_NULL)  # a new handle, as mpi4py's under Open MPI
        assert probed == MPI.MESSAGE_NO_PROC and probed is not MPI.MESSAGE_NO_PROC
        assert MPI.Request(comm.Send_init(b"", MPI.PROC_NULL)) != MPI.REQUEST_NULL
    """, 1)


def test_a_synchronous_send_of_an_empty_message_completes(tmp_path):
    ok(tmp_path, """
        for peer_to, peer_from in ((right, left), (rank, rank)):
            req = comm.Issend([None, MPI.BYTE], peer_to, 9)
            status = MPI.Status()
            comm.Recv([None, MPI.BYTE], peer_from, 9, status)
            req.Wait()
            assert status.Get_source() == peer_from and status.Get_count(MPI.BYTE) == 0
    """)


def test_get_status_all_any_some_peek_without_completing_and_statuses_may_be_a_tuple(tmp_path):
    ok(tmp_path, """
        got = np.zeros(2)
        recv = comm.Irecv(got, left, 3)
        comm.Send(np.full(2, 1.0 * rank), right, 3)
        while not MPI.Request.Get_status_all([recv]):
            pass
        status = MPI.Status()
        assert MPI.Request.Get_status_any([MPI.REQUEST_NULL, recv], status) == (1, True)
        assert status.Get_source() == left and recv != MPI.REQUEST_NULL  # not completed
        assert MPI.Request.Get_status_some([recv]) == [0]
        statuses = (MPI.Status(),)
        MPI.Request.Waitall([recv, MPI.REQUEST_NULL], statuses)  # a tuple: filled as far as it goes
        assert statuses[0].Get_source() == left and recv == MPI.REQUEST_NULL
        assert MPI.Request.Get_status_any([recv]) == (MPI.UNDEFINED, True)
        assert MPI.Request.Get_status_some([recv]) is None
    """)


def test_isendrecv_and_isendrecv_replace_complete_as_one_request(tmp_path):
    ok(tmp_path, """
        got, status = np.zeros(2), MPI.Status()
        req = comm.Isendrecv(np.full(2, 1.0 * rank), right, 4, got, left, 4)
        assert req != MPI.REQUEST_NULL
        req.Wait(status)
        assert got.tolist() == [1.0 * left] * 2 and status.Get_source() == left and req == MPI.REQUEST_NULL
        buf = np.full(3, 2.0 * rank)
        req = comm.Isendrecv_replace(buf, right, 5, left, 5)
        req.Wait()  # (the buffer is the program's again only now: a receive may fill it before)
        assert buf.tolist() == [2.0 * left] * 3
        comm.Isendrecv_replace(None, MPI.PROC_NULL, 0, MPI.PROC_NULL, 0).Wait()
    """)


def test_ranks_tags_and_roots_convert_as_mpi4py_converts_a_c_int(tmp_path):
    # mpi4py (Cython) takes any number with __int__, truncated: the OSU
    # multi-latency demo passes size / 2 as a rank; a str or None is a TypeError.
    ok(tmp_path, """
        pairs = size / 2
        partner = rank + pairs if rank < pairs else rank - pairs
        assert comm.sendrecv(rank, dest=partner, source=partner, sendtag=1.0, recvtag=1.9) == int(partner)
        r = np.zeros(1)
        req = comm.Irecv(r, rank + 0.5, 2)
        comm.Send(np.full(1, 3.0), rank + 0.9, np.float64(2.2))
        req.Wait()
        assert r[0] == 3.0
        assert comm.bcast(rank, root=1.0) == 1 and comm.reduce(1, root=np.float32(0)) == (size if rank == 0 else None)
        for bad in ("0", None):
            for call in (lambda: comm.Send(r, bad, 1), lambda: comm.send(1, 0, tag=bad), lambda: comm.bcast(1, root=bad)):
                try:
                    call()
                except TypeError as exc:
                    assert "an integer is required" in str(exc)
                else:
                    raise AssertionError(f"{bad!r} accepted")
        try:
            comm.Irecv(r, size + True, 1)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_RANK
        else:
            raise AssertionError("rank size + True accepted")
    """)
