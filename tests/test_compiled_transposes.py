"""Alltoallv and Alltoallw repeated often enough to take the compiled path
(``simdist.sim._repeated``): every program runs once with it and once with
``SIMDIST_COMPILED=0``, and must land the same bytes, raise the same errors
and end the same way. A program asserts that the path ran (or, where its
state asks for the Python path, that the call still lands right)."""

from __future__ import annotations

import pytest

from simdist.sim import _repeated
from test_mpi4py_api import PRELUDE, ok, run

pytestmark = pytest.mark.skipif(not _repeated.available(), reason="simdist.sim._compiled is not built")

MODES = pytest.mark.parametrize("compiled", ["1", "0"], ids=["compiled", "python"])

SETUP = """
import os, hashlib
os.environ["SIMDIST_COMPILED"] = {compiled!r}
COMPILED = os.environ["SIMDIST_COMPILED"] == "1"

def took_compiled_path(comm, call):
    '''Whether the compiled path did calls of ``call`` on ``comm`` (if on), and none if off.'''
    done = sum(r.calls for r in comm._st().repeats.get(call, {{}}).values())
    return done > 0 if COMPILED else done == 0

def column_transpose(comm, dtype=np.float64, m=2):
    '''The (m, n) rows -> (n, m) columns transpose of a vector type, its arguments and the check.'''
    size, rank = comm.size, comm.rank
    n = m * size
    rows, got = np.zeros((m, n), dtype), np.zeros((n, m), dtype)
    base = MPI.DOUBLE if dtype == np.float64 else MPI.DOUBLE_COMPLEX
    column = base.Create_vector(m, 1, n).Create_resized(0, np.dtype(dtype).itemsize).Commit()
    send = [rows, ([m] * size, [p * m for p in range(size)]), column]
    recv = [got, ([m * m] * size, [p * m * m for p in range(size)]), base]

    def fill(step):
        rows[...] = np.arange(m * n).reshape(m, n) + 1000 * rank + step
        got[...] = -1

    def check(step):
        for p in range(size):
            whole = np.arange(m * n).reshape(m, n) + 1000 * p + step
            assert np.array_equal(got[p * m:(p + 1) * m].reshape(m, m), whole[:, rank * m:(rank + 1) * m].T), step
    return column, send, recv, fill, check

def cuts(shape, axis, base=MPI.DOUBLE, order=MPI.ORDER_C):
    '''One subarray type per rank: its share of ``shape`` cut along ``axis``.'''
    types = []
    for p in range(comm.size):
        sub, start = list(shape), [0] * len(shape)
        sub[axis], start[axis] = shape[axis] // comm.size, p * (shape[axis] // comm.size)
        types.append(base.Create_subarray(shape, sub, start, order).Commit())
    return types

def called_often(comm, calls=5):
    '''column_transpose's, after ``calls`` calls that check what lands.'''
    column, send, recv, fill, check = column_transpose(comm)
    for step in range(calls):
        fill(step)
        comm.Alltoallv(send, recv)
        check(step)
    return column, send, recv, fill, check
"""


def program(compiled: str, body: str) -> str:
    return SETUP.format(compiled=compiled) + body


@MODES
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_repeated_transposes_land_every_block(tmp_path, compiled, n):
    ok(tmp_path, program(compiled, """
m = 2
size_n = m * size
for order in ("C", "F"):
    slab = np.zeros((m, size_n, size_n), np.complex128, order=order)
    pencil = np.zeros((size_n, m, size_n), np.complex128, order=order)
    o = MPI.ORDER_C if order == "C" else MPI.ORDER_FORTRAN
    sends = cuts(slab.shape, 1, MPI.DOUBLE_COMPLEX, o)
    recvs = cuts(pencil.shape, 0, MPI.DOUBLE_COMPLEX, o)
    for step in range(8):
        slab[...] = np.arange(m * size_n * size_n).reshape(m, size_n, size_n) * (1 + 1j) + 1000 * rank + step
        pencil[...] = -1
        comm.Alltoallw([slab, [1] * size, [0] * size, sends], [pencil, [1] * size, [0] * size, recvs])
        for p in range(size):
            whole = np.arange(m * size_n * size_n).reshape(m, size_n, size_n) * (1 + 1j) + 1000 * p + step
            assert np.array_equal(pencil[p * m:(p + 1) * m], whole[:, rank * m:(rank + 1) * m]), (order, step, p)
    for t in sends + recvs:
        t.Free()
assert took_compiled_path(comm, "Alltoallw")
for dtype in (np.float64, np.complex128):
    column, send, recv, fill, check = column_transpose(comm, dtype)
    for step in range(8):
        fill(step)
        comm.Alltoallv(send, recv)
        check(step)
    column.Free()
assert took_compiled_path(comm, "Alltoallv")
"""), n)


@MODES
def test_a_new_array_of_the_same_layout_takes_the_blocks(tmp_path, compiled):
    ok(tmp_path, program(compiled, """
column, send, recv, fill, check = called_often(comm, 6)
for step in range(3):
    send[0] = send[0].copy()           # new arrays where the template had others
    recv[0] = np.full_like(recv[0], -1)
    send[0][...] = np.arange(send[0].size).reshape(send[0].shape) + 1000 * rank + 50
    comm.Alltoallv(send, recv)
    got = recv[0]
    for p in range(size):
        whole = np.arange(send[0].size).reshape(send[0].shape) + 1000 * p + 50
        assert np.array_equal(got[p * 2:(p + 1) * 2].reshape(2, 2), whole[:, rank * 2:(rank + 1) * 2].T)
assert took_compiled_path(comm, "Alltoallv")
"""), 3)


@MODES
def test_counts_changed_in_place_after_the_path_is_taken_move_what_they_say(tmp_path, compiled):
    ok(tmp_path, program(compiled, """
send = np.arange(4 * size, dtype="d") + 100 * rank
recv = np.full(4 * size, -1.0)
counts, displs = [1] * size, [4 * j for j in range(size)]
sspec, rspec = [send, (counts, displs), MPI.DOUBLE], [recv, (list(counts), list(displs)), MPI.DOUBLE]
for _ in range(5):
    comm.Alltoallv(sspec, rspec)
assert took_compiled_path(comm, "Alltoallv")
counts[:] = [2] * size
displs[:] = [4 * j + 1 for j in range(size)]
rspec[1] = ([2] * size, [4 * j + 1 for j in range(size)])
recv[:] = -1
comm.Alltoallv(sspec, rspec)
for j in range(size):
    assert recv[4 * j:4 * j + 4].tolist() == [-1, 100 * j + 4 * rank + 1, 100 * j + 4 * rank + 2, -1], recv
"""), 3)


#: What the Python path refuses, made so after the compiled path took the
#: call: (the change, the exception caught, the check of it).
REFUSALS = {
    "freed-datatype": ("column.Free()", "MPI.Exception as e", "assert e.Get_error_class() == MPI.ERR_TYPE, e"),
    "read-only-receive-array": ("recv[0].flags.writeable = False", "BufferError", "pass"),
}


@MODES
@pytest.mark.parametrize("refused", list(REFUSALS))
def test_what_the_python_path_refuses_is_refused_after_the_compiled_path_took_the_call(tmp_path, compiled, refused):
    change, caught, check = REFUSALS[refused]
    ok(tmp_path, program(compiled, f"""
column, send, recv, fill, check = called_often(comm)
assert took_compiled_path(comm, "Alltoallv")
{change}
try:
    comm.Alltoallv(send, recv)
except {caught}:
    {check}
else:
    raise AssertionError("the call went through")
"""), 2)


@MODES
def test_a_message_in_flight_during_a_repeated_transpose_lands_after_it(tmp_path, compiled):
    ok(tmp_path, program(compiled, """
column, send, recv, fill, check = called_often(comm)
box = np.zeros(3)
peer = (rank + 1) % size
req = comm.Irecv(box, source=(rank - 1) % size, tag=7)
out = comm.Isend(np.full(3, float(rank)), dest=peer, tag=7)
for step in range(5, 9):
    fill(step)
    comm.Alltoallv(send, recv)
    check(step)
MPI.Request.Waitall([req, out])
assert box.tolist() == [float((rank - 1) % size)] * 3
assert took_compiled_path(comm, "Alltoallv")
"""), 3)


@MODES
def test_a_peer_that_sends_more_after_the_path_is_taken_truncates(tmp_path, compiled):
    ok(tmp_path, program(compiled, """
send = np.arange(2 * size, dtype="d")
recv = np.zeros(2 * size)
counts = [1] * size
rspec = [recv, ([1] * size, [2 * j for j in range(size)]), MPI.DOUBLE]
for _ in range(5):
    comm.Alltoallv([send, (counts, [2 * j for j in range(size)]), MPI.DOUBLE], rspec)
assert took_compiled_path(comm, "Alltoallv")
if rank == 1:
    counts[0] = 2  # rank 0, whose arguments are the same, gets two elements where it has room for one
try:
    comm.Alltoallv([send, (counts, [2 * j for j in range(size)]), MPI.DOUBLE], rspec)
except MPI.Exception as e:
    assert rank == 0 and e.Get_error_class() == MPI.ERR_TRUNCATE, (rank, e)
else:
    assert rank != 0
"""), 2)


@MODES
def test_a_block_longer_than_a_row_between_two_peers_moves_in_phases(tmp_path, compiled):
    """Rank 0's arguments repeat; rank 2 sends rank 1 a block longer than
    a row, so every member, rank 0 too, moves the blocks in phases."""
    ok(tmp_path, program(compiled, """
big = 3 << 20  # bytes: longer than a row of 3 ranks
send = np.zeros(big // 8 + 2 * size, "d")
recv = np.zeros(big // 8 + 2 * size, "d")
send[:] = np.arange(send.size) + 1e7 * rank
def spec(lengths):
    return [send, (lengths, [0] * size), MPI.DOUBLE]
for _ in range(5):
    comm.Alltoallv(spec([1] * size), [recv, ([1] * size, list(range(size))), MPI.DOUBLE])
assert took_compiled_path(comm, "Alltoallv") or rank != 0
mine = [1] * size
theirs = [1] * size
if rank == 2:
    mine[1] = big // 8
if rank == 1:
    theirs = [1, 1, big // 8]
recv[:] = -1
rdispls = list(range(size)) if rank != 1 else [0, 1, 2]
comm.Alltoallv(spec(mine), [recv, (theirs, rdispls), MPI.DOUBLE])
for j in range(size):
    n = theirs[j]
    assert np.array_equal(recv[rdispls[j]:rdispls[j] + n], np.arange(n) + 1e7 * j), (j, recv[:8])
"""), 3)


@MODES
def test_a_peer_that_calls_another_collective_is_a_mismatch_on_every_rank(tmp_path, compiled):
    outcome = run(tmp_path, program(compiled, """
column, send, recv, fill, check = called_often(comm)
if rank == 1:
    comm.Bcast(np.zeros(3), root=0)
else:
    comm.Alltoallv(send, recv)
"""), 2)
    assert outcome.status != 0
    assert "CollectiveMismatch" in outcome.error and "bcast" in outcome.error.lower(), outcome.error


@MODES
def test_subarray_types_made_again_per_call_take_the_path_of_the_first(tmp_path, compiled):
    """As an FFT library that makes its plan's types per transpose: new
    handles on the same numbers match the compiled transpose, which holds
    none of them (each is freed after its call)."""
    ok(tmp_path, program(compiled, """
m, n = 2, 2 * size
slab, pencil = np.zeros((m, n, n)), np.zeros((n, m, n))
for step in range(8):
    sends, recvs = cuts(slab.shape, 1), cuts(pencil.shape, 0)
    slab[...] = np.arange(m * n * n).reshape(m, n, n) + 1000 * rank + step
    pencil[...] = -1
    comm.Alltoallw([slab, [1] * size, [0] * size, sends], [pencil, [1] * size, [0] * size, recvs])
    for p in range(size):
        whole = np.arange(m * n * n).reshape(m, n, n) + 1000 * p + step
        assert np.array_equal(pencil[p * m:(p + 1) * m], whole[:, rank * m:(rank + 1) * m]), (step, p)
    for t in sends + recvs:
        t.Free()
assert took_compiled_path(comm, "Alltoallw")
assert len(comm._st().repeats.get("Alltoallw", {})) == (1 if COMPILED else 0)
"""), 3)


# -- streamed: blocks longer than rows ------------------------------------------------
STREAMED = """
def slab_transpose(comm, m=4, k=1024, dtype=np.complex128, order="C"):
    '''A transpose of (m, m * size, k) slabs into (m * size, m, k) pencils:
    blocks of m * m * k elements (256 KiB at the defaults), longer than
    rows, through subarray types; its arguments, fill and check.'''
    size, rank = comm.size, comm.rank
    n = m * size
    slab, pencil = np.zeros((m, n, k), dtype, order=order), np.zeros((n, m, k), dtype, order=order)
    base = MPI.DOUBLE_COMPLEX if dtype == np.complex128 else MPI.DOUBLE
    o = MPI.ORDER_C if order == "C" else MPI.ORDER_FORTRAN
    sends, recvs = cuts(slab.shape, 1, base, o), cuts(pencil.shape, 0, base, o)
    send = [slab, [1] * size, [0] * size, sends]
    recv = [pencil, [1] * size, [0] * size, recvs]

    def whole(p, step):
        return (np.arange(m * n * k).reshape(m, n, k) * (1 + 1j if dtype == np.complex128 else 1)
                + 1000 * p + step).astype(dtype)

    def fill(step):
        slab[...] = whole(rank, step)
        pencil[...] = -1

    def check(step):
        for p in range(size):
            assert np.array_equal(pencil[p * m:(p + 1) * m], whole(p, step)[:, rank * m:(rank + 1) * m]), (step, p)
    return send, recv, fill, check
"""


def streamed(compiled: str, body: str) -> str:
    return program(compiled, STREAMED + body)


@MODES
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_streamed_transposes_land_every_block(tmp_path, compiled, n):
    ok(tmp_path, streamed(compiled, """
for order, dtype in (("C", np.complex128), ("F", np.float64)):
    send, recv, fill, check = slab_transpose(comm, dtype=dtype, order=order)
    for step in range(6):
        fill(step)
        comm.Alltoallw(send, recv)
        check(step)
assert took_compiled_path(comm, "Alltoallw")
# blocks of different lengths, contiguous: rank r sends (r + j + 1) * 40000 doubles to rank j
counts = [(rank + j + 1) * 40000 for j in range(size)]
incoming = [(p + rank + 1) * 40000 for p in range(size)]
out = np.zeros(sum(counts))
got = np.zeros(sum(incoming))
displs = [sum(counts[:j]) for j in range(size)]
rdispls = [sum(incoming[:p]) for p in range(size)]
for step in range(5):
    for j in range(size):
        out[displs[j]:displs[j] + counts[j]] = np.arange(counts[j]) + 1000 * rank + 100 * j + step
    got[...] = -1
    comm.Alltoallv([out, counts, displs, MPI.DOUBLE], [got, incoming, rdispls, MPI.DOUBLE])
    for p in range(size):
        assert np.array_equal(got[rdispls[p]:rdispls[p] + incoming[p]],
                              np.arange(incoming[p]) + 1000 * p + 100 * rank + step), (step, p)
assert took_compiled_path(comm, "Alltoallv")
"""), n)


@MODES
def test_a_streamed_transpose_truncates_where_a_peer_sends_more_and_goes_on(tmp_path, compiled):
    ok(tmp_path, streamed(compiled, """
k = 40000  # doubles a block: longer than rows
counts, displs = [k] * size, [j * (k + 1) for j in range(size)]
out, got = np.zeros(size * (k + 1)), np.zeros(size * (k + 1))
more = [k + 1 if j == 0 else k for j in range(size)]  # rank 1's block for rank 0, one longer

def call(step, sent):
    for j in range(size):
        out[displs[j]:displs[j] + sent[j]] = np.arange(sent[j]) + 1000 * rank + 100 * j + step
    got[...] = -1
    comm.Alltoallv([out, sent, displs, MPI.DOUBLE], [got, counts, displs, MPI.DOUBLE])
    for p in range(size):
        assert np.array_equal(got[displs[p]:displs[p] + k], np.arange(k) + 1000 * p + 100 * rank + step), (step, p)

for step in range(4):
    call(step, counts)
for step in range(4, 8):  # from its second time on, rank 1's longer call is compiled too
    try:
        call(step, more if rank == 1 else counts)
    except MPI.Exception as e:
        assert rank == 0 and e.Get_error_class() == MPI.ERR_TRUNCATE, (rank, e)
        assert np.all(got == -1), "a truncated receive writes no block"
    else:
        assert rank != 0
for step in range(8, 12):  # and the streams go on, on every rank
    call(step, counts)
assert took_compiled_path(comm, "Alltoallv")
"""), 3)


def test_a_rank_off_the_compiled_path_moves_streamed_blocks_in_phases(tmp_path):
    """A rank whose calls are not compiled never streams; the others see it
    in the heads and move their blocks in phases, as it does."""
    ok(tmp_path, streamed("1", """
if rank == 1:
    os.environ["SIMDIST_COMPILED"] = "0"
send, recv, fill, check = slab_transpose(comm)
for step in range(8):
    fill(step)
    comm.Alltoallw(send, recv)
    check(step)
done = sum(r.calls for r in comm._st().repeats.get("Alltoallw", {}).values())
assert (done == 0) if rank == 1 else (done > 0), (rank, done)
"""), 3)


#: kind: (how its program is made, five calls that take the path, the call).
FIVE_CALLS = {
    "rows": (program, "column, send, recv, fill, check = called_often(comm)", "Alltoallv"),
    "streamed": (streamed, """send, recv, fill, check = slab_transpose(comm)
for step in range(5):
    fill(step)
    comm.Alltoallw(send, recv)""", "Alltoallw"),
}


@MODES
@pytest.mark.parametrize("kind", sorted(FIVE_CALLS))
def test_a_peer_that_never_calls_is_reported_with_the_waiting_line(tmp_path, compiled, kind):
    made, calls, call = FIVE_CALLS[kind]
    waiting = f"    comm.{call}(send, recv)  # the waiting line"
    source = made(compiled, f"""
import time
{calls}
if rank == 0:
{waiting}
else:
    time.sleep(60)
""")
    outcome = run(tmp_path, source, 2, timeout=3.0)
    line = (PRELUDE + source).splitlines().index(waiting) + 1
    assert outcome.status == 124
    assert f"rank 0: waiting in alltoall #6 (blocks of any lengths) on the world at prog.py:{line}" in outcome.error
    assert "rank 1: running user code (5 calls completed)" in outcome.error, outcome.error


def test_streams_of_one_small_fragment_a_ring_land_every_block_with_late_ranks(tmp_path):
    """Rings of one 4 KiB fragment make every rank wait for its peers at
    every step, and a late rank puts the others to sleep: the blocks still
    land, call after call."""
    ok(tmp_path, streamed("1", """
import time
from simdist.sim import _repeated
_repeated.FRAGMENT, _repeated.DEPTH = 4096, 1
send, recv, fill, check = slab_transpose(comm)  # blocks of 256 KiB: 64 fragments each
for step in range(300):
    fill(step)
    comm.Alltoallw(send, recv)
    check(step)
    if step % 37 == rank:
        time.sleep(0.002)  # a rank late now and then
assert took_compiled_path(comm, "Alltoallw")
"""), 4)
