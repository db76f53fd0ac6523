"""Nonblocking and persistent collectives of the mpi4py stand-in (issue 20
items 4 and 10): every I-form and _init form on 1 to 4 ranks with exact
values, reductions with the blocking forms' bits, completion in any Wait
order, progress while a peer does point-to-point, mismatches reported as
``simdist.CollectiveMismatch``, and a collective that one rank never starts
reported as a hang naming it."""

from __future__ import annotations


import pytest

from simdist._script import HUNG

from mpi4py_prelude import passes, run_program


def run(tmp_path, source: str, n: int, timeout: float = 30.0):
    return run_program(tmp_path, source, n, timeout=timeout, header="import numpy as np\n")


def ok(tmp_path, source: str, n: int):
    passes(tmp_path, source, n, header="import numpy as np\n")


EVERY_CALL = """
    r = comm.Ibarrier(); r.Wait(); assert r == MPI.REQUEST_NULL
    # a call that raises starts nothing: the next collective matches as if it had not been made
    assert error_class(lambda: comm.Ibcast(np.zeros(2), root=size)) == MPI.ERR_ROOT
    for bad in (lambda: comm.Iallreduce(np.zeros(3), np.zeros(2)), lambda: comm.Allreduce_init(np.zeros(3), None)):
        try:
            bad()
        except (ValueError, TypeError):
            pass
        else:
            raise AssertionError("no error")
    r = comm.Iallreduce(np.array([rank], dtype="i"), got := np.zeros(1, dtype="i"))
    while not r.Get_status():
        pass
    r.Wait(status := MPI.Status())
    assert got[0] == size * (size - 1) // 2 and status.Get_error() == MPI.SUCCESS
    # bits: the rank-order fold of the blocking forms, for float32 and float64, in any Wait order
    for dtype in ("f", "d"):
        x = (np.linspace(0.1, 7.3, 33) * (rank + 1.7) ** 3).astype(dtype)
        a, b, want = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        reqs = [comm.Iallreduce(x, a), comm.Iallreduce(x * 3, b)]
        reqs[1].Wait(); reqs[0].Wait()
        comm.Allreduce(x, want)
        assert a.tobytes() == want.tobytes()
        comm.Allreduce(x * 3, want)
        assert b.tobytes() == want.tobytes()
        got, want = np.zeros_like(x), np.zeros_like(x)
        comm.Ireduce(x, got, op=MPI.SUM, root=size - 1).Wait()
        comm.Reduce(x, want, op=MPI.SUM, root=size - 1)
        assert got.tobytes() == want.tobytes()
    b = np.arange(4, dtype="i") if rank == 0 else np.zeros(4, dtype="i")
    comm.Ibcast(b, root=0).Wait(); assert b.tolist() == [0, 1, 2, 3]
    g = np.full(size, -1, dtype="i")
    comm.Igather(np.array([rank], dtype="i"), g, root=0).Wait()
    assert g.tolist() == (list(range(size)) if rank == 0 else [-1] * size)
    counts = list(range(1, size + 1)); displs = [sum(counts[:j]) for j in range(size)]
    gv = np.full(sum(counts), -1, dtype="i")
    comm.Igatherv(np.full(rank + 1, rank, dtype="i"), [gv, counts, displs, MPI.INT], root=0).Wait()
    if rank == 0:
        assert gv.tolist() == [j for j in range(size) for _ in range(j + 1)]
    s = np.zeros(2, dtype="i")
    comm.Iscatter(np.arange(2 * size, dtype="i"), s, root=size - 1).Wait(); assert s.tolist() == [2 * rank, 2 * rank + 1]
    sv = np.zeros(rank + 1, dtype="i")
    comm.Iscatterv([np.arange(sum(counts), dtype="i"), counts, displs, MPI.INT], sv, root=0).Wait()
    assert sv.tolist() == list(range(displs[rank], displs[rank] + rank + 1))
    ag = np.zeros(size, dtype="i"); comm.Iallgather(np.array([rank], dtype="i"), ag).Wait()
    assert ag.tolist() == list(range(size))
    agv = np.zeros(sum(counts), dtype="i")
    comm.Iallgatherv(np.full(rank + 1, rank, dtype="i"), [agv, counts, displs, MPI.INT]).Wait()
    assert agv.tolist() == [j for j in range(size) for _ in range(j + 1)]
    a2 = np.zeros(size, dtype="i"); comm.Ialltoall(np.arange(size, dtype="i") + 10 * rank, a2).Wait()
    assert a2.tolist() == [10 * j + rank for j in range(size)]
    ones = [1] * size; dsp = list(range(size))
    a2v = np.zeros(size, dtype="i")
    comm.Ialltoallv([np.arange(size, dtype="i") + 10 * rank, ones, dsp, MPI.INT], [a2v, ones, dsp, MPI.INT]).Wait()
    assert a2v.tolist() == [10 * j + rank for j in range(size)]
    a2w = np.zeros(size, dtype="i"); bdsp = [4 * j for j in range(size)]
    comm.Ialltoallw([np.arange(size, dtype="i") + 10 * rank, ones, bdsp, [MPI.INT] * size],
                    [a2w, ones, bdsp, [MPI.INT] * size]).Wait()
    assert a2w.tolist() == [10 * j + rank for j in range(size)]
    rs = np.zeros(1, dtype="i"); comm.Ireduce_scatter_block(np.arange(size, dtype="i"), rs).Wait()
    assert rs[0] == rank * size
    rs = np.zeros(rank + 1, dtype="i")
    comm.Ireduce_scatter(np.arange(sum(counts), dtype="i"), rs, counts).Wait()
    assert rs.tolist() == [size * v for v in range(displs[rank], displs[rank] + rank + 1)]
    sc = np.zeros(1, dtype="i"); comm.Iscan(np.array([rank + 1], dtype="i"), sc).Wait()
    assert sc[0] == (rank + 1) * (rank + 2) // 2
    ex = np.full(1, -7, dtype="i"); comm.Iexscan(np.array([rank + 1], dtype="i"), ex, op=MPI.PROD).Wait()
    import math
    assert ex[0] == (-7 if rank == 0 else math.factorial(rank))
    ip = np.full(2, rank, dtype="d"); comm.Iallreduce(MPI.IN_PLACE, ip, op=MPI.MAX).Wait()
    assert ip.tolist() == [size - 1] * 2
    # persistent: each Start reads the buffers as they are; inactive, not null, until Free
    x, y = np.zeros(3, dtype="i"), np.zeros(3, dtype="i")
    reqs = [comm.Allreduce_init(x, y), comm.Barrier_init(), comm.Bcast_init(x if rank == 0 else np.zeros(3, "i"), 0)]
    for round in range(3):
        x[:] = round + rank
        MPI.Prequest.Startall(reqs[:2])
        MPI.Request.Waitall(reqs[:2])
        assert y.tolist() == [sum(round + k for k in range(size))] * 3
        assert reqs[0] != MPI.REQUEST_NULL and reqs[0].Test()
    for req in reqs[:2]:
        req.Free()
        assert req == MPI.REQUEST_NULL
    reqs[2].Free()
    # mixes with point-to-point in Waitall/Waitany/Testall
    box = np.zeros(1, dtype="i")
    mix = [comm.Irecv(box, source=(rank - 1) % size, tag=5), comm.Ibarrier(),
           comm.Isend(np.array([rank], dtype="i"), dest=(rank + 1) % size, tag=5)]
    done = set()
    while len(done) < 3:
        done.add(MPI.Request.Waitany(mix))
    assert box[0] == (rank - 1) % size
    print("ok", rank)
"""


@pytest.mark.parametrize("n", [pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow), 3,
                               pytest.param(4, marks=pytest.mark.slow)])
def test_every_nonblocking_and_persistent_collective(tmp_path, n):
    ok(tmp_path, EVERY_CALL, n)


@pytest.mark.slow
def test_a_nonblocking_collective_progresses_while_a_peer_does_point_to_point(tmp_path):
    ok(tmp_path, """
    x, y = np.full(200_000, rank, dtype="d"), np.zeros(200_000)   # rendezvous-sized
    if rank == 0:
        r = comm.Ibarrier()
        while not r.Test():
            pass
        assert comm.recv(source=1) == "before"
        req = comm.Iallreduce(x, y)
        comm.Send(np.ones(100_000), dest=1)
        req.Wait()
    else:
        comm.send("before", dest=0)
        comm.Ibarrier().Wait()
        req = comm.Iallreduce(x, y)
        comm.Recv(np.zeros(100_000), source=0)
        req.Wait()
    assert (y == 1).all()
    """, 2)


@pytest.mark.slow
def test_a_mismatch_raises_collective_mismatch_never_wrong_data(tmp_path):
    outcome = run(tmp_path, """
    x, y = np.ones(3), np.zeros(3)
    r = comm.Iallreduce(x, y, op=MPI.SUM if rank == 0 else MPI.MAX)
    r.Wait()
    """, 2)
    assert outcome.status != 0
    assert "CollectiveMismatch" in outcome.error and "op=SUM" in outcome.error and "op=MAX" in outcome.error


@pytest.mark.slow
def test_blocking_and_nonblocking_collectives_share_one_order(tmp_path):
    outcome = run(tmp_path, """
    x, y = np.ones(3), np.zeros(3)
    if rank == 0:
        r = comm.Ibarrier(); comm.Barrier()
    else:
        comm.Barrier(); r = comm.Ibarrier()
    r.Wait()
    """, 2)
    assert outcome.status != 0 and "CollectiveMismatch" in outcome.error, outcome.error


@pytest.mark.slow
def test_cancel_of_a_collective_request_is_an_error(tmp_path):
    ok(tmp_path, """
    r = comm.Ibarrier()
    assert error_class(r.Cancel) == MPI.ERR_REQUEST
    r.Wait()
    """, 2)


def test_a_collective_that_one_rank_never_starts_is_a_hang_naming_it(tmp_path):
    outcome = run(tmp_path, """
    if rank == 0:
        comm.Iallreduce(np.ones(3), np.zeros(3)).Wait()
    else:
        comm.recv(source=0)
    """, 2, timeout=1.0)
    assert outcome.status == HUNG
    assert "rank 1 never called Iallreduce" in outcome.error, outcome.error


DERIVED = """
    # every second double of a strided buffer: the receive lands where the type map says, holes untouched
    column = MPI.DOUBLE.Create_vector(3, 1, 2).Commit()
    recv = np.full(6 * size, -1.0)
    req = comm.Iallgather([np.full(3, float(rank)), 3, MPI.DOUBLE], [recv, 1, column])
    req.Wait()
    want = np.full(6 * size, -1.0)
    # block r occupies the extent of one column (5 doubles) from r * 5 doubles: elements 0, 2, 4 of it
    for r in range(size):
        want[r * 5:r * 5 + 5:2] = r
    assert (recv == want).all(), recv
    # a persistent Bcast_init of a derived send type sends what the buffer holds at each Start
    data = np.zeros(6)
    persistent = comm.Bcast_init([data, 1, column], root=0)
    for step in range(3):
        if rank == 0:
            data[:] = step + 1
        persistent.Start()
        persistent.Wait()
        assert (data[0::2] == step + 1).all(), (step, data)
        assert rank == 0 or (data[1::2] == 0).all(), data
        data[1::2] = 0
    persistent.Free()
    column.Free()
"""


@pytest.mark.parametrize("n", [1, 3])
def test_derived_datatypes_in_nonblocking_and_persistent_collectives(tmp_path, n):
    ok(tmp_path, DERIVED, n)
