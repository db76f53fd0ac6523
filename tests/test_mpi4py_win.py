"""One-sided communication in the mpi4py stand-in (issue 20 item 6, item
10): MPI.Win of every flavor the stand-in has, the data movement calls,
every synchronization, and what happens to epochs that never close. Each
program asserts the values MPI defines, on 1 to 4 ranks
(tests/mpi4py_programs/simdist_rma.py compares the same calls with Open MPI's)."""

from __future__ import annotations

import textwrap

import pytest

from simdist._script import run_script

from mpi4py_prelude import PRELUDE as BASE_PRELUDE

PRELUDE = BASE_PRELUDE + """\
import numpy as np
"""


def outcome(tmp_path, source: str, n: int, timeout: float = 30.0):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent(source))
    return run_script(str(path), [], n, timeout=timeout)


def ok(tmp_path, source: str, n: int):
    result = outcome(tmp_path, source, n)
    assert result.status == 0, result.error


FENCE = """
    # Win.Create over the program's buffer (a separate-model window)
    buf = np.full(size, -1, np.int64)
    win = MPI.Win.Create(buf, 8, comm=comm)
    assert win.Get_attr(MPI.WIN_MODEL) == MPI.WIN_SEPARATE and win.model == MPI.WIN_SEPARATE
    assert win.Get_attr(MPI.WIN_CREATE_FLAVOR) == MPI.WIN_FLAVOR_CREATE
    assert win.Get_attr(MPI.WIN_SIZE) == 8 * size and win.Get_attr(MPI.WIN_DISP_UNIT) == 8
    assert win.Get_attr(MPI.WIN_BASE) == buf.ctypes.data
    win.Fence()
    for t in range(size):
        win.Put(np.array([100 * rank + t], np.int64), t, rank)   # slot `rank` of every rank
    win.Fence()
    assert buf.tolist() == [100 * r + rank for r in range(size)], buf
    got = np.zeros(size, np.int64)
    win.Get(got, (rank + 1) % size)
    win.Fence()
    assert got.tolist() == [100 * r + (rank + 1) % size for r in range(size)]
    buf[:] = rank          # a local store before the fence is what the others read after it
    win.Fence()
    win.Get(got, (rank + 1) % size)
    win.Fence(MPI.MODE_NOSUCCEED)
    assert got.tolist() == [(rank + 1) % size] * size
    assert error_class(lambda: win.Put(got, 0)) == MPI.ERR_RMA_SYNC  # no epoch open
    win.Free()
    assert win == MPI.WIN_NULL and not win
    # Win.Allocate: accumulates fold in origin rank order at the fence
    win = MPI.Win.Allocate(4 * 8, 8, comm=comm)
    mem = np.frombuffer(win.tomemory(), np.float64)
    assert win.Get_attr(MPI.WIN_MODEL) == MPI.WIN_UNIFIED and win.flavor == MPI.WIN_FLAVOR_ALLOCATE
    mem[:] = 1.0
    win.Fence()
    for t in range(size):
        win.Accumulate(np.full(4, 0.1 * (rank + 1)), t, op=MPI.SUM)
        win.Accumulate(np.array([rank], np.float64), t, (3, 1, MPI.DOUBLE), op=MPI.MAX)
    win.Fence()
    expect = 1.0
    for r in range(size):
        expect += 0.1 * (r + 1)
    assert mem[:3].tolist() == [expect] * 3, mem
    assert mem[3] == max(expect, size - 1)
    old = np.zeros(1, np.float64)
    win.Fetch_and_op(np.array([2.0]), old, 0, 0, MPI.PROD)   # every rank doubles rank 0's element 0
    win.Fence()
    assert old[0] == expect * 2.0 ** rank  # origins take turns in rank order
    win.Free()
"""


LOCKS = """
    win = MPI.Win.Allocate(8 * (size + 1), 8, comm=comm)
    mem = np.frombuffer(win.tomemory(), np.int64)
    mem[:] = 0
    comm.Barrier()
    one = np.ones(1, np.int64)
    ticket = np.zeros(1, np.int64)
    for t in range(size):
        win.Lock(t, MPI.LOCK_SHARED)
        win.Fetch_and_op(one, ticket, t, 0, MPI.SUM)   # atomic: every rank gets another ticket
        win.Put(np.array([rank + 1], np.int64), t, 1 + rank)
        win.Flush(t)
        win.Unlock(t)
    tickets = comm.allgather(int(ticket[0]))
    assert sorted(tickets) == list(range(size)), tickets
    comm.Barrier()
    assert mem.tolist() == [size] + list(range(1, size + 1)), mem
    comm.Barrier()
    win.Lock(0)  # exclusive
    res = np.zeros(1, np.int64)
    win.Compare_and_swap(np.array([-7], np.int64), np.array([size], np.int64), res, 0, 0)
    win.Unlock(0)
    comm.Barrier()
    assert rank != 0 or mem[0] == -7
    win.Lock_all()
    req = win.Rget(res, 0, 0)
    req.Wait()
    r2 = win.Raccumulate(np.array([1], np.int64), 0, 1, op=MPI.BOR)
    r2.Wait()
    win.Flush_all()
    win.Unlock_all()
    assert res[0] == -7
    assert error_class(lambda: win.Unlock(0)) == MPI.ERR_RMA_SYNC
    assert error_class(lambda: win.Rput(one, 0)) == MPI.ERR_RMA_SYNC
    win.Free()
    # Create windows: the target's own Lock/Unlock makes the others' updates visible
    buf = np.zeros(size, np.int32)
    win = MPI.Win.Create(buf, 4, comm=comm)
    win.Lock(0)
    win.Accumulate(np.array([rank + 1], np.int32), 0, 0, MPI.SUM)
    win.Unlock(0)
    comm.Barrier()
    win.Lock(rank)
    win.Unlock(rank)
    assert rank != 0 or buf[0] == size * (size + 1) // 2, buf
    win.Free()
"""


PSCW_AND_SHARED = """
    buf = np.zeros(2, np.int64)
    win = MPI.Win.Create(buf, 8, comm=comm)
    g = comm.Get_group()
    left, right = (rank - 1) % size, (rank + 1) % size
    win.Post(g.Incl([left]))
    win.Start(g.Incl([right]))
    win.Put(np.array([rank], np.int64), right, 0)
    win.Accumulate(np.array([10 + rank], np.int64), right, 1, MPI.SUM)
    win.Complete()
    win.Wait()
    assert buf.tolist() == [left, 10 + left], buf
    win.Post(g.Incl([left]))
    win.Start(g.Incl([right]))
    win.Complete()
    while not win.Test():
        pass
    win.Free()
    # Allocate_shared: every rank loads and stores the others' memory directly
    win = MPI.Win.Allocate_shared(8 * (rank + 1), 8, comm=comm)
    mine = np.frombuffer(win.tomemory(), np.int64)
    mine[:] = rank
    comm.Barrier()
    base0 = win.Shared_query(0)[0].address
    for r in range(size):
        mem, unit = win.Shared_query(r)
        assert unit == 8 and len(mem) == 8 * (r + 1)
        assert mem.address == base0 + 8 * (r * (r + 1) // 2)  # contiguous, rank after rank
        assert np.frombuffer(mem, np.int64).tolist() == [r] * (r + 1)
    win.Free()
    assert error_class(lambda: MPI.Win.Allocate(8, comm=comm).Shared_query(0)) == MPI.ERR_RMA_FLAVOR
"""


DERIVED = """
    # Derived datatypes on either side: the bytes their type maps cover, nothing else
    n = 4 * size
    mem = np.full(n, -1, np.int32)
    win = MPI.Win.Create(mem, 4, comm=comm)
    every_other = MPI.INT.Create_vector(size, 1, 2).Commit()          # elements 0, 2, 4, ...
    but_mine = MPI.INT.Create_indexed([rank, size - rank - 1], [0, rank + 1]).Commit()
    right, left = (rank + 1) % size, (rank - 1) % size
    win.Fence()
    win.Put(np.full(size, rank, np.int32), right, (1, 1, every_other))  # odd slots 1, 3, ... of the right
    win.Fence()
    assert mem[1:2 * size:2].tolist() == [left] * size and mem[0:2 * size:2].tolist() == [-1] * size, mem
    got = np.full(2 * size, -7, np.int32)
    win.Get([got, 1, every_other], left, (1, 1, every_other))          # into even slots of got
    win.Fence()
    assert got[0::2].tolist() == [(left - 1) % size] * size and got[1::2].tolist() == [-7] * size, got
    # nxtval's counter: a Get of every slot but one's own, in an exclusive lock with an Accumulate
    win.Fence()
    mem[:] = 0
    win.Fence()
    seen = []
    for step in range(3):
        vals = np.zeros(size, np.int32)
        win.Lock(0)
        win.Accumulate([np.ones(1, np.int32), 1, MPI.INT], 0, [rank, 1, MPI.INT], MPI.SUM)
        win.Get([vals, 1, but_mine], 0, [0, 1, but_mine])
        win.Unlock(0)
        vals[rank] = step
        seen.append(int(vals.sum()))
    seen = sorted(x for part in comm.allgather(seen) for x in part)
    assert seen == list(range(3 * size)), seen
    # accumulates and Get_accumulate through a derived target datatype of the same basic type
    comm.Barrier()
    win.Lock(right)
    before = np.zeros(size, np.int32)
    win.Get_accumulate(np.full(size, 10, np.int32), [before, size, MPI.INT], right, (0, 1, every_other), MPI.SUM)
    win.Unlock(right)
    comm.Barrier()
    win.Lock(rank)
    mine = np.zeros(n, np.int32)
    win.Get(mine, rank)
    win.Unlock(rank)
    lefts = comm.allgather(before)[left]                                # what my left saw in my window
    assert mine[0:2 * size:2].tolist() == [v + 10 for v in lefts.tolist()], (mine, lefts)
    assert error_class(lambda: win.Accumulate(np.zeros(1, np.float64), 0, (0, 1, every_other))) == MPI.ERR_TYPE
    below = MPI.INT.Create_indexed([1], [-1]).Commit()                 # one int below the displacement
    win.Fence()
    win.Put(np.array([rank + 100], np.int32), right, (1, 1, below))   # element 0 of the right's window
    win.Fence()
    assert mem[0] == left + 100, mem
    assert error_class(lambda: win.Put(np.zeros(1, np.int32), right, (0, 1, below))) == MPI.ERR_RMA_RANGE
    win.Fence()
    past = MPI.INT.Create_vector(n, 1, 2).Commit()                     # reaches past the window's end
    win.Lock(0)
    assert error_class(lambda: win.Get(np.zeros(n, np.int32), 0, (0, 1, past))) == MPI.ERR_RMA_RANGE
    win.Unlock(0)
    comm.Barrier()
    win.Free()
    for t in (every_other, but_mine, below, past):
        t.Free()
"""


@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)])
def test_derived_datatypes_on_either_side_move_exactly_their_type_maps_bytes(tmp_path, n):
    ok(tmp_path, DERIVED, n)


def test_fence_epochs_put_get_and_fold_accumulates_in_rank_order(tmp_path):
    ok(tmp_path, FENCE, 2)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 3, 4])
def test_fence_epochs_on_one_three_and_four_ranks(tmp_path, n):
    ok(tmp_path, FENCE, n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_lock_epochs_are_atomic_and_exclusive(tmp_path, n):
    ok(tmp_path, LOCKS, n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_pscw_epochs_and_shared_windows(tmp_path, n):
    ok(tmp_path, PSCW_AND_SHARED, n)


DETERMINISTIC = """
    win = MPI.Win.Allocate(8 * 16, 8, comm=comm)
    mem = np.frombuffer(win.tomemory(), np.float64)
    mem[:] = 0.1
    rng = np.random.default_rng(rank)
    win.Fence()
    for _ in range(5):
        for t in range(size):
            win.Accumulate(rng.standard_normal(16) * 10.0 ** rng.integers(-8, 8, 16), t, op=MPI.SUM)
    win.Fence()
    print(rank, "fence", mem.tobytes().hex())
    everyone = comm.Get_group()
    win.Post(everyone)
    win.Start(everyone)
    for t in range(size):
        win.Accumulate(rng.standard_normal(16) * 10.0 ** rng.integers(-8, 8, 16), t, op=MPI.SUM)
    win.Complete()
    win.Wait()
    print(rank, "pscw", mem.tobytes().hex())
    win.Free()
"""


@pytest.mark.slow
def test_concurrent_fence_and_pscw_accumulates_give_the_same_bits_every_run(tmp_path, capfd):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent(DETERMINISTIC))
    seen = set()
    for _ in range(20):
        assert run_script(str(path), [], 3, timeout=30.0).status == 0
        seen.add(tuple(sorted(capfd.readouterr().out.splitlines())))
    assert len(seen) == 1


@pytest.mark.parametrize("source, text", [
    ("win.Lock(0)\nwin.Free()", "Lock without Unlock"),
    pytest.param("win.Post(comm.Get_group())\nwin.Free()", "Post without Wait", marks=pytest.mark.slow),
    pytest.param("win.Post(comm.Get_group())\nwin.Start(comm.Get_group())\nwin.Free()", "Start without Complete", marks=pytest.mark.slow),
])
def test_an_epoch_open_at_free_is_an_error_naming_it(tmp_path, source, text):
    result = outcome(tmp_path, "win = MPI.Win.Allocate(8, comm=comm)\n" + source, 1)
    assert result.status == 1 and "MPI_ERR_RMA_SYNC" in result.error and text in result.error, result.error


@pytest.mark.slow
def test_a_fence_one_rank_never_calls_is_reported(tmp_path):
    result = outcome(tmp_path, """
        win = MPI.Win.Allocate(8, comm=comm)
        if rank == 0:
            win.Fence()
        win.Free()
    """, 2)
    assert result.status != 0 and "CollectiveMismatch" in result.error, result.error


@pytest.mark.slow
def test_a_start_whose_post_never_comes_is_reported_naming_it(tmp_path):
    result = outcome(tmp_path, """
        win = MPI.Win.Allocate(8, comm=comm)
        if rank == 0:
            win.Start(comm.Get_group().Incl([1]))
    """, 2, timeout=10.0)
    assert result.status != 0 and "Win.Start" in result.error, result.error


@pytest.mark.slow
def test_a_lock_never_given_back_is_a_reported_hang(tmp_path):
    result = outcome(tmp_path, """
        win = MPI.Win.Allocate(8, comm=comm)
        if rank == 0:
            win.Lock(0)
        comm.Barrier()   # rank 0 holds its lock here
        if rank == 1:
            win.Lock(0)  # waits for ever: rank 0 never unlocks
        comm.Barrier()
    """, 2, timeout=10.0)
    assert result.status != 0 and ("deadlock" in result.error or "hung" in result.error), result.error


@pytest.mark.slow
def test_a_failed_call_leaves_the_window_usable(tmp_path):
    ok(tmp_path, """
        win = MPI.Win.Allocate(16, 8, comm=comm)
        win.Fence()
        assert error_class(lambda: win.Put(np.zeros(3), rank)) == MPI.ERR_RMA_RANGE
        assert error_class(lambda: win.Accumulate(np.zeros(1, np.int32), rank, (0, 1, MPI.INT64_T))) in (
            MPI.ERR_TYPE,)
        assert error_class(lambda: win.Lock(0, 99)) == MPI.ERR_LOCKTYPE
        win.Accumulate(np.ones(2), rank, op=MPI.SUM)
        win.Fence()
        assert np.frombuffer(win.tomemory(), np.float64).tolist() == [1.0, 1.0]
        win.Set_errhandler(MPI.ERRORS_RETURN)
        assert win.Get_errhandler() == MPI.ERRORS_RETURN
        win.Set_name("w")
        assert win.Get_name() == "w" and MPI.WIN_NULL.Get_name() == "MPI_WIN_NULL"
        win.Free()
        assert error_class(lambda: win.Fence()) == MPI.ERR_WIN
    """, 2)
