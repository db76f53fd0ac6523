"""Dynamic windows in the mpi4py stand-in (issue 20 item 6): Win.Create_dynamic,
Attach and Detach, the data movement at absolute addresses, the errors MPI
(Open MPI) gives, and the window's queries. Each program asserts the values
MPI defines (tests/mpi4py_programs/simdist_dynamic_window.py compares the same
calls with Open MPI's on 1, 2 and 4 ranks)."""

from __future__ import annotations

import pytest

from mpi4py_prelude import passes, run_program

HEADER = "import numpy as np\n"


def ok(tmp_path, source: str, n: int = 2):
    return passes(tmp_path, source, n, header=HEADER)


def test_regions_attached_by_each_rank_are_reached_at_their_addresses(tmp_path):
    ok(tmp_path, """
    win = MPI.Win.Create_dynamic(MPI.INFO_NULL, comm)
    assert win.flavor == MPI.WIN_FLAVOR_DYNAMIC == win.Get_attr(MPI.WIN_CREATE_FLAVOR)
    assert win.attrs == (0, 0, 1) and MPI.Get_address(win.tomemory()) == 0 and len(memoryview(win)) == 0
    ints = np.arange(4, dtype=np.int64) + 10 * rank
    doubles = np.zeros(2)
    win.Attach(ints)
    win.Attach(doubles)
    assert win.attrs == (0, 0, 1)           # attached memory is not the window's base (Open MPI)
    where = comm.allgather((MPI.Get_address(ints), MPI.Get_address(doubles)))
    other = 1 - rank
    win.Fence()
    win.Put(np.array([-rank], np.int64), other, where[other][0] + 8 * 3)
    got = np.zeros(2, np.int64)
    win.Get(got, other, where[other][0] + 8)
    win.Accumulate(np.array([0.5, 0.25]), 0, where[0][1], MPI.SUM)
    win.Fence(MPI.MODE_NOSUCCEED)
    assert ints.tolist() == [10 * rank, 10 * rank + 1, 10 * rank + 2, -other], ints
    assert got.tolist() == [10 * other + 1, 10 * other + 2]
    if rank == 0:
        assert doubles.tolist() == [1.0, 0.5]
    comm.Barrier()                          # read before the lock epochs below change them
    old = np.zeros(1, np.int64)
    win.Lock(0)
    win.Fetch_and_op(np.array([100], np.int64), old, 0, where[0][0], MPI.SUM)
    win.Unlock(0)
    comm.Barrier()
    win.Lock(rank)                          # the own lock reconciles: the others' updates are seen
    win.Unlock(rank)
    assert ints[0] == (200 if rank == 0 else 10), ints
    win.Detach(ints)
    win.Detach(doubles)
    win.Free()
    """)


def test_an_access_outside_every_attached_region_is_err_rma_range_naming_rank_call_and_address(tmp_path):
    ok(tmp_path, """
    win = MPI.Win.Create_dynamic(comm=comm)
    mine = np.zeros(4, np.int32)
    win.Attach(mine)
    start = comm.allgather(MPI.Get_address(mine))[1 - rank]
    win.Lock_all()
    for disp in (start - 4, start + 12, 0):  # across its start, across its end, nowhere
        try:
            win.Get(np.zeros(2, np.int32), 1 - rank, disp)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_RMA_RANGE
            text = exc.detail
            assert f"rank {rank} of window" in text and "Win.Get" in text and f"{disp:#x}" in text, text
        else:
            raise AssertionError(f"no error at {disp:#x}")
    win.Get(np.zeros(2, np.int32), 1 - rank, start + 8)   # the window is still usable
    win.Unlock_all()
    win.Free()
    """)


def test_attach_and_detach_errors_are_open_mpis(tmp_path):
    ok(tmp_path, """
    win = MPI.Win.Create_dynamic(comm=MPI.COMM_SELF)
    mem = np.zeros(8, np.int64)
    win.Attach(mem)
    assert error_class(lambda: win.Attach(mem)) == MPI.ERR_RMA_ATTACH        # twice
    assert error_class(lambda: win.Attach(mem[2:4])) == MPI.ERR_RMA_ATTACH   # overlapping
    assert error_class(lambda: win.Detach(mem[1:])) == MPI.ERR_UNKNOWN      # not a region's start
    assert error_class(lambda: win.Detach(np.zeros(2))) == MPI.ERR_UNKNOWN   # never attached
    try:
        win.Attach(b"read-only")
    except BufferError:
        pass
    else:
        raise AssertionError("a read-only buffer was attached")
    empty = np.zeros(0)
    win.Attach(empty)                        # nothing to reach: no region (Open MPI)
    assert error_class(lambda: win.Detach(empty)) == MPI.ERR_UNKNOWN
    allocated = MPI.Win.Allocate(8, comm=MPI.COMM_SELF)
    assert error_class(lambda: allocated.Attach(mem)) == MPI.ERR_RMA_ATTACH  # not a dynamic window
    assert error_class(lambda: allocated.Detach(mem)) == MPI.ERR_RMA_ATTACH
    allocated.Free()
    win.Free()                               # with a region still attached, as MPI allows
    """, n=1)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 3, 4])
def test_origins_find_regions_attached_and_detached_after_their_first_access(tmp_path, n):
    ok(tmp_path, """
    win = MPI.Win.Create_dynamic(comm=comm)
    right, left = (rank + 1) % size, (rank - 1) % size
    first = np.full(4, rank, np.int64)
    win.Attach(first)
    where = comm.allgather(MPI.Get_address(first))
    got = np.zeros(4, np.int64)
    win.Lock_all()
    win.Get(got, right, where[right])
    win.Unlock_all()
    assert got.tolist() == [right] * 4
    comm.Barrier()
    win.Detach(first)
    regions = [np.full(40_000, 1000 * rank + k, np.int32) for k in range(3)]  # the file grows past its first map
    for region in regions:
        win.Attach(region)
    before, where = where, comm.allgather([MPI.Get_address(region) for region in regions])
    win.Fence()
    for k in range(3):
        win.Put(np.array([-k - 1], np.int32), right, where[right][k] + 4 * 39_999)
    win.Fence()
    for k, region in enumerate(regions):
        assert region[0] == 1000 * rank + k and region[-1] == -k - 1, (k, region[[0, -1]])
    win.Lock_all()
    assert error_class(lambda: win.Get(got[:1], left, before[left])) == MPI.ERR_RMA_RANGE  # detached
    win.Unlock_all()
    comm.Barrier()
    for region in regions:
        win.Detach(region)
    win.Free()
    """, n)


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_regions_reconcile_at_every_synchronization_as_a_separate_window(tmp_path, n):
    ok(tmp_path, """
    win = MPI.Win.Create_dynamic(comm=comm)
    assert win.model == MPI.WIN_SEPARATE == win.Get_attr(MPI.WIN_MODEL)
    mem = np.zeros(size, np.int64)
    win.Attach(mem)
    where = comm.allgather(MPI.Get_address(mem))
    group = win.Get_group()
    others = group.Excl([rank])
    # PSCW: every rank exposes to all others, puts its rank into slot `rank` of every other
    win.Post(others)
    win.Start(others)
    for t in range(size):
        if t != rank:
            win.Put(np.array([rank + 1], np.int64), t, where[t] + 8 * rank)
    win.Complete()
    win.Wait()
    assert mem.tolist() == [0 if r == rank else r + 1 for r in range(size)], mem
    mem[rank] = 7 * (rank + 1)              # a local store, public at the next Win.Sync
    win.Sync()
    comm.Barrier()
    win.Lock_all()
    got = np.zeros(1, np.int64)
    for t in range(size):
        win.Get(got, t, where[t] + 8 * t)
        win.Flush(t)
        assert got[0] == 7 * (t + 1), (t, got)
    win.Unlock_all()
    comm.Barrier()
    win.Detach(mem)
    win.Free()
    """, n)


@pytest.mark.slow
def test_an_epoch_open_at_free_of_a_dynamic_window_is_an_error_naming_it(tmp_path):
    outcome = run_program(tmp_path, """
    win = MPI.Win.Create_dynamic(comm=MPI.COMM_SELF)
    win.Attach(np.zeros(2))
    win.Lock(0)
    win.Free()
    """, 1, header=HEADER)
    assert outcome.status != 0 and "Lock without Unlock" in outcome.error, outcome.error


def test_an_empty_mpi_buffer_has_the_address_it_was_made_with(tmp_path):
    ok(tmp_path, """
    assert MPI.Get_address(MPI.buffer()) == 0
    win = MPI.Win.Allocate(0, comm=MPI.COMM_SELF)
    assert MPI.Get_address(win.tomemory()) == win.attrs[0]
    win.Free()
    """, n=1)


@pytest.mark.slow
def test_a_rank_attaches_at_most_1024_regions_at_once(tmp_path):
    ok(tmp_path, """
    win = MPI.Win.Create_dynamic(comm=MPI.COMM_SELF)
    memory = np.zeros(1025, np.int64)
    for k in range(1024):
        win.Attach(memory[k:k + 1])
    assert error_class(lambda: win.Attach(memory[1024:])) == MPI.ERR_RMA_ATTACH
    win.Detach(memory[5:6])
    win.Attach(memory[1024:])              # a detached region's place is free again
    win.Lock(0)
    win.Put(np.array([7], np.int64), 0, MPI.Get_address(memory[1024:]))
    win.Unlock(0)
    assert memory[1024] == 7
    win.Free()
    """, n=1)
