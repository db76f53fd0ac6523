"""Alltoallv and Alltoallw called again with arguments that look like the
last call's: each call moves what its own arguments say, whatever the
stand-in keeps of an earlier parse (``fake_backends.mpi4py._argcache``).

Each program makes one call twice (a parse is kept the second time its
arguments come), changes one thing the parse reads (a list's counts in
place, a numpy array of counts, the datatype behind a handle, the array,
its dtype, its writability) and calls again, checking what lands against
the arguments of that last call.
"""

from __future__ import annotations

import textwrap

from simdist import checks
from simdist._script import run_script
from test_mpi4py_api import ok


def test_alltoallv_follows_counts_and_displacements_changed_in_place(tmp_path):
    ok(tmp_path, """
        send = np.arange(4 * size, dtype="d") + 100 * rank
        recv = np.full(4 * size, -1.0)
        counts, displs = [1] * size, [4 * j for j in range(size)]
        rcounts, rdispls = np.ones(size, np.int64), np.arange(size, dtype=np.int64) * 4
        sspec, rspec = [send, (counts, displs), MPI.DOUBLE], [recv, (rcounts, rdispls), MPI.DOUBLE]
        for _ in range(2):
            comm.Alltoallv(sspec, rspec)
        assert recv[::4].tolist() == [100 * j + 4 * rank for j in range(size)], recv
        counts[:] = [2] * size          # the same lists and arrays, other numbers
        displs[:] = [4 * j + 1 for j in range(size)]
        rcounts[:] = 2
        rdispls += 1
        recv[:] = -1
        comm.Alltoallv(sspec, rspec)
        for j in range(size):
            assert recv[4 * j:4 * j + 4].tolist() == [-1, 100 * j + 4 * rank + 1, 100 * j + 4 * rank + 2, -1], recv
    """, 3)


def test_alltoallv_writes_into_the_array_passed_now_not_a_former_one_of_its_shape(tmp_path):
    ok(tmp_path, """
        column = MPI.DOUBLE.Create_vector(2, 1, size).Create_resized(0, 8).Commit()
        send = np.arange(2 * size, dtype="d").reshape(2, size) + 100 * rank
        for step in range(3):
            recv = np.full((size, 2), -1.0)  # a new array each time, perhaps where the last one was
            comm.Alltoallv([send + step, (1, None), column], [recv, (2, None), MPI.DOUBLE])
            assert recv.tolist() == [[100 * j + rank + step, 100 * j + size + rank + step] for j in range(size)]
            del recv
        column.Free()
    """, 2)


def test_alltoallv_reads_a_new_dtype_over_the_same_memory_by_its_own_elements(tmp_path):
    ok(tmp_path, """
        memory = np.zeros(8 * size, np.uint8)
        wide = memory.view(np.float64)
        wide[:] = np.arange(size) + 10 * rank
        out = np.zeros(8 * size, np.uint8)
        for _ in range(2):
            comm.Alltoallv([wide, (1, None)], [out.view(np.float64), (1, None)])
        assert out.view(np.float64).tolist() == [10 * j + rank for j in range(size)]
        narrow = memory.view(np.float32)  # the same address, another layout
        narrow[:] = np.arange(2 * size) + 10 * rank
        out[:] = 0
        comm.Alltoallv([narrow, (1, None)], [out.view(np.float32), (1, None)])
        got = out.view(np.float32)
        assert got[:size].tolist() == [10 * j + rank for j in range(size)] and not got[size:].any(), got
    """, 2)


def test_alltoallw_uses_the_datatype_a_handle_holds_at_each_call(tmp_path):
    ok(tmp_path, """
        grid = np.arange(4 * size, dtype="d").reshape(4, size) + 100 * rank
        got = np.zeros((size, 4))
        ones, at = [1] * size, [8 * j for j in range(size)]
        recv = [got, [4] * size, [32 * j for j in range(size)], [MPI.DOUBLE] * size]
        col = MPI.DOUBLE.Create_vector(4, 1, size).Commit()
        types = [col] * size
        for _ in range(2):
            comm.Alltoallw([grid, ones, at, types], recv)
        assert got.tolist() == [[100 * j + size * i + rank for i in range(4)] for j in range(size)], got
        other = MPI.Datatype(col)  # another handle on the same type map
        col.Free()
        for handle in (other, col):  # the type map freed; the handle freed (now DATATYPE_NULL)
            try:
                comm.Alltoallw([grid, ones, at, [handle] * size], recv)
            except MPI.Exception as e:
                assert e.Get_error_class() == MPI.ERR_TYPE, e
            else:
                raise AssertionError(f"a freed datatype was used: {handle}")
        pair = MPI.DOUBLE.Create_vector(2, 1, 2 * size).Commit()  # a new datatype, another layout
        types[:] = [pair] * size
        got[:] = 0
        recv[1][:] = [2] * size
        comm.Alltoallw([grid, ones, at, types], recv)
        assert got[:, :2].tolist() == [[100 * j + rank, 100 * j + 2 * size + rank] for j in range(size)], got
        assert not got[:, 2:].any(), got
        pair.Free()
    """, 2)


def test_a_read_only_receive_array_is_refused_after_a_writable_one_of_its_shape(tmp_path):
    ok(tmp_path, """
        send = np.arange(size, dtype="d")
        recv = np.zeros(size)
        for _ in range(2):
            comm.Alltoallv([send, (1, None), MPI.DOUBLE], [recv, (1, None), MPI.DOUBLE])
        recv.flags.writeable = False
        try:
            comm.Alltoallv([send, (1, None), MPI.DOUBLE], [recv, (1, None), MPI.DOUBLE])
        except BufferError:
            pass
        else:
            raise AssertionError("a read-only receive buffer was written")
    """, 2)


def test_a_repeated_alltoallv_still_truncates_when_a_peer_sends_more(tmp_path):
    ok(tmp_path, """
        send = np.arange(2 * size, dtype="d")
        recv = np.zeros(2 * size)
        counts = [1] * size
        spec = [recv, ([1] * size, [2 * j for j in range(size)]), MPI.DOUBLE]
        for _ in range(2):
            comm.Alltoallv([send, (counts, [2 * j for j in range(size)]), MPI.DOUBLE], spec)
        if rank == 1:
            counts[0] = 2  # rank 0 gets two elements where it has room for one
        try:
            comm.Alltoallv([send, (counts, [2 * j for j in range(size)]), MPI.DOUBLE], spec)
        except MPI.Exception as e:
            assert rank == 0 and e.Get_error_class() == MPI.ERR_TRUNCATE, (rank, e)
        else:
            assert rank != 0
    """, 2)


_TRANSPOSES = """
    def transposes(comm, steps):
        size, rank = comm.size, comm.rank
        m, n = 2, 2 * comm.size
        # Alltoallw of subarrays: (m, n, n) split on axis 0 -> (n, m, n) split on axis 1
        def cuts(shape, axis):
            types = []
            for p in range(size):
                sub, start = list(shape), [0] * 3
                sub[axis], start[axis] = shape[axis] // size, p * (shape[axis] // size)
                types.append(MPI.DOUBLE.Create_subarray(shape, sub, start).Commit())
            return types
        slab, pencil = np.zeros((m, n, n)), np.zeros((n, m, n))
        sends, recvs = cuts(slab.shape, 1), cuts(pencil.shape, 0)
        # Alltoallv of column blocks through a vector type: (m, n) rows -> (n, m)
        rows, got = np.zeros((m, n)), np.zeros((n, m))
        column = MPI.DOUBLE.Create_vector(m, 1, n).Create_resized(0, 8).Commit()
        for step in range(steps):
            slab[...] = np.arange(m * n * n).reshape(m, n, n) + 1000 * rank + step
            pencil[...] = -1
            comm.Alltoallw([slab, [1] * size, [0] * size, sends], [pencil, [1] * size, [0] * size, recvs])
            for p in range(size):
                whole = np.arange(m * n * n).reshape(m, n, n) + 1000 * p + step
                assert np.array_equal(pencil[p * m:(p + 1) * m], whole[:, rank * m:(rank + 1) * m]), (step, p)
            rows[...] = np.arange(m * n).reshape(m, n) + 1000 * rank + step
            got[...] = -1
            comm.Alltoallv([rows, ([m] * size, [p * m for p in range(size)]), column],
                           [got, ([m * m] * size, [p * m * m for p in range(size)]), MPI.DOUBLE])
            for p in range(size):
                whole = np.arange(m * n).reshape(m, n) + 1000 * p + step
                assert np.array_equal(got[p * m:(p + 1) * m].reshape(m, m), whole[:, rank * m:(rank + 1) * m].T)
        for datatype in sends + recvs + [column]:
            datatype.Free()
"""


def test_transposes_called_again_move_every_block_as_the_first_call_did(tmp_path):
    """A transpose called a third time moves all its blocks in one copy each
    way (its parse kept at the second); the first calls, each block by
    itself: the same bytes land."""
    ok(tmp_path, _TRANSPOSES + """
    transposes(comm, 3)
    """, 3)


def test_transposes_on_ranks_whose_slots_do_not_step_evenly_move_each_block(tmp_path):
    ok(tmp_path, _TRANSPOSES + """
    sub = comm.Split(0 if rank != 2 else MPI.UNDEFINED)  # world ranks 0, 1, 3
    if sub != MPI.COMM_NULL:
        transposes(sub, 3)
        sub.Free()
    """, 4)


def test_a_datatype_dropped_unfreed_after_an_alltoallw_is_still_a_handle_leak(tmp_path):
    """What is kept of a parse holds no datatype handle: one the program
    makes per call and drops unfreed is a leak the check sees."""
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent("""\
        from mpi4py import MPI
        import numpy as np
        comm, n = MPI.COMM_WORLD, MPI.COMM_WORLD.size
        send, recv = np.zeros((2, n)), np.zeros((n, 2))
        for step in range(3):
            column = MPI.DOUBLE.Create_vector(2, 1, n).Commit()
            for twice in range(2):  # the second call keeps the parse
                comm.Alltoallw([send, [1] * n, [8 * j for j in range(n)], [column] * n],
                               [recv, [2] * n, [16 * j for j in range(n)], [MPI.DOUBLE] * n])
        """))
    outcome = run_script(str(program), [], 2, timeout=60, checks=checks.parse("handle-leak"))
    found = sorted((f.kind, sorted((c.rank, c.line) for c in f.calls)) for f in outcome.findings)
    assert found == [("handle-leak", [(0, 6)]), ("handle-leak", [(1, 6)])], outcome.error


def test_a_parse_is_kept_the_second_time_its_arguments_come(tmp_path):
    """A call made once (a library's transpose with datatypes built for it)
    pays for no keeping; the second call of the same arguments keeps the
    parse, and the third uses it."""
    ok(tmp_path, """
        from fake_backends.mpi4py import _argcache
        send, recv = np.arange(2 * size, dtype="d") + 100 * rank, np.zeros(2 * size)
        column = MPI.DOUBLE.Create_vector(2, 1, size).Create_resized(0, 8).Commit()
        args = [send.reshape(2, size), (1, None), column], [recv, (2, None), MPI.DOUBLE]
        kept = []
        for _ in range(3):
            comm.Alltoallv(*args)
            kept.append(sorted(type(plan).__name__ for plan in _argcache._kept.values()))
        assert kept == [["NoneType", "NoneType"], ["_Plan", "_Plan"], ["_Plan", "_Plan"]], kept
        assert recv.tolist() == [x for j in range(size) for x in (100 * j + rank, 100 * j + size + rank)], recv
        column.Free()
    """, 2)


def test_subarray_types_made_again_per_transpose_find_the_first_parse_and_no_other(tmp_path):
    """A parallel FFT makes its transposes' subarray types for each plan and
    frees them: types made again on the same numbers take the parse kept for
    the first ones, types on other numbers (another cut of the same arrays)
    do not, and one made again but not committed is refused."""
    ok(tmp_path, """
        from fake_backends.mpi4py import _argcache
        m, n = 2, 2 * size
        slab = (np.arange(m * n * 3, dtype="d") + 1000 * rank).reshape(m, n, 3)
        whole = np.arange(m * n * 3, dtype="d").reshape(m, n, 3)
        def types(shape, axis, width, cut=None):  # block p: width along axis at p * width (and cut along 1)
            made = []
            for p in range(size):
                sub, start = list(shape), [0] * len(shape)
                sub[axis], start[axis] = width, p * width
                if cut is not None:
                    sub[1] = cut
                made.append(MPI.DOUBLE.Create_subarray(shape, sub, start).Commit())
            return made
        for k in range(6):
            width = 1 + k % 2  # two cuts taking turns: n // size columns, or one
            pencil = np.full((m * size, n // size, 3), -1.0)
            send, recv = types(slab.shape, 1, width), types(pencil.shape, 0, m, width)
            comm.Alltoallw([slab, ([1] * size, [0] * size), send], [pencil, ([1] * size, [0] * size), recv])
            for p in range(size):
                got = pencil[p * m:(p + 1) * m, :width]
                assert got.tolist() == (whole[:, rank * width:(rank + 1) * width] + 1000 * p).tolist(), (k, p)
                assert (pencil[p * m:(p + 1) * m, width:] == -1).all(), (k, p)
            for t in send + recv:
                t.Free()
        assert sum(plan is not None for plan in _argcache._kept.values()) == 4  # two cuts, two sides
        send, recv = types(slab.shape, 1, 1), types(pencil.shape, 0, m, 1)  # a kept parse's numbers
        send[0].Free()
        send[0] = MPI.DOUBLE.Create_subarray(slab.shape, [m, 1, 3], [0, 0, 0])  # made again, not committed
        try:
            comm.Alltoallw([slab, ([1] * size, [0] * size), send], [pencil, ([1] * size, [0] * size), recv])
        except MPI.Exception as e:
            assert e.Get_error_class() == MPI.ERR_TYPE, e
        else:
            raise AssertionError("a datatype not committed was used")
        for t in send + recv:
            t.Free()
    """, 2)
