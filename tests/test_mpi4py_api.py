"""The mpi4py stand-in (``fake_backends.mpi4py``): unmodified mpi4py calls on
the simulator, through ``simdist run``'s ``run_script``.

Each test writes a small program to ``tmp_path`` and runs it on a few
simulated ranks; the programs assert what mpi4py under ``mpiexec`` gives
(layouts, statuses, error classes), so a failing assertion fails the run
with the rank's traceback. Failure modes (mismatched collectives, hangs,
MPI_Abort, unsupported calls) are checked on the outcome.
"""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

import simdist
from simdist._script import HUNG, run_script

PRELUDE = """\
from mpi4py import MPI
import numpy as np
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
"""


def run(tmp_path, source: str, n: int = 2, *, timeout: float = 20.0, argv=()):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent(source))
    return run_script(str(path), list(argv), n, timeout=timeout)


def ok(tmp_path, source: str, n: int = 2, **kwargs):
    outcome = run(tmp_path, source, n, **kwargs)
    assert outcome.status == 0, outcome.error
    return outcome


def lines(capfd) -> list[str]:
    return sorted(capfd.readouterr().out.splitlines())


# -- communicators ----------------------------------------------------------------
def test_comm_world_and_comm_self_give_rank_and_size(tmp_path, capfd):
    ok(tmp_path, """
        assert isinstance(comm, MPI.Intracomm) and isinstance(comm, MPI.Comm)
        assert (comm.rank, comm.size) == (rank, size) == (comm.Get_rank(), comm.Get_size())
        assert (MPI.COMM_SELF.rank, MPI.COMM_SELF.size) == (0, 1)
        assert comm.Get_name() == "MPI_COMM_WORLD" and MPI.COMM_SELF.name == "MPI_COMM_SELF"
        assert comm.Is_intra() and not comm.Is_inter() and comm.Get_topology() == MPI.UNDEFINED
        assert comm.Get_attr(MPI.TAG_UB) == 2**31 - 1
        assert comm == MPI.COMM_WORLD and comm != MPI.COMM_SELF and comm != MPI.COMM_NULL
        assert MPI.Comm(comm) == comm and not MPI.COMM_NULL
        print(f"rank {rank} of {size}")
    """, 3)
    assert lines(capfd) == [f"rank {r} of 3" for r in range(3)]


def test_split_and_the_intercommunicator_calls_convert_their_ints_as_mpi4py_does(tmp_path):
    """mpi4py converts a C int argument as Cython does: a bool is 0 or 1, a
    float is truncated, a numpy integer is its value, and anything else is
    a TypeError (a distributed-array library splits by ``rank < half``)."""
    ok(tmp_path, """
        half = comm.Split(color=rank < 1, key=False)
        assert half.size == (1 if rank < 1 else size - 1), half.size
        same = comm.Split(1.0, np.float64(-rank - 0.5))  # truncated: 0, -1, -2
        assert same.size == size and same.rank == size - 1 - rank, same.rank
        for bad in ("1", None):
            try:
                comm.Split(bad)
            except TypeError as exc:
                assert "an integer is required" in str(exc), exc
            else:
                raise AssertionError(f"Split({bad!r}) did not raise")
        if size > 1:
            inter = half.Create_intercomm(False, comm, 1 if rank < 1 else 0, tag=3.0)
            assert inter.remote_size == size - half.size, inter.remote_size
            if rank < 1:  # the remote group names the root by its rank there, here a bool
                inter.bcast("from 0", root=MPI.ROOT)
            else:
                assert inter.bcast(None, root=False) == "from 0"
            parts = inter.Split(True, 0.0)
            assert parts.remote_size == inter.remote_size
            parts.Free()
            inter.Free()
        group = comm.Create_group(comm.group, tag=True)
        assert group.size == size
        for made in (group, same, half):
            made.Free()
    """, 3)


def test_split_orders_by_key_and_undefined_gives_comm_null(tmp_path):
    ok(tmp_path, """
        sub = comm.Split(color=rank % 2, key=-rank)
        members = sub.allgather(rank)
        assert members == sorted(range(rank % 2, size, 2), reverse=True), members
        assert sub.rank == members.index(rank)
        none = comm.Split(MPI.UNDEFINED if rank == 0 else 0, rank)
        assert (none == MPI.COMM_NULL) == (rank == 0)
        if rank:
            assert none.size == size - 1 and none.rank == rank - 1
            none.Free()
            assert none == MPI.COMM_NULL
        try:
            comm.Split(-5)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_ARG
        else:
            raise AssertionError("Split(-5) did not raise")
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
        assert shared.size == size and shared.rank == rank
        sub.Free(); shared.Free()
    """, 4)


def test_dup_and_clone_have_their_own_messages_and_free_makes_comm_null(tmp_path):
    ok(tmp_path, """
        dup = comm.Dup()
        clone = comm.Clone()
        assert dup != comm and clone != dup and (dup.rank, dup.size) == (rank, size)
        assert dup.Compare(comm) == MPI.CONGRUENT and comm.Compare(comm) == MPI.IDENT
        if rank == 0:
            comm.send("world", dest=1, tag=5)
            dup.send("dup", dest=1, tag=5)
        elif rank == 1:
            assert dup.recv(source=0, tag=5) == "dup"    # the world's message does not match
            assert comm.recv(source=0, tag=5) == "world"
        assert dup.allreduce(1) == size
        dup.Free()
        clone.Free()
        assert dup == MPI.COMM_NULL and clone == MPI.COMM_NULL
        try:
            dup.Barrier()
        except MPI.Exception as exc:
            assert exc.Get_error_code() == MPI.ERR_COMM
        else:
            raise AssertionError("Barrier on a freed communicator did not raise")
        try:
            comm.Free()
        except MPI.Exception as exc:
            assert exc.error_code == MPI.ERR_COMM
        else:
            raise AssertionError("COMM_WORLD.Free() did not raise")
    """)



def test_a_freed_communicator_leaves_nothing_behind_on_its_rank(tmp_path):
    """A library that splits and frees per transform runs for as long as
    it likes: a freed communicator's simulator object goes."""
    ok(tmp_path, """
        import gc, weakref
        from fake_backends.mpi4py import _runtime
        states = _runtime.get().states
        before = len(states)
        for k in range(50):
            half = comm.Split(rank % 2, rank)
            cart = comm.Create_cart([size], [True])
            row = cart.Sub([True])
            gone = weakref.ref(half._state.sc)
            for c in (row, cart, half, comm.Dup()):
                c.Free()
        gc.collect()
        assert len(states) == before and gone() is None, (len(states), before)
    """)

def test_comm_self_collectives_and_messages_to_itself(tmp_path):
    ok(tmp_path, """
        me = MPI.COMM_SELF
        assert me.allreduce(rank) == rank and me.bcast({"r": rank}) == {"r": rank}
        assert me.gather(3) == [3] and me.scatter([4]) == 4 and me.alltoall([5]) == [5]
        out = np.zeros(3)
        me.Allreduce(np.arange(3.0), out)
        assert (out == np.arange(3.0)).all()
        me.send("hello", dest=0, tag=1)
        assert me.recv(source=0, tag=1) == "hello"
        big = np.arange(200_000.0)
        req = me.Isend(big, dest=0, tag=2)          # a rendezvous to itself
        got = np.zeros_like(big)
        me.Recv(got, source=0, tag=2)
        req.Wait()
        assert (got == big).all()
        d = me.Dup(); assert d.size == 1 and d.allreduce(2) == 2; d.Free()
    """)


# -- point to point -----------------------------------------------------------------
def test_send_recv_of_buffer_specs_fills_the_status(tmp_path):
    ok(tmp_path, """
        if rank == 0:
            comm.Send(np.arange(5.0), dest=1, tag=3)
            comm.Send([np.arange(4, dtype='i'), MPI.INT], dest=1, tag=4)
            comm.Send([np.arange(10, dtype='i'), 3, MPI.INT], dest=1, tag=5)
            comm.Send([np.arange(10, dtype='i'), (2, 4), MPI.INT], dest=1, tag=6)
            comm.Send([None, 'B'], dest=1, tag=7)
            comm.Send(bytearray(b"abc"), dest=1, tag=8)
        elif rank == 1:
            st = MPI.Status()
            a = np.zeros(8)
            comm.Recv(a, source=0, tag=MPI.ANY_TAG, status=st)
            assert (a[:5] == np.arange(5.0)).all() and (a[5:] == 0).all()
            assert (st.Get_source(), st.Get_tag(), st.source, st.tag) == (0, 3, 0, 3)
            assert st.Get_count() == 40 and st.count == 40 and st.Get_count(MPI.DOUBLE) == 5
            assert st.Get_count(MPI.INT) == 10 and st.Get_elements(MPI.DOUBLE) == 5
            b = np.zeros(4, 'i'); comm.Recv([b, MPI.INT], source=0, tag=4, status=st)
            assert list(b) == [0, 1, 2, 3] and st.Get_count(MPI.INT) == 4
            c = np.zeros(3, 'i'); comm.Recv([c, MPI.INT], 0, 5); assert list(c) == [0, 1, 2]
            d = np.zeros(2, 'i'); comm.Recv(d, 0, 6); assert list(d) == [4, 5]
            comm.Recv([None, 'B'], 0, 7, st); assert st.Get_count() == 0
            e = bytearray(3); comm.Recv(e, 0, 8, st); assert e == b"abc" and st.Get_count(MPI.CHAR) == 3
            odd = MPI.Status(); odd.Set_elements(MPI.BYTE, 7)
            assert odd.Get_count(MPI.INT) == MPI.UNDEFINED
    """)


def test_any_source_and_any_tag_with_status(tmp_path, capfd):
    ok(tmp_path, """
        if rank == 0:
            status = MPI.Status()
            seen = []
            for _ in range(3 * (size - 1)):
                obj = comm.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
                assert obj == (status.Get_source(), status.Get_tag()), (obj, status.source, status.tag)
                seen.append(obj)
            for src in range(1, size):   # from one source, messages arrive in the order sent
                assert [t for s, t in seen if s == src] == [10, 11, 12]
            comm.Barrier()
            buf = np.zeros(1, 'i')
            for _ in range(size - 1):
                comm.Recv(buf, source=MPI.ANY_SOURCE, tag=99, status=status)
                assert buf[0] == status.source * 7
            print("master done")
        else:
            for tag in (10, 11, 12):
                comm.send((rank, tag), dest=0, tag=tag)
            comm.Barrier()
            comm.Send(np.array([rank * 7], 'i'), dest=0, tag=99)
    """, 4)
    assert lines(capfd) == ["master done"]


def test_sendrecv_and_sendrecv_replace_shift_around_a_ring(tmp_path):
    ok(tmp_path, """
        right, left = (rank + 1) % size, (rank - 1) % size
        out = np.zeros(3)
        st = MPI.Status()
        comm.Sendrecv(np.full(3, rank, 'd'), dest=right, sendtag=1, recvbuf=out, source=left, recvtag=1, status=st)
        assert (out == left).all() and st.source == left and st.tag == 1
        buf = np.full(2, rank, 'i')
        comm.Sendrecv_replace(buf, dest=right, source=left)
        assert (buf == left).all()
        assert comm.sendrecv(("hi", rank), dest=right, source=left) == ("hi", left)
    """, 3)


def test_isend_irecv_and_the_request_class_methods(tmp_path):
    ok(tmp_path, """
        peer = 1 - rank
        a = np.zeros(4); b = np.zeros(4)
        reqs = [comm.Irecv(a, source=peer, tag=1), comm.Irecv(b, source=peer, tag=2)]
        sends = [comm.Isend(np.full(4, rank + 10.0), dest=peer, tag=2),
                 comm.Isend(np.full(4, rank + 20.0), dest=peer, tag=1)]
        statuses = [MPI.Status(), MPI.Status()]
        assert MPI.Request.Waitall(reqs, statuses) is True
        assert (a == peer + 20).all() and (b == peer + 10).all()
        assert [s.tag for s in statuses] == [1, 2] and not reqs[0] and reqs[0] == MPI.REQUEST_NULL
        MPI.Request.Waitall(sends)
        r = comm.Irecv(a, source=peer, tag=3)
        comm.Send(np.ones(4), dest=peer, tag=3)
        while not r.Test():
            pass
        assert (a == 1).all()
        reqs = [comm.Irecv(np.zeros(1), source=peer, tag=t) for t in (4, 5)]
        comm.Send(np.zeros(1), dest=peer, tag=5)
        st = MPI.Status()
        assert MPI.Request.Waitany(reqs, st) == 1 and st.tag == 5
        comm.Barrier()   # else the peer's next message may already be there
        comm.Send(np.zeros(1), dest=peer, tag=4)
        assert MPI.Request.Waitany(reqs) == 0
        assert MPI.Request.Waitany(reqs) == MPI.UNDEFINED
        reqs = [comm.Irecv(np.zeros(1), source=peer, tag=6)]
        index, flag = MPI.Request.Testany(reqs)
        assert (index, flag) == (MPI.UNDEFINED, False)
        comm.Barrier()   # no message yet: both ranks tested before sending
        comm.Send(np.zeros(1), dest=peer, tag=6)
        assert MPI.Request.Waitsome(reqs) == [0] and MPI.Request.Testall(reqs)
        p = comm.Recv_init(a, source=peer, tag=7)
        q = comm.Send_init(np.full(4, 7.0), dest=peer, tag=7)
        for _ in range(2):
            MPI.Prequest.Startall([p, q])
            MPI.Request.Waitall([p, q])
            assert (a == 7).all() and p   # a persistent request stays usable
        r = comm.Irecv(a, source=peer, tag=8)
        r.Cancel()
        st = MPI.Status(); r.Wait(st)
        assert st.Is_cancelled()
    """)


def test_lowercase_requests_return_the_objects(tmp_path):
    ok(tmp_path, """
        peer = 1 - rank
        r = comm.irecv(source=peer, tag=1)
        s = comm.isend({"from": rank}, dest=peer, tag=1)
        assert r.wait() == {"from": peer} and s.wait() is None
        rs = [comm.irecv(source=peer, tag=t) for t in (2, 3)]
        ss = [comm.isend(t * 10 + rank, dest=peer, tag=t) for t in (3, 2)]
        assert MPI.Request.waitall(rs) == [20 + peer, 30 + peer]
        MPI.Request.waitall(ss)
        r = comm.irecv(source=peer, tag=4)
        flag, obj = r.test()
        comm.Barrier()
        assert (flag, obj) == (False, None)
        comm.send([rank], dest=peer, tag=4)
        index, obj = MPI.Request.waitany([r])
        assert (index, obj) == (0, [peer])
        r = comm.irecv(source=peer, tag=5)
        comm.send("x", dest=peer, tag=5)
        flag, objs = MPI.Request.testall([r])
        while not flag:
            flag, objs = MPI.Request.testall([r])
        assert objs == ["x"]
    """)


def test_proc_null_completes_at_once_with_its_status(tmp_path):
    ok(tmp_path, """
        st = MPI.Status()
        comm.Send(np.zeros(3), dest=MPI.PROC_NULL)
        buf = np.full(3, 5.0)
        comm.Recv(buf, source=MPI.PROC_NULL, status=st)
        assert (buf == 5).all() and (st.source, st.tag, st.Get_count()) == (MPI.PROC_NULL, MPI.ANY_TAG, 0)
        assert comm.recv(source=MPI.PROC_NULL) is None
        req = comm.isend("x", dest=MPI.PROC_NULL)
        assert req and req.wait() is None and not req
        assert comm.irecv(source=MPI.PROC_NULL).wait() is None
        assert comm.Probe(source=MPI.PROC_NULL, status=st) and st.source == MPI.PROC_NULL
    """)


def test_probe_iprobe_and_matched_probe(tmp_path):
    ok(tmp_path, """
        if rank == 0:
            comm.send("first", dest=1, tag=7)
            comm.Send(np.arange(6, dtype='i'), dest=1, tag=8)
            comm.send("third", dest=1, tag=9)
        elif rank == 1:
            st = MPI.Status()
            assert comm.Probe(source=0, tag=8, status=st) is True
            assert (st.source, st.tag, st.Get_count(MPI.INT)) == (0, 8, 6)
            buf = np.zeros(st.Get_count(MPI.INT), 'i')
            comm.Recv(buf, source=0, tag=8)
            assert list(buf) == list(range(6))
            while not comm.Iprobe(source=MPI.ANY_SOURCE, tag=9):
                pass
            assert not comm.Iprobe(source=0, tag=123)
            msg = comm.mprobe(source=0, tag=7, status=st)
            assert st.tag == 7 and not comm.Iprobe(source=0, tag=7)   # the matched message is taken
            assert msg.recv() == "first"
            msg = comm.improbe(source=0, tag=9)
            assert msg is not None and msg.recv() == "third"
    """)


def test_a_synchronous_send_completes_only_once_received(tmp_path):
    ok(tmp_path, """
        req = comm.issend("sync", dest=rank, tag=1)
        assert not req.Test()              # small, but synchronous: waits for the receive
        assert comm.recv(source=rank, tag=1) == "sync"
        req.Wait()
        if rank == 0:
            comm.ssend([1, 2], dest=1)
        elif rank == 1:
            assert comm.recv(source=0) == [1, 2]
    """)


def test_a_receive_buffer_too_small_raises_err_truncate(tmp_path):
    ok(tmp_path, """
        for n in (10, 300_000):            # eager and rendezvous
            if rank == 0:
                comm.Send(np.arange(float(n)), dest=1, tag=n % 100)
            elif rank == 1:
                try:
                    comm.Recv(np.zeros(n - 3), source=0, tag=n % 100)
                except MPI.Exception as exc:
                    assert exc.Get_error_class() == MPI.ERR_TRUNCATE, exc
                else:
                    raise AssertionError("no ERR_TRUNCATE")
            comm.Barrier()
    """)


def test_bad_ranks_tags_and_roots_raise_mpi_errors(tmp_path):
    ok(tmp_path, """
        for call, code in [(lambda: comm.Send(np.zeros(1), dest=size), MPI.ERR_RANK),
                           (lambda: comm.send(1, dest=0, tag=-3), MPI.ERR_TAG),
                           (lambda: comm.recv(source=-7), MPI.ERR_RANK),
                           (lambda: comm.bcast(1, root=size), MPI.ERR_ROOT),
                           (lambda: comm.Reduce(np.zeros(1), np.zeros(1), root=-1), MPI.ERR_ROOT)]:
            try:
                call()
            except MPI.Exception as exc:
                assert exc.Get_error_code() == code, (exc, code)
                assert isinstance(exc, RuntimeError) and MPI.Get_error_string(code) in str(exc)
            else:
                raise AssertionError("no MPI.Exception")
        try:
            comm.Allreduce(np.zeros(3), np.zeros(4))
        except ValueError as exc:
            assert "mismatch in send count 3 and receive count 4" in str(exc)
        try:
            comm.Send(np.arange(4.0)[::2], dest=0)
        except BufferError as exc:
            assert "not contiguous" in str(exc)
    """)


def test_large_isend_exchange_does_not_deadlock(tmp_path, capfd):
    # 16 MB each way, far larger than a ring: both ranks Isend, then Recv,
    # then Wait; an Isend that waited for its receiver would deadlock.
    ok(tmp_path, """
        peer = 1 - rank
        n = 2 * 1024 * 1024
        out = np.arange(n, dtype=np.float64) + rank
        got = np.empty(n)
        req = comm.Isend(out, dest=peer, tag=7)
        comm.Recv(got, source=peer, tag=7)
        req.Wait()
        assert (got == np.arange(n) + peer).all()
        reqs = [comm.Irecv(got, source=peer, tag=8), comm.Isend(out * 2, dest=peer, tag=8)]
        MPI.Request.Waitall(reqs)
        assert (got == 2 * (np.arange(n) + peer)).all()
        print("exchanged")
    """, timeout=30)
    assert lines(capfd) == ["exchanged", "exchanged"]


@pytest.mark.slow
def test_many_small_sends_to_a_rank_in_a_barrier_neither_block_nor_get_lost(tmp_path):
    # more than a ring of queued messages: the sender's Isends and the
    # Barrier must not wait for the receiver, and the rank returning right
    # after must still deliver them (the queue is flushed, as MPI_Finalize would).
    ok(tmp_path, """
        n = 30_000
        if rank == 0:
            reqs = [comm.isend(i, dest=1, tag=1) for i in range(n)]
            comm.Barrier()
            MPI.Request.Waitall(reqs)
        else:
            comm.Barrier()
            assert [comm.recv(source=0, tag=1) for _ in range(n)] == list(range(n))
    """, timeout=60)


@pytest.mark.slow
def test_both_ranks_sending_large_messages_first_hangs_as_under_mpi(tmp_path):
    outcome = run(tmp_path, """
        peer = 1 - rank
        comm.Send(np.zeros(1_000_000), dest=peer)     # unsafe: no receive is posted
        comm.Recv(np.zeros(1_000_000), source=peer)
    """, timeout=1.5)
    assert outcome.status == HUNG
    assert "rank 0: waiting in Send(dest=1, tag=0)" in outcome.error and "rank 1: waiting in Send(dest=0, tag=0)" in outcome.error


def test_a_large_send_to_a_rank_in_a_barrier_completes_as_under_mpi(tmp_path):
    # The receiver's posted Irecv moves inside its Barrier (MPI's progress
    # rule), so rank 0's blocking Send ends and rank 0 reaches the Barrier.
    ok(tmp_path, """
        if rank == 0:
            comm.Send(np.zeros(1_000_000), dest=1)
            comm.Barrier()
        else:
            got = np.ones(1_000_000)
            req = comm.Irecv(got, source=0)
            comm.Barrier()
            req.Wait()
            assert not got.any()
    """)


# -- collectives ----------------------------------------------------------------------
def test_bcast_gather_scatter_allgather_alltoall_layouts(tmp_path):
    ok(tmp_path, """
        a = np.arange(4, dtype='i') if rank == 1 else np.zeros(4, 'i')
        comm.Bcast([a, MPI.INT], root=1)
        assert list(a) == [0, 1, 2, 3]
        recv = np.full((size, 2), -1.0) if rank == 0 else None
        comm.Gather(np.full(2, rank * 1.5), recv, root=0)
        if rank == 0:
            assert (recv == np.repeat(np.arange(size) * 1.5, 2).reshape(size, 2)).all()
        counted = np.zeros(3 * size, 'i') if rank == 0 else None
        comm.Gather([np.full(3, rank, 'i'), 3, MPI.INT], [counted, 3, MPI.INT] if rank == 0 else None)
        if rank == 0:
            assert list(counted) == [r for r in range(size) for _ in range(3)]
        send = np.arange(size * 3, dtype=np.int64).reshape(size, 3) if rank == 2 else None
        part = np.zeros(3, np.int64)
        comm.Scatter(send, part, root=2)
        assert list(part) == [3 * rank, 3 * rank + 1, 3 * rank + 2]
        everyone = np.zeros(size, 'f')
        comm.Allgather(np.array([rank], 'f'), everyone)
        assert list(everyone) == list(range(size))
        out = np.zeros(size, 'i')
        comm.Alltoall(np.array([10 * rank + j for j in range(size)], 'i'), out)
        assert list(out) == [10 * j + rank for j in range(size)]
        comm.Barrier()
    """, 3)


def test_in_place_where_mpi_allows_it(tmp_path):
    ok(tmp_path, """
        x = np.array([rank + 1.0, 2.0])
        comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM)
        assert list(x) == [size * (size + 1) / 2, 2.0 * size]
        y = np.array([rank + 1])
        comm.Reduce(MPI.IN_PLACE if rank == 0 else y, y if rank == 0 else None, op=MPI.MAX, root=0)
        if rank == 0:
            assert y[0] == size
        g = np.zeros((size, 2)); g[rank] = rank
        comm.Gather(MPI.IN_PLACE if rank == 0 else g[rank], g if rank == 0 else None, root=0)
        if rank == 0:
            assert (g[:, 0] == np.arange(size)).all()
        s = np.arange(size * 2.0)
        mine = np.zeros(2)
        comm.Scatter(s, MPI.IN_PLACE if rank == 0 else mine, root=0)
        if rank:
            assert list(mine) == [2 * rank, 2 * rank + 1]
        ag = np.zeros(size, 'i'); ag[rank] = rank * 3
        comm.Allgather(MPI.IN_PLACE, ag)
        assert list(ag) == [3 * r for r in range(size)]
        t = np.array([10 * rank + j for j in range(size)], 'i')
        comm.Alltoall(MPI.IN_PLACE, t)
        assert list(t) == [10 * j + rank for j in range(size)]
        rs = np.arange(size * 2.0)
        comm.Reduce_scatter_block(MPI.IN_PLACE, rs, op=MPI.SUM)
        assert list(rs[:2]) == [size * 2 * rank, size * (2 * rank + 1)]
        sc = np.array([rank + 1], 'i')
        comm.Scan(MPI.IN_PLACE, sc)
        assert sc[0] == (rank + 1) * (rank + 2) // 2
        ex = np.array([rank + 1], 'i')
        comm.Exscan(MPI.IN_PLACE, ex)
        assert ex[0] == (1 if rank == 0 else rank * (rank + 1) // 2)   # rank 0's is left as it was
    """, 3)


@pytest.mark.parametrize("op, dtype, values, expected", [
    ("SUM", "i", "rank + 1", "sum(r + 1 for r in range(size))"),
    pytest.param("PROD", "d", "rank + 2.0", "float(np.prod([r + 2.0 for r in range(size)]))", marks=pytest.mark.slow),
    pytest.param("MIN", "i", "5 - rank", "5 - (size - 1)", marks=pytest.mark.slow),
    pytest.param("MAX", "f", "rank * 1.5", "(size - 1) * 1.5", marks=pytest.mark.slow),
    pytest.param("LAND", "?", "rank != 1", "False", marks=pytest.mark.slow),
    pytest.param("LOR", "?", "rank == 1", "True", marks=pytest.mark.slow),
    ("LXOR", "?", "True", "size % 2 == 1"),
    pytest.param("BAND", "i", "rank | 12", "12 & 13 & 14", marks=pytest.mark.slow),
    pytest.param("BOR", "i", "1 << rank", "7", marks=pytest.mark.slow),
    pytest.param("BXOR", "i", "rank + 1", "1 ^ 2 ^ 3", marks=pytest.mark.slow),
])
def test_predefined_ops_on_buffers(tmp_path, op, dtype, values, expected):
    ok(tmp_path, f"""
        x = np.array([{values}], dtype='{dtype}')
        out = np.zeros(1, '{dtype}')
        comm.Allreduce(x, out, op=MPI.{op})
        assert out[0] == ({expected}), (out, {expected})
        assert MPI.{op}(x[0], x[0]) is not None
    """, 3)


def test_reductions_are_the_rank_order_fold_to_the_bit(tmp_path):
    ok(tmp_path, """
        rng = np.random.default_rng(1234)
        parts = (rng.standard_normal((size, 1000)) * 10.0 ** rng.integers(-5, 5, (size, 1000))).astype(np.float32)
        fold = parts[0].copy()
        for p in parts[1:]:
            fold = fold + p
        out = np.zeros(1000, np.float32)
        comm.Allreduce(parts[rank], out)
        assert out.tobytes() == fold.tobytes()
        red = np.zeros(1000, np.float32)
        comm.Reduce(parts[rank], red, root=size - 1)
        scan = np.zeros(1000, np.float32)
        comm.Scan(parts[rank], scan)
        if rank == size - 1:
            assert red.tobytes() == fold.tobytes() and scan.tobytes() == fold.tobytes()
        assert comm.allreduce(float(parts[rank][0])) == sum(float(p[0]) for p in parts)
    """, 4)


def test_reduce_scatter_block_reduce_scatter_scan_and_exscan(tmp_path):
    ok(tmp_path, """
        send = np.arange(size * 2, dtype='d') * (rank + 1)
        mine = np.zeros(2)
        comm.Reduce_scatter_block(send, mine, op=MPI.SUM)
        total = sum(r + 1 for r in range(size))
        assert list(mine) == [total * 2 * rank, total * (2 * rank + 1)]
        counts = [1, 2, 3][:size]
        got = np.zeros(counts[rank])
        comm.Reduce_scatter(np.arange(sum(counts), dtype='d'), got, counts, op=MPI.SUM)
        start = sum(counts[:rank])
        assert list(got) == [size * v for v in range(start, start + counts[rank])]
        s = np.zeros(1, 'i'); comm.Scan(np.array([rank + 1], 'i'), s, op=MPI.PROD)
        assert s[0] == int(np.prod(range(1, rank + 2)))
        e = np.full(1, -1, 'i'); comm.Exscan(np.array([rank + 1], 'i'), e, op=MPI.SUM)
        assert e[0] == (-1 if rank == 0 else rank * (rank + 1) // 2)
    """, 3)


def test_maxloc_and_minloc_on_objects_and_pair_datatypes(tmp_path):
    ok(tmp_path, """
        values = [3.0, 7.0, 7.0, 1.0]
        assert comm.allreduce((values[rank], rank), op=MPI.MAXLOC) == (7.0, 1)   # ties: the lower index
        assert comm.allreduce((values[rank], rank), op=MPI.MINLOC) == (1.0, 3)
        assert comm.reduce((values[rank], rank), op=MPI.MAXLOC, root=2) == ((7.0, 1) if rank == 2 else None)
        pair = np.zeros(2, dtype=MPI.DOUBLE_INT.dtype)
        pair["value"] = [values[rank], -rank]
        pair["index"] = rank
        out = np.zeros_like(pair)
        comm.Allreduce([pair, MPI.DOUBLE_INT], [out, MPI.DOUBLE_INT], op=MPI.MAXLOC)
        assert out.tolist() == [(7.0, 1), (0.0, 0)]
        comm.Allreduce([pair, MPI.DOUBLE_INT], [out, MPI.DOUBLE_INT], op=MPI.MINLOC)
        assert out.tolist() == [(1.0, 3), (-3.0, 3)]
        try:
            comm.Allreduce(np.zeros(2), np.zeros(2), op=MPI.MAXLOC)
        except MPI.Exception as exc:
            assert exc.error_class == MPI.ERR_OP and "DOUBLE_INT" in exc.detail
        else:
            raise AssertionError("MAXLOC on doubles did not raise")
    """, 4)


def test_user_ops_fold_in_rank_order(tmp_path):
    ok(tmp_path, """
        def shift_add(inbuf, inoutbuf, datatype):       # inoutbuf = inbuf op inoutbuf, not commutative
            a = np.frombuffer(inbuf, dtype='d')
            b = np.frombuffer(inoutbuf, dtype='d')
            b[:] = a * 10 + b
        op = MPI.Op.Create(shift_add, commute=False)
        assert not op.Is_commutative() and not op.is_predefined
        out = np.zeros(2)
        comm.Allreduce(np.array([rank, 1.0]), out, op=op)
        assert list(out) == [12.0, 111.0]                  # ((0*10+1)*10+2), ((1*10+1)*10+1)
        comm.Reduce(np.array([rank, 1.0]), out, op=op, root=1)
        comm.Scan(np.array([rank, 1.0]), out, op=op)
        assert out[0] == [0.0, 1.0, 12.0][rank]
        op.Free()
        assert comm.allreduce(rank, op=lambda a, b: a * 10 + b) == 12
        assert comm.allreduce(str(rank), op=MPI.SUM) == "012"
        assert MPI.SUM(1, 2) == 3 and MPI.MAX(3, 2) == 3 and MPI.MAXLOC((1, 5), (1, 3)) == (1, 3)
    """, 3)


def test_lowercase_collectives_return_objects(tmp_path):
    ok(tmp_path, """
        assert comm.bcast({"a": [1, 2]} if rank == 1 else None, root=1) == {"a": [1, 2]}
        assert comm.gather(rank * "x", root=0) == ([r * "x" for r in range(size)] if rank == 0 else None)
        assert comm.scatter([("item", r) for r in range(size)] if rank == 2 else None, root=2) == ("item", rank)
        assert comm.allgather({rank}) == [{r} for r in range(size)]
        got = comm.alltoall([(rank, j) * (j + 1) for j in range(size)])
        assert got == [(j, rank) * (rank + 1) for j in range(size)]
        assert comm.reduce(rank, op=MPI.SUM, root=0) == (sum(range(size)) if rank == 0 else None)
        assert comm.allreduce([rank]) == list(range(size))
        assert comm.scan(rank) == rank * (rank + 1) // 2
        assert comm.exscan(rank + 1) == (None if rank == 0 else rank * (rank + 1) // 2)
        assert comm.allreduce(np.arange(3) * rank, op=MPI.SUM).tolist() == [0, 3, 6]
        assert comm.bcast((MPI.SUM, MPI.DOUBLE, MPI.IN_PLACE)) == (MPI.SUM, MPI.DOUBLE, MPI.IN_PLACE)
        comm.barrier()
        try:
            MPI.COMM_SELF.scatter([1, 2], root=0)
        except ValueError as exc:
            assert "expecting 1 items, got 2" in str(exc)
        else:
            raise AssertionError("scatter of 2 items on 1 rank did not raise")
    """, 3)


def test_vector_collectives(tmp_path):
    ok(tmp_path, """
        counts = [r + 1 for r in range(size)]
        displs = [sum(counts[:r]) for r in range(size)]
        mine = np.full(rank + 1, rank, 'i')
        whole = np.zeros(sum(counts), 'i')
        comm.Gatherv(mine, [whole, (counts, displs), MPI.INT] if rank == 0 else None, root=0)
        expected = [r for r in range(size) for _ in range(r + 1)]
        if rank == 0:
            assert whole.tolist() == expected
        comm.Allgatherv([mine, MPI.INT], [whole, counts, displs, MPI.INT])
        assert whole.tolist() == expected
        part = np.zeros(rank + 1, 'i')
        comm.Scatterv([np.array(expected, 'i'), counts, displs, MPI.INT] if rank == 1 else None, part, root=1)
        assert (part == rank).all()
        sendcounts = [1] * size
        out = np.zeros(size, 'i')
        comm.Alltoallv([np.arange(size, dtype='i') + 10 * rank, sendcounts], [out, sendcounts])
        assert out.tolist() == [10 * j + rank for j in range(size)]
    """, 3)


def test_mismatched_collectives_raise_collective_mismatch(tmp_path):
    outcome = run(tmp_path, """
        if rank == 0:
            comm.Bcast(np.zeros(3), root=0)
        else:
            comm.Allreduce(np.zeros(3), np.zeros(3))
    """)
    assert outcome.status == 1
    assert "CollectiveMismatch" in outcome.error and "broadcast" in outcome.error and "allreduce" in outcome.error
    outcome = run(tmp_path, """
        comm.Allreduce(np.zeros(3 + rank), np.zeros(3 + rank))    # different counts
    """)
    assert outcome.status == 1 and "CollectiveMismatch" in outcome.error


# -- failures, environment ---------------------------------------------------------------------
@pytest.mark.slow
def test_a_hang_ends_with_status_124_and_the_report(tmp_path):
    outcome = run(tmp_path, """
        comm.Barrier()
        comm.Recv(np.zeros(3), source=1 - rank)     # both receive first: deadlock
    """, timeout=1.0)
    assert outcome.status == HUNG
    assert "deadlock: rank 0 in Recv(source=1, tag=ANY_TAG)" in outcome.error
    assert "rank 1: waiting in Recv(source=0, tag=ANY_TAG)" in outcome.error


def test_a_receive_from_a_rank_that_returned_is_reported_with_the_call(tmp_path):
    outcome = run(tmp_path, """
        if rank == 0:
            comm.recv(source=1, tag=4)
    """)
    assert outcome.status == 1
    assert "recv(source=1, tag=4) on MPI_COMM_WORLD" in outcome.error and "returned" in outcome.error


def test_a_failing_rank_fails_the_run_with_its_traceback(tmp_path):
    outcome = run(tmp_path, """
        comm.Barrier()
        if rank == 1:
            raise ValueError("rank 1 is unhappy")
        comm.recv(source=1)
    """)
    assert outcome.status == 1
    assert "--- rank 1 ---" in outcome.error and "ValueError: rank 1 is unhappy" in outcome.error


def test_abort_ends_the_run_with_its_error_code(tmp_path, capfd):
    outcome = run(tmp_path, """
        print(f"rank {rank} before", flush=True)
        comm.Barrier()
        if rank == 1:
            try:
                MPI.COMM_WORLD.Abort(7)
            except Exception:
                print("Abort was caught")              # never: MPI_Abort cannot be caught
        comm.Barrier()
    """, 3)
    assert outcome.status == 7
    assert outcome.error == "simdist run: MPI_Abort(7) on rank 1"
    assert lines(capfd) == ["rank 0 before", "rank 1 before", "rank 2 before"]


@pytest.mark.parametrize("caught", ["finally: sys.exit(0)", "except BaseException: pass"])
def test_an_abort_the_program_catches_still_ends_the_job_and_runs_no_exit_handler(tmp_path, capfd, caught):
    """MPI_Abort never returns: a ``finally`` that calls ``sys.exit(0)``
    (schwimmbad's pool worker leaves so) or an ``except BaseException``
    does not undo it, and no rank of the killed job runs an ``atexit``
    handler."""
    outcome = run(tmp_path, f"""
        import atexit, sys
        atexit.register(print, f"rank {{rank}}: exit handler", flush=True)
        if rank == 1:
            try:
                MPI.COMM_WORLD.Abort(4)
            {caught}
            print("rank 1: on, for all it knows", flush=True)
        else:
            comm.Barrier()                              # rank 1 never comes
    """, 3)
    assert (outcome.status, outcome.error) == (4, "simdist run: MPI_Abort(4) on rank 1")
    assert "exit handler" not in capfd.readouterr().out


def test_abort_through_the_command_line(tmp_path):
    import subprocess

    path = tmp_path / "abort.py"
    path.write_text("from mpi4py import MPI\nif MPI.COMM_WORLD.rank == 0:\n    MPI.COMM_WORLD.Abort(3)\n"
                    "MPI.COMM_WORLD.Barrier()\n")
    done = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "2", str(path)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 3 and "MPI_Abort(3) on rank 0" in done.stderr


@pytest.mark.parametrize("call, text", [
    ("MPI.Remove_error_class(1)", "MPI.Remove_error_class is not supported"),
    ("MPI.Register_datarep('x', None, None, None)", "MPI.Register_datarep is not supported"),
    ("comm.Revoke()", "Intracomm.Revoke is not supported"),
    ("__import__('mpi4py').get_include()", "mpi4py.get_include() is not supported"),
])
def test_unsupported_calls_raise_not_implemented_error_naming_the_call(tmp_path, call, text):
    ok(tmp_path, f"""
        try:
            {call}
        except NotImplementedError as exc:
            assert "{text}" in str(exc), str(exc)
            assert "simdist's simulated MPI" in str(exc)
        else:
            raise AssertionError("no NotImplementedError")
        for get in (lambda: comm.no_such_call, lambda: MPI.NO_SUCH_NAME):
            try:
                get()
            except AttributeError:
                pass
            else:
                raise AssertionError("no AttributeError")
    """, 1)


def test_a_port_that_is_not_open_here_is_refused_with_err_port(tmp_path):
    ok(tmp_path, """
        port = MPI.Open_port()
        MPI.Close_port(port)
        for call in (lambda: MPI.COMM_SELF.Accept(port), lambda: MPI.Close_port(port),
                     lambda: MPI.COMM_SELF.Connect("no-such-port")):
            try:
                call()
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_PORT, exc
            else:
                raise AssertionError("no MPI.ERR_PORT")
    """, 1)


def test_environment_calls_and_the_mpi4py_package(tmp_path, capfd):
    ok(tmp_path, """
        import socket
        import mpi4py
        assert mpi4py.__version__.startswith("4.") and mpi4py.get_config() == {}
        mpi4py.rc.threads = False
        mpi4py.rc.thread_level = "single"
        mpi4py.rc(initialize=True, finalize=None)
        try:
            mpi4py.rc.no_such_option = 1
        except TypeError:
            pass
        else:
            raise AssertionError("rc took an unknown option")
        t0 = MPI.Wtime(); t1 = MPI.Wtime()
        assert t1 >= t0 >= 0 and 0 < MPI.Wtick() < 1e-3
        assert MPI.Get_processor_name() == socket.gethostname()
        assert MPI.Get_version() == (3, 1) and (MPI.VERSION, MPI.SUBVERSION) == (3, 1)
        assert "simdist" in MPI.Get_library_version() and "simulated MPI" in MPI.Get_library_version()
        assert MPI.Is_initialized() and not MPI.Is_finalized()
        assert MPI.Query_thread() == MPI.THREAD_SERIALIZED == MPI.Init_thread(MPI.THREAD_MULTIPLE)
        assert (MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.PROC_NULL, MPI.UNDEFINED) == (-1, -1, -2, -32766)
        assert MPI.Compute_dims(12, 2) == [4, 3] and MPI.Compute_dims(8, [0, 2, 0]) == [2, 2, 2]
        assert MPI.ERR_TRUNCATE == 15 and MPI.Get_error_string(MPI.ERR_RANK) == "MPI_ERR_RANK: invalid rank"
        comm.send(rank, dest=1 - rank)
        assert comm.recv(source=1 - rank) == 1 - rank
        MPI.Finalize()
        assert MPI.Is_finalized()
        try:
            comm.Barrier()
        except MPI.Exception:
            print("no calls after Finalize")
    """)
    assert lines(capfd) == ["no calls after Finalize"] * 2


@pytest.mark.parametrize("name, dtype", [
    ("INT", "int32"), ("LONG", "int64"), ("SHORT", "int16"), ("FLOAT", "float32"), ("DOUBLE", "float64"),
    ("C_BOOL", "bool"), ("BYTE", "uint8"), ("CHAR", "S1"), ("SIGNED_CHAR", "int8"), ("UNSIGNED", "uint32"),
    ("INT8_T", "int8"), ("INT16_T", "int16"), ("INT32_T", "int32"), ("INT64_T", "int64"),
    ("UINT8_T", "uint8"), ("UINT16_T", "uint16"), ("UINT32_T", "uint32"), ("UINT64_T", "uint64"),
    ("COMPLEX", "complex64"), ("DOUBLE_COMPLEX", "complex128"), ("C_DOUBLE_COMPLEX", "complex128"),
    ("LONG_DOUBLE", "longdouble"), ("FLOAT16_T", "float16"),
])
def test_datatypes_are_numpy_dtypes(name, dtype):
    from fake_backends.mpi4py import MPI

    datatype = getattr(MPI, name)
    assert datatype.dtype == np.dtype(dtype)
    assert datatype.Get_size() == np.dtype(dtype).itemsize == datatype.size
    assert datatype.Get_extent() == (0, datatype.size)


def test_every_supported_dtype_round_trips_through_send_and_bcast(tmp_path):
    ok(tmp_path, """
        for code in "?bBhHiIlLqQefdgFD":
            # zeros first: long double's 6 padding bytes would hold whatever
            # each process's memory held, and ranks compare their own x
            x = np.zeros(5, code)
            x[...] = (np.arange(5) % 2 == 1) if code == "?" else np.arange(5)
            got = np.zeros_like(x)
            if rank == 0:
                comm.Send(x, dest=1, tag=1)
            else:
                comm.Recv(got, source=0, tag=1)
                assert got.tobytes() == x.tobytes(), code
            b = x.copy() if rank == 0 else np.zeros_like(x)
            comm.Bcast(b, root=0)
            assert b.tobytes() == x.tobytes(), code
            assert MPI._typedict[x.dtype.char].Get_size() == x.dtype.itemsize or code == "B"
    """)


def test_the_script_runs_as_python_runs_it(tmp_path):
    # as `mpiexec python prog.py`: the script's directory first on sys.path
    # (so that its helper modules import), __file__ absolute, argv[0] as given
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    ok(tmp_path, """
        import os, sys
        import helper
        assert helper.VALUE == 42 and sys.path[0] == os.path.dirname(__file__) and os.path.isabs(__file__)
        assert sys.argv[1:] == ["a", "b"]
    """, argv=("a", "b"))


def test_the_stand_in_is_installed_only_while_the_script_runs(tmp_path):
    with simdist.World(2) as world:
        path = tmp_path / "prog.py"
        path.write_text("import sys\nfrom mpi4py import MPI\nassert sys.modules['mpi4py.MPI'] is MPI\n")
        from simdist._script import _rank_main

        assert world.run(_rank_main, str(path), [], False, True) == [0, 0]
        after = world.run(lambda comm: sorted(n for n in sys.modules if n.split(".")[0] == "mpi4py"))
        assert all("mpi4py.MPI" not in names for names in after)


def test_installed_works_in_a_world_run_function():
    import fake_backends.mpi4py

    def program(comm):
        with fake_backends.mpi4py.installed(comm) as MPI:
            world = MPI.COMM_WORLD
            total = world.allreduce(world.rank + 1)
            peer = (world.rank + 1) % world.size
            got = world.sendrecv(world.rank, dest=peer, source=(world.rank - 1) % world.size)
            return total, got

    assert simdist.run(program, 3) == [(6, 2), (6, 0), (6, 1)]


def test_the_mpi_module_outside_a_run_says_how_to_run_it():
    from fake_backends.mpi4py import MPI

    with pytest.raises(simdist.SimdistError, match="simdist run -n N"):
        MPI.COMM_WORLD.Get_rank()
    assert not MPI.Is_initialized()


def _mpi4py_stub() -> str:
    """mpi4py's own description of its API (MPI.pyi), where mpi4py is installed."""
    import importlib.util
    import pathlib

    spec = importlib.util.find_spec("mpi4py")
    stub = pathlib.Path(spec.origin).parent / "MPI.pyi" if spec and spec.origin else None
    if stub is None or not stub.exists():
        pytest.skip("mpi4py is not installed (pip install -e '.[mpi]'): no MPI.pyi to compare with")
    return stub.read_text()


def test_every_name_of_mpi4py_mpi_is_there_or_not_implemented():
    import re

    from fake_backends.mpi4py import MPI

    names = {n for n in re.findall(r"^(?:class |def )?(_?[A-Za-z]\w*)\b", _mpi4py_stub(), re.M)
             if n not in ("if", "else", "from", "import")}
    assert set(MPI.__all__) <= names, set(MPI.__all__) - names
    for name in sorted(n for n in names - set(MPI.__all__) if not n.startswith("_")):
        with pytest.raises(NotImplementedError, match=f"MPI.{name} is not supported"):
            getattr(MPI, name)


def test_every_call_of_mpi4py_communicators_is_there_or_not_implemented():
    import re

    from fake_backends.mpi4py import MPI

    stub = _mpi4py_stub()
    members = set()
    for cls in ("Comm", "Intracomm"):
        body = re.search(rf"^class {cls}\b.*?\n(.*?)(?=^\S)", stub, re.M | re.S).group(1)
        members |= set(re.findall(r"^    (?:def )?([A-Za-z]\w*)", body, re.M)) - {"def"}
    comm = MPI.Intracomm()
    for name in sorted(members):
        if hasattr(MPI.Intracomm, name):
            continue
        with pytest.raises(NotImplementedError, match=f"Intracomm.{name} is not supported"):
            getattr(comm, name)
