"""User-defined reduction ops (``MPI.Op.Create``) of the mpi4py stand-in.

The programs assert what mpi4py 4.1 under Open MPI 5 gives: the function
is called as ``function(inbuf, inoutbuf, datatype)`` with two writable
``MPI.buffer`` objects over the operands' memory (``obj`` None), so an op
that works through ``.address`` (ctypes) writes the result; the lowercase
calls pass the objects themselves. ``test_the_programs_pass_under_mpiexec``
runs them under Open MPI too. The memory test checks that a user-op
reduction does not hold a copy of every rank's buffer.
"""

from __future__ import annotations

import pytest

from test_mpi4py_api import ok, run
from test_mpi4py_handles import assert_programs_pass_under_mpiexec

BY_ADDRESS = """
    import ctypes

    calls = []

    def shift_add(inbuf, inoutbuf, datatype):  # inoutbuf = 10 * inbuf + inoutbuf, through the addresses
        calls.append((type(inbuf), type(inoutbuf), inbuf.obj, inoutbuf.obj, inbuf.readonly, inoutbuf.readonly))
        assert datatype == MPI.DOUBLE and inbuf.nbytes == inoutbuf.nbytes == len(inoutbuf), datatype
        n = inoutbuf.nbytes // 8
        a = (ctypes.c_double * n).from_address(inbuf.address)
        b = (ctypes.c_double * n).from_address(inoutbuf.address)
        for i in range(n):
            b[i] = 10 * a[i] + b[i]

    op = MPI.Op.Create(shift_add, commute=False)

    def fold(values):  # the rank-order fold of shift_add
        acc = values[0]
        for v in values[1:]:
            acc = 10 * acc + v
        return acc

    mine = [rank + 1.0, 2.0 * rank + 1, 7.0]
    every = [[r + 1.0, 2.0 * r + 1, 7.0] for r in range(size)]
    whole = [fold([e[i] for e in every]) for i in range(3)]
    x = np.array(mine)

    out = np.zeros(3)
    comm.Allreduce(x, out, op)
    assert out.tolist() == whole, out
    inplace = x.copy()
    comm.Allreduce(MPI.IN_PLACE, inplace, op)
    assert inplace.tolist() == whole, inplace
    out[:] = -1
    comm.Reduce(x, out, op, root=size - 1)
    assert out.tolist() == (whole if rank == size - 1 else [-1.0] * 3), out
    comm.Scan(x, out, op)
    assert out.tolist() == [fold([e[i] for e in every[:rank + 1]]) for i in range(3)], out
    out[:] = -1
    comm.Exscan(x, out, op)
    assert out.tolist() == ([-1.0] * 3 if rank == 0 else [fold([e[i] for e in every[:rank]]) for i in range(3)])
    blocks = np.arange(2.0 * size) + rank
    block = np.zeros(2)
    comm.Reduce_scatter_block(blocks, block, op)
    assert block.tolist() == [fold([2.0 * rank + i + r for r in range(size)]) for i in range(2)], block
    comm.Reduce_scatter(blocks, block, [2] * size, op)
    assert block.tolist() == [fold([2.0 * rank + i + r for r in range(size)]) for i in range(2)], block
    out[:] = 0
    comm.Iallreduce(x, out, op).Wait()
    assert out.tolist() == whole, out
    out[:] = 0
    persistent = comm.Allreduce_init(x, out, op)
    persistent.Start()
    persistent.Wait()
    persistent.Free()
    assert out.tolist() == whole, out

    local = np.array([1.0, 2.0, 3.0])
    op.Reduce_local(x, local)
    assert local.tolist() == [10 * m + v for m, v in zip(mine, [1.0, 2.0, 3.0])], local
    assert calls and all(c == (MPI.buffer, MPI.buffer, None, None, False, False) for c in calls), calls

    op.Free()
    datatypes = []
    objects = MPI.Op.Create(lambda a, b, datatype: datatypes.append(datatype) or 10 * a + b)
    assert comm.allreduce(rank + 1, op=objects) == fold([r + 1 for r in range(size)])  # objects, not buffers
    assert set(datatypes) <= {None}, datatypes
    objects.Free()
"""

#: A user op on derived datatypes, as mpi4py passes it under Open MPI: each operand is ``count *
#: extent`` bytes with the type map's bytes at their places (an op may read them through the
#: layout, as a library's op over a strided tensor does), and an element is never cut: a large
#: count as one element of a vector-and-remainder struct comes to the op whole.
DERIVED = """
    import ctypes

    vector = MPI.DOUBLE.Create_vector(3, 2, 4).Commit()  # doubles 0, 1, 4, 5, 8, 9 of an extent of 10
    places = [e * 10 + b * 4 + i for e in range(2) for b in range(3) for i in range(2)]
    seen = []

    def strided(inbuf, inoutbuf, datatype):  # inoutbuf = 10 * inbuf + inoutbuf, at the type map's places
        seen.append((inbuf.nbytes, inoutbuf.nbytes, datatype == vector))
        a, b = np.frombuffer(inbuf, np.float64), np.frombuffer(inoutbuf, np.float64)
        b[places] = 10 * a[places] + b[places]

    op = MPI.Op.Create(strided, commute=False)

    def fold(values):
        acc = values[0]
        for v in values[1:]:
            acc = 10 * acc + v
        return acc

    x = np.arange(24.0) + 100 * rank
    every = [np.arange(24.0) + 100 * r for r in range(size)]
    whole = np.full(24, -1.0)
    whole[places] = [fold([e[p] for e in every]) for p in places]
    out = np.full(24, -1.0)
    comm.Allreduce([x, 2, vector], [out, 2, vector], op)
    assert out.tolist() == whole.tolist(), out  # the gaps of the receive buffer are left alone
    inplace = x.copy()
    comm.Allreduce(MPI.IN_PLACE, [inplace, 2, vector], op)
    gaps = [p for p in range(24) if p not in places]
    assert inplace[places].tolist() == whole[places].tolist() and inplace[gaps].tolist() == x[gaps].tolist()
    out[:] = -1
    comm.Scan([x, 2, vector], [out, 2, vector], op)
    assert out[places].tolist() == [fold([e[p] for e in every[:rank + 1]]) for p in places], out
    out[:] = -1
    comm.Iallreduce([x, 2, vector], [out, 2, vector], op).Wait()
    assert out.tolist() == whole.tolist(), out
    local = np.full(24, 1.0)
    op.Reduce_local([x, 2, vector], [local, 2, vector])
    assert local[places].tolist() == [10 * x[p] + 1 for p in places] and (local[gaps] == 1).all(), local
    assert seen and all(s == (160, 160, True) for s in seen), seen
    op.Free()
    vector.Free()

    limit = (6 << 20) // 4  # a large count as one element: a vector of 4 blocks of limit bytes and a remainder
    n = 4 * limit + 3
    part = MPI.BYTE.Create_vector(4, limit, limit)
    rest = MPI.BYTE.Create_contiguous(3)
    big = MPI.BYTE.Create_struct([1, 1], [0, 4 * limit], [part, rest]).Commit()
    part.Free()
    rest.Free()
    lengths = []

    def xor_whole(inbuf, inoutbuf, datatype):  # reads n bytes at the addresses, as an op that knows its count
        lengths.append(inoutbuf.nbytes)
        a = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(inbuf.address))
        b = np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(inoutbuf.address))
        np.bitwise_xor(a, b, out=b)

    xor = MPI.Op.Create(xor_whole, commute=True)
    y = np.full(n, 1 << rank, np.uint8)
    comm.Allreduce(MPI.IN_PLACE, [MPI.memory.fromaddress(y.ctypes.data, n), 1, big], xor)
    assert (y == (1 << size) - 1).all(), np.unique(y)
    assert lengths == [n] * (size - 1), lengths
    xor.Free()
    big.Free()
"""

PROGRAMS = {"user_op_by_address": BY_ADDRESS, "user_op_on_derived_datatypes": DERIVED}

#: The memory tests' start (indented as their bodies): a user op that sums float64, 64 MiB per
#: rank in ``x``, and the peak memory.
SUM_OF_64_MIB = """
        def add(inbuf, inoutbuf, datatype):
            b = np.frombuffer(inoutbuf, np.float64)
            np.add(np.frombuffer(inbuf, np.float64), b, out=b)

        def peak_mib():
            with open("/proc/self/status") as status:
                return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024

        op = MPI.Op.Create(add, commute=True)
        x = np.full(8 << 20, rank + 1.0)
"""


@pytest.mark.parametrize("n", [2, 3])
def test_a_user_op_gets_mpi_buffers_over_the_operands_memory(tmp_path, n):
    ok(tmp_path, BY_ADDRESS, n)


@pytest.mark.parametrize("n", [2, 3])
def test_a_user_op_on_a_derived_datatype_gets_whole_elements_where_its_type_map_puts_them(tmp_path, n):
    ok(tmp_path, DERIVED, n)


@pytest.mark.slow
def test_the_programs_pass_under_mpiexec(tmp_path):
    """The assertions hold under Open MPI (where MPI is installed)."""
    assert_programs_pass_under_mpiexec(tmp_path, PROGRAMS)


def test_a_user_op_reduction_holds_no_copy_of_every_ranks_buffer(tmp_path):
    """An Allreduce of 64 MiB per rank with a user op, in place and not,
    grows each rank's peak memory by much less than the buffer: the fold
    writes into the receive buffer a chunk at a time (gathering whole
    buffers took about 7 times the buffer at 2 ranks)."""
    ok(tmp_path, SUM_OF_64_MIB + """
        out = np.zeros_like(x)
        comm.Allreduce(MPI.IN_PLACE, x[:1 << 20], op)  # the arena's slots touched once
        x[:1 << 20] = rank + 1.0
        for sendbuf, recvbuf in ((MPI.IN_PLACE, x), (x, out)):
            before = peak_mib()
            comm.Allreduce(sendbuf, recvbuf, op)
            grown = peak_mib() - before
            assert grown < 24, f"rank {rank}: the peak grew by {grown:.0f} MiB in an Allreduce of 64 MiB"
            assert (recvbuf == 3.0).all()
            x[:] = rank + 1.0
        op.Free()
    """, 2, timeout=60.0)


def test_a_user_op_on_one_large_element_holds_one_more_buffer_at_two_ranks(tmp_path):
    """An in-place Allreduce of 48 MiB per rank as one element of a struct
    (a vector and a remainder, as a library sends more than 2**31 - 1
    elements) with a user op: the element cannot be cut for the op, so the
    ranks' elements come one at a time; each rank holds the other's, as
    Open MPI's temporary (gathering both and a packed copy held three more,
    and the struct's byte index eight bytes per byte)."""
    ok(tmp_path, SUM_OF_64_MIB.replace("x = np.full(8 << 20", "x = np.full(6 << 20") + """
        limit = (1 << 20) - 1
        k, rest = divmod(x.size, limit)
        vector, tail = MPI.DOUBLE.Create_vector(k, limit, limit), MPI.DOUBLE.Create_contiguous(rest)
        big = MPI.Datatype.Create_struct([1, 1], [0, k * limit * 8], [vector, tail]).Commit()
        before = peak_mib()
        comm.Allreduce(MPI.IN_PLACE, [x, 1, big], op)
        grown = peak_mib() - before
        assert (x == 3.0).all()
        assert grown < 72, f"rank {rank}: the peak grew by {grown:.0f} MiB in an Allreduce of 48 MiB"
        for handle in (big, vector, tail, op):
            handle.Free()
    """, 2, timeout=60.0)


def test_ranks_whose_large_buffers_differ_raise_a_mismatch(tmp_path):
    """A user-op reduction of several chunks checks the sizes first: rank 1's
    12 MiB would otherwise pair its last chunk with rank 0's next call."""
    outcome = run(tmp_path, """
        def add(inbuf, inoutbuf, datatype):
            b = np.frombuffer(inoutbuf, np.float64)
            np.add(np.frombuffer(inbuf, np.float64), b, out=b)

        op = MPI.Op.Create(add, commute=True)
        comm.Allreduce(MPI.IN_PLACE, np.ones((2 + rank) << 19), op)  # 8 MiB on rank 0, 12 MiB on rank 1
        if rank == 0:
            comm.Allreduce(MPI.IN_PLACE, np.ones(1 << 19), op)
    """, 2)
    assert outcome.status != 0
    assert "CollectiveMismatch: rank 0: Allreduce of 8388608 bytes met rank 1's Allreduce of 12582912 bytes" \
        in outcome.error, outcome.error


def test_a_nonblocking_user_op_reduction_holds_one_copy_and_moves_while_its_rank_waits_elsewhere(tmp_path):
    """Iallreduce of 64 MiB per rank in place: the peer's buffer received
    is the one copy (the rank's own part is read from its buffer, the
    payload sent from it); the payload's receive is posted at the start, so
    rank 1's Wait completes while rank 0 waits in a Recv (MPI's progress
    rule). A count that differs raises CollectiveMismatch, not a hang."""
    ok(tmp_path, SUM_OF_64_MIB + """
        import simdist

        before = peak_mib()
        request = comm.Iallreduce(MPI.IN_PLACE, x, op)
        if rank == 0:
            comm.Recv(np.zeros(1), 1, 5)
            request.Wait()
        else:
            request.Wait()
            comm.Send(np.ones(1), 0, 5)
        grown = peak_mib() - before
        assert grown < 96, f"rank {rank}: the peak grew by {grown:.0f} MiB in an Iallreduce of 64 MiB"
        assert (x == 3.0).all()
        try:
            comm.Iallreduce(MPI.IN_PLACE, np.ones(1 << 17 if rank == 0 else 10), op).Wait()
        except simdist.CollectiveMismatch as exc:
            assert "count=131072" in str(exc) and "count=10," in str(exc), exc
        else:
            raise AssertionError("counts that differ did not raise")
        op.Free()
    """, 2, timeout=60.0)
