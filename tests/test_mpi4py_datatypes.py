"""Derived datatypes of the mpi4py stand-in: their type maps, extents and
contents as Open MPI gives them, and their byte placement in point-to-point
and collective calls (a receive writes only the bytes the type map covers;
counts repeat at the extent), as MPI defines it.

The values asserted were measured with mpi4py 4.1 under Open MPI 5; the
halo exchange also runs under mpiexec in tests/mpi4py_programs/.
"""

from __future__ import annotations

import pytest

from test_mpi4py_api import ok

HALO = """
    rows, cols = 4, 6
    a = np.full((rows, cols), -1.0)
    a[:, 1:-1] = rank * 100 + np.arange(rows)[:, None] * 10 + np.arange(1, cols - 1)
    col = MPI.DOUBLE.Create_vector(rows, 1, cols).Commit()
    right, left = (rank + 1) % size, (rank - 1) % size
    flat = a.reshape(-1)
    comm.Sendrecv([flat[cols - 2:], 1, col], right, 0, [flat, 1, col], left, 0)
    st = MPI.Status()
    comm.Sendrecv([flat[1:], 1, col], left, 1, [flat[cols - 1:], 1, col], right, 1, status=st)
    assert (st.Get_count(col), st.Get_elements(col), st.Get_count(MPI.DOUBLE)) == (1, rows, rows)
    assert (a[:, 0] == left * 100 + np.arange(rows) * 10 + cols - 2).all(), a
    assert (a[:, -1] == right * 100 + np.arange(rows) * 10 + 1).all(), a
    assert (a[:, 1:-1] == rank * 100 + np.arange(rows)[:, None] * 10 + np.arange(1, cols - 1)).all(), a
    col.Free()
    assert col == MPI.DATATYPE_NULL
"""


@pytest.mark.parametrize("n", [3, pytest.param(2, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)])
def test_halo_exchange_of_columns_with_a_vector_type_on_a_periodic_ring(tmp_path, n):
    ok(tmp_path, HALO, n)


def test_constructors_give_open_mpis_extents_sizes_and_contents(tmp_path):
    ok(tmp_path, """
        d = MPI.DOUBLE
        cases = [
            (d.Create_contiguous(3), (1, 0, 0, 1, 2), (0, 24), (0, 24), 24),
            (d.Create_vector(2, 3, 4), (3, 0, 0, 1, 3), (0, 56), (0, 56), 48),
            (d.Create_hvector(2, 3, 40), (2, 1, 0, 1, 5), (0, 64), (0, 64), 48),
            (d.Create_indexed([1, 2], [0, 5]), (5, 0, 0, 1, 6), (0, 56), (0, 56), 24),
            (d.Create_hindexed([1, 2], [0, 40]), (3, 2, 0, 1, 8), (0, 56), (0, 56), 24),
            (d.Create_indexed_block(2, [0, 5]), (4, 0, 0, 1, 9), (0, 56), (0, 56), 32),
            (d.Create_hindexed_block(2, [0, 40]), (2, 2, 0, 1, 18), (0, 56), (0, 56), 32),
            (MPI.Datatype.Create_struct([1, 2], [0, 8], [MPI.INT, d]), (3, 2, 0, 2, 11), (0, 24), (0, 24), 20),
            (MPI.Datatype.Create_struct([1, 1], [0, 8], [d, MPI.INT]), (3, 2, 0, 2, 11), (0, 16), (0, 12), 12),
            (d.Create_subarray([4, 5], [2, 3], [1, 1]), (8, 0, 0, 1, 12), (0, 160), (48, 64), 48),
            (d.Create_resized(-8, 32), (0, 2, 0, 1, 17), (-8, 32), (0, 8), 8),
            (d.Create_darray(2, 1, [4, 6], [MPI.DISTRIBUTE_BLOCK, MPI.DISTRIBUTE_CYCLIC],
                             [MPI.DISTRIBUTE_DFLT_DARG, 2], [2, 1]), (12, 0, 0, 1, 13), (0, 192), (96, 96), 96),
        ]
        for t, envelope, extent, true_extent, tsize in cases:
            got = (t.Get_envelope(), t.Get_extent(), t.Get_true_extent(), t.Get_size())
            assert got == (envelope, extent, true_extent, tsize), (t.decode(), got)
            assert not t.is_named and not t.is_predefined
        v = cases[1][0]
        assert v.Get_contents() == ([2, 3, 4], [], [], [d])
        assert v.decode() == (d, "VECTOR", {"count": 2, "blocklength": 3, "stride": 4})
        assert MPI.DOUBLE.Get_envelope() == (0, 0, 0, 0, MPI.COMBINER_NAMED) and MPI.DOUBLE.is_predefined
        import pickle
        again = pickle.loads(pickle.dumps(v))
        assert again.decode()[1:] == v.decode()[1:] and again != v
        for t, *_ in cases:
            t.Free()
        try:
            v.Get_contents()
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_TYPE
        else:
            raise AssertionError("Get_contents of a freed datatype")
        big = MPI.BYTE.Create_contiguous(2**31 - 1)
        assert big.size == 2**31 - 1
        big.Free()
    """, 1)


def test_a_receive_writes_only_the_bytes_the_type_map_covers(tmp_path):
    ok(tmp_path, """
        holes = MPI.INT.Create_indexed([2, 1], [1, 5]).Commit()   # ints 1, 2 and 5 of each 6
        two = holes.Create_resized(0, 7 * 4).Commit()              # two of them, 7 ints apart
        if rank == 0:
            comm.Send(np.arange(10, 16, dtype="i"), 1)               # 6 ints: two elements of `two`
            comm.Send(np.arange(20, 24, dtype="i"), 1)               # 4 ints: fewer than 2 x 3
            comm.Send(np.arange(30, 38, dtype="i"), 1)               # 8 ints: too many
        elif rank == 1:
            buf = np.full(14, -1, "i")
            st = MPI.Status()
            comm.Recv([buf, 2, two], 0, status=st)
            assert buf.tolist() == [-1, 10, 11, -1, -1, 12, -1, -1, 13, 14, -1, -1, 15, -1], buf
            assert (st.Get_count(two), st.Get_elements(two), st.Get_count(MPI.INT)) == (2, 6, 6)
            buf[:] = -1
            comm.Recv([buf, 2, two], 0, status=st)
            assert buf.tolist() == [-1, 20, 21, -1, -1, 22, -1, -1, 23, -1, -1, -1, -1, -1], buf
            assert st.Get_count(two) == MPI.UNDEFINED and st.Get_elements(two) == 4
            buf[:] = -1
            try:
                comm.Recv([buf, 2, two], 0)
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_TRUNCATE
            else:
                raise AssertionError("no truncation error")
        holes.Free()
        two.Free()
    """, 2)


@pytest.mark.slow
def test_nonblocking_persistent_and_sendrecv_replace_place_bytes_as_blocking_calls(tmp_path):
    ok(tmp_path, """
        every_other = MPI.DOUBLE.Create_vector(3, 1, 2).Commit()
        peer = 1 - rank
        out = np.arange(6.0) + 10 * rank
        into = np.zeros(6)
        recv = comm.Irecv([into, 1, every_other], peer)
        comm.Isend([out, 1, every_other], peer).Wait()
        recv.Wait()
        assert into.tolist() == [10 * peer, 0, 10 * peer + 2, 0, 10 * peer + 4, 0], into
        send = comm.Send_init([out, 1, every_other], peer)
        got = comm.Recv_init([into, 1, every_other], peer)
        for step in range(2):
            out[:] = 100 * step + rank
            into[:] = -1
            MPI.Prequest.Startall([send, got])
            MPI.Request.Waitall([send, got])
            assert into.tolist() == [100 * step + peer, -1] * 3, (step, into)
        send.Free()
        got.Free()
        buf = np.arange(6.0) + 10 * rank
        comm.Sendrecv_replace([buf, 1, every_other], peer, 0, peer, 0)
        assert buf.tolist() == [10 * peer, 10 * rank + 1, 10 * peer + 2, 10 * rank + 3, 10 * peer + 4,
                                10 * rank + 5], buf
        every_other.Free()
    """, 2)


@pytest.mark.slow
def test_collectives_move_derived_types_and_match_signatures(tmp_path):
    ok(tmp_path, """
        rows, cols = 3, size + 1
        col = MPI.DOUBLE.Create_vector(rows, 1, cols).Commit()
        a = np.zeros((rows, cols))
        if rank == 0:
            a[:] = np.arange(rows * cols).reshape(rows, cols)
        comm.Bcast([a.reshape(-1)[1:], 1, col], 0)
        assert (a[:, 1] == np.arange(rows) * cols + 1).all() and (rank == 0 or (a[:, [0, 2]] == 0).all()), a
        one_col = col.Create_resized(0, 8).Commit()                    # column j starts j doubles in
        g = np.full((rows, cols), -1.0)
        comm.Gather(np.full(rows, float(rank)), [g, 1, one_col], 0)    # 3 doubles match a column
        if rank == 0:
            assert (g[:, :size] == np.arange(size)).all() and (g[:, size] == -1).all(), g
        x = np.zeros((rows, cols))
        x[:, 0] = rank + 1
        y = np.full((rows, cols), -1.0)
        comm.Allreduce([x, 1, col], [y, 1, col], MPI.SUM)
        assert (y[:, 0] == size * (size + 1) / 2).all() and (y[:, 1:] == -1).all(), y
        t = np.full((rows, cols), -1.0)
        comm.Allgather(np.full(rows, float(rank)), [t, 1, one_col])
        assert (t[:, :size] == np.arange(size)).all() and (t[:, size] == -1).all(), t
        if rank == 0:
            try:
                comm.Gather(np.zeros(rows, "i"), [g, 1, one_col], 0)
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_TYPE, exc
            else:
                raise AssertionError("ints gathered into a column of doubles")
        loose = MPI.DOUBLE.Create_vector(2, 1, 2)
        try:
            comm.Bcast([np.zeros(4), 1, loose], 0)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_TYPE
        else:
            raise AssertionError("an uncommitted datatype was used")
        for t in (col, one_col, loose):
            t.Free()
    """, 3)


@pytest.mark.slow
def test_subarrays_structs_bottom_alltoallw_and_pack(tmp_path):
    ok(tmp_path, """
        full = np.arange(20.0).reshape(4, 5)
        c_sub = MPI.DOUBLE.Create_subarray([4, 5], [2, 3], [1, 1]).Commit()
        f_sub = MPI.DOUBLE.Create_subarray([5, 4], [3, 2], [1, 1], order=MPI.ORDER_FORTRAN).Commit()
        for t in (c_sub, f_sub):
            packed = np.zeros(6)
            pos = t.Pack(full, packed, 0, comm)
            assert pos == 48 and packed.tolist() == [6, 7, 8, 11, 12, 13], packed
            back = np.zeros((4, 5))
            assert t.Unpack(packed, 0, back, comm) == 48
            assert (back[1:3, 1:4] == full[1:3, 1:4]).all() and back.sum() == full[1:3, 1:4].sum()
        assert c_sub.Pack_size(2, comm) == 96
        ints, reals = np.zeros(2, "i"), np.zeros(3)
        where = MPI.Datatype.Create_struct([2, 3], [MPI.Get_address(ints), MPI.Get_address(reals)],
                                           [MPI.INT, MPI.DOUBLE]).Commit()
        if rank == 0:
            ints[:], reals[:] = [1, 2], [0.5, 1.5, 2.5]
        comm.Bcast([MPI.BOTTOM, 1, where], 0)
        assert ints.tolist() == [1, 2] and reals.tolist() == [0.5, 1.5, 2.5]
        send = np.arange(size, dtype="d") + 10 * rank
        recv = np.full(2 * size, -1.0)
        comm.Alltoallw([send, [1] * size, [8 * j for j in range(size)], [MPI.DOUBLE] * size],
                       [recv, ([1] * size, [16 * j for j in range(size)]), [MPI.DOUBLE] * size])
        assert recv[::2].tolist() == [10 * j + rank for j in range(size)] and (recv[1::2] == -1).all()
        for t in (c_sub, f_sub, where):
            t.Free()
    """, 2)


@pytest.mark.slow
def test_a_persistent_buffered_send_packs_the_buffer_at_each_start(tmp_path):
    ok(tmp_path, """
        every_other = MPI.DOUBLE.Create_vector(2, 1, 2).Commit()
        if rank == 0:
            MPI.Attach_buffer(bytearray(1 << 12))
            out = np.zeros(4)
            send = comm.Bsend_init([out, 1, every_other], 1)
            for step in range(2):
                out[:] = step + 1
                send.Start()
                send.Wait()
            send.Free()
            MPI.Detach_buffer()
        else:
            for step in range(2):
                got = np.zeros(2)
                comm.Recv(got, 0)
                assert got.tolist() == [step + 1] * 2, (step, got)
        every_other.Free()
    """, 2)
