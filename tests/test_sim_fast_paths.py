"""The simulator's one-phase paths for small calls seen before (allreduce,
broadcast, allgather, reduce_scatter, alltoall): they must give what the general path gives, on the
world and on sub-communicators whose slots are evenly spaced, unevenly
spaced or in descending order, and still detect mismatched calls."""

from __future__ import annotations

import time

import numpy as np
import pytest

import simdist
from reference import left_fold, on_rank, values
from simdist import _reduction
from simdist._reduction import fold, fold_in_blocks, fold_rows, fold_ufunc, fold_with, ops_for

# Sub-communicators of a 4-rank world, as world ranks in sub-rank order:
# slots evenly spaced (0, 2), unevenly ([1, 2, 0]), descending ([3, 1]).
GROUPS = {"world": [0, 1, 2, 3], "even": [0, 2], "uneven": [1, 2, 0], "descending": [3, 1]}
REPEATS = 3  # the first call builds the plan, the later ones use it


@pytest.fixture(scope="module")
def world4():
    with simdist.World(4, timeout=30) as world:
        yield world


def _sub(comm, group):
    members = GROUPS[group]
    if comm.rank not in members:
        comm.split(None)
        return None
    return comm.split(0, key=members.index(comm.rank))


@on_rank
def _repeat_small_calls(comm, group, shape, dtype):
    sub = _sub(comm, group)
    if sub is None:
        return None
    out = []
    for i in range(REPEATS):
        x = values(dtype, shape, 60 + i, comm.rank)
        summed = sub.allreduce(x)
        gathered = sub.allgather(x)
        root = i % sub.size
        sent = sub.broadcast(x if sub.rank == root or i % 2 else None, root=root)
        blocks = np.stack([values(dtype, shape, 80 + i * 10 + j, comm.rank) for j in range(sub.size)])
        scattered = sub.reduce_scatter(blocks)
        exchanged = sub.alltoall(blocks)
        results = (summed, gathered, sent, scattered, exchanged)
        for result in results:
            assert result.flags.owndata and result.flags.c_contiguous
        out.append(tuple(r.copy() for r in results))
        for result in results:
            result[...] = 0  # a caller's change to a result must not reach a later call
    return out


@pytest.mark.parametrize("group", list(GROUPS))
@pytest.mark.parametrize("shape,dtype", [((3,), "float32"), ((2, 3), "int64"), ((), "float64")], ids=str)
def test_repeated_small_calls_match_the_reference_on_every_layout(world4, group, shape, dtype):
    results = world4.run(_repeat_small_calls, group, shape, dtype)
    members = GROUPS[group]
    for sub_rank, world_rank in enumerate(members):
        for i, (summed, gathered, sent, scattered, exchanged) in enumerate(results[world_rank]):
            xs = [values(dtype, shape, 60 + i, m) for m in members]
            where = f"{group} sub-rank {sub_rank}, call {i}"
            assert summed.tobytes() == left_fold("sum", xs).tobytes(), where
            assert gathered.shape == (len(members), *shape) and gathered.tobytes() == np.stack(xs).tobytes(), where
            assert sent.shape == shape and sent.tobytes() == xs[i % len(members)].tobytes(), where
            # block j of member m is values(..., 80 + 10 i + j, m)
            mine = [values(dtype, shape, 80 + i * 10 + sub_rank, m) for m in members]
            assert scattered.shape == shape and scattered.tobytes() == left_fold("sum", mine).tobytes(), where
            assert exchanged.shape == (len(members), *shape) and exchanged.tobytes() == np.stack(mine).tobytes(), where


def _mismatch_after_plans(comm, kind):
    x = np.ones(4, np.float32)
    if kind in ("reduce_scatter", "alltoall"):
        x = np.ones((comm.size, 4), np.float32)
    call = getattr(comm, kind)
    for _ in range(REPEATS):
        call(x)
    call(x if comm.rank != 2 else np.ones((*x.shape[:-1], 5), np.float32))


@pytest.mark.parametrize("kind", ["allreduce", "allgather", "broadcast", "reduce_scatter", "alltoall"])
def test_a_mismatch_after_the_plan_is_built_raises_on_every_rank(world4, kind):
    with pytest.raises(simdist.CollectiveMismatch) as info:
        world4.run(_mismatch_after_plans, kind)
    wrong = "(4, 5)" if kind in ("reduce_scatter", "alltoall") else "(5,)"
    assert "rank 2" in str(info.value) and f"float32 {wrong}" in str(info.value)


def _use_after_free(comm):
    sub = comm.split(0)
    x = np.ones(2, np.float32)
    for _ in range(REPEATS):
        sub.broadcast(x)
        sub.allgather(x)
        sub.allreduce(x)
    sub.free()
    errors = []
    for call in (sub.broadcast, sub.allgather, sub.allreduce):
        try:
            call(x)
        except simdist.SimdistError as exc:
            errors.append(str(exc))
    return errors


def test_calls_on_a_freed_communicator_raise_even_after_plans(world4):
    for errors in world4.run(_use_after_free):
        assert len(errors) == 3 and all("freed" in e for e in errors), errors


def _split_again_after_free(comm):
    """A communicator freed, then another on its context and members: the
    new one starts with the plans the old one made, and the old one still
    refuses every call."""
    x, blocks = np.ones(2, np.float32), np.ones((comm.size, 2), np.float32)
    old = comm.split(0)
    calls = ((old.broadcast, x), (old.allgather, x), (old.allreduce, x), (old.alltoall, blocks))
    for _ in range(REPEATS):
        for call, arg in calls:
            call(arg)
    old.free()
    new = comm.split(0)
    planned_at_start = len(new._plans)
    got = [new.allreduce(x * (comm.rank + 1)).tolist(), new.alltoall(blocks * comm.rank)[:, 0].tolist()]
    errors = []
    for call, arg in calls:
        try:
            call(arg)
        except simdist.SimdistError as exc:
            errors.append(str(exc))
    new.free()
    return planned_at_start, got, errors


def test_a_communicator_made_again_starts_with_the_plans_and_the_freed_one_still_refuses(world4):
    for planned_at_start, got, errors in world4.run(_split_again_after_free):
        assert planned_at_start >= 4
        assert got == [[10.0, 10.0], [0.0, 1.0, 2.0, 3.0]]
        assert len(errors) == 4 and all("freed" in e for e in errors), errors


def _reuse_contexts(comm, rounds):
    """Sub-communicators of changing members, each freed after a burst of
    small calls, so that later ones start on contexts the earlier ones used."""
    out = []
    for r in range(rounds):
        members = [(r + k) % comm.size for k in range(2 + r % (comm.size - 1))]
        sub = comm.split(0 if comm.rank in members else None, key=(comm.rank - r) % comm.size)
        if sub is not None:
            for i in range(5):
                x = np.full(3, comm.rank * 10 + i, np.int64)
                out.append((sub.allreduce(x).tolist(), sub.allgather(x)[:, 0].tolist(),
                            sub.broadcast(x if sub.rank == i % sub.size else None, root=i % sub.size).tolist()))
                sub.barrier()
            sub.free()
        comm.barrier()
    return out


def test_contexts_reused_after_free_by_other_members_carry_the_right_values(world4):
    rounds = 12
    results = world4.run(_reuse_contexts, rounds)
    for rank, got in enumerate(results):
        want = []
        for r in range(rounds):
            members = [(r + k) % 4 for k in range(2 + r % 3)]
            if rank not in members:
                continue
            order = sorted(members, key=lambda m: (m - r) % 4)
            for i in range(5):
                values = [m * 10 + i for m in order]
                want.append(([sum(values)] * 3, values, [values[i % len(order)]] * 3))
        assert got == want, f"rank {rank}"


# -- many ranks: the fold of small messages in one numpy call ----------------
DTYPES = ("bool", "int8", "uint16", "int64", "float16", "float32", "float64", "complex64", "complex128")


@pytest.mark.parametrize("dtype", DTYPES)
def test_fold_rows_gives_the_bits_of_the_fold(dtype):
    for op in ops_for(np.dtype(dtype)):
        ufunc = fold_ufunc(op, np.dtype(dtype))
        if ufunc is None:
            continue
        for n in (1, 2, 6, 9, 17):
            for shape in ((), (1,), (7,), (3, 5)):
                xs = [values(dtype, shape, 70, r) for r in range(n)]
                divisor = n if op == "mean" else None
                want = fold_with(ufunc, xs, np.empty(shape, dtype), divisor)
                got = fold_rows(ufunc, np.stack(xs), divisor)
                assert got.dtype == want.dtype and got.shape == want.shape, (op, n, shape)
                assert got.tobytes() == want.tobytes(), (op, n, shape)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fold_in_blocks_gives_the_bits_of_the_fold_in_out_and_also(dtype, monkeypatch):
    monkeypatch.setattr(_reduction, "FOLD_BLOCK_BYTES", 48)  # blocks of 3 to 48 elements, the last one short
    for op in ops_for(np.dtype(dtype)):
        for n in (1, 2, 3, 5):
            xs = [values(dtype, (101,), 73, r) for r in range(n)]
            want = fold(op, xs, np.empty(101, dtype), n)
            got = fold_in_blocks(op, xs, np.empty(101, dtype), n)
            assert got.tobytes() == want.tobytes(), (op, n)
            also = np.zeros(101, dtype)
            got = fold_in_blocks(op, xs, np.empty(101, dtype), n, also=also)
            assert got.tobytes() == want.tobytes() and also.tobytes() == want.tobytes(), (op, n)
            for into in range(min(n, 2)):  # in place: the parallel fold writes into part 0 or 1
                parts = [x.copy() for x in xs]
                got = fold_in_blocks(op, parts, parts[into], n, also=also)
                assert got.tobytes() == want.tobytes() and also.tobytes() == want.tobytes(), (op, n, into)


@on_rank
def _every_op_small(comm, dtype, shape):
    blocks = np.stack([values(dtype, shape, 72 + j, comm.rank) for j in range(comm.size)])
    return [(comm.allreduce(values(dtype, shape, 71, comm.rank), op), comm.reduce_scatter(blocks, op))
            for op in ops_for(np.dtype(dtype))]


@pytest.mark.parametrize("dtype", ["int16", "float32", "complex128", "bool"])
def test_small_allreduce_and_reduce_scatter_on_seven_ranks_equal_the_left_fold(dtype):
    """Seven ranks take the one-call fold for parts of at most 4 x 7 = 28
    elements, one call per rank for longer ones: both give the fold."""
    with simdist.World(7, timeout=60) as world:
        for shape in ((), (5,), (2, 3), (28,), (29,)):
            results = world.run(_every_op_small, dtype, shape)
            xs = [values(dtype, shape, 71, r) for r in range(7)]
            for rank, got in enumerate(results):
                mine = [values(dtype, shape, 72 + rank, r) for r in range(7)]
                for op, (total, scattered) in zip(ops_for(np.dtype(dtype)), got):
                    assert total.tobytes() == left_fold(op, xs).tobytes(), (op, shape)
                    assert scattered.tobytes() == left_fold(op, mine).tobytes(), (op, shape, rank)


def _around_the_bank(comm, inner):
    """Every one-phase call with messages just inside and just outside a bank."""
    out = []
    for i in range(REPEATS):
        x = values("float32", (inner * comm.size,), 90 + i, comm.rank)
        blocks = x.reshape(comm.size, inner)
        out.append((comm.allreduce(x), comm.allgather(x), comm.broadcast(x if comm.rank == 1 else None, root=1),
                    comm.reduce_scatter(blocks), comm.alltoall(blocks)))
    return out


@pytest.mark.parametrize("inner", [220, 221])  # 4 x 220 float32 = 3520 bytes: a bank's payload up to 16 ranks
def test_messages_at_the_edge_of_a_bank_match_the_reference(world4, inner):
    results = world4.run(_around_the_bank, inner)
    for rank, got in enumerate(results):
        for i, (summed, gathered, sent, scattered, exchanged) in enumerate(got):
            xs = [values("float32", (inner * 4,), 90 + i, r) for r in range(4)]
            blocks = [x.reshape(4, inner) for x in xs]
            assert summed.tobytes() == left_fold("sum", xs).tobytes()
            assert gathered.tobytes() == np.stack(xs).tobytes()
            assert sent.tobytes() == xs[1].tobytes()
            assert scattered.tobytes() == left_fold("sum", [b[rank] for b in blocks]).tobytes()
            assert exchanged.tobytes() == np.stack([b[rank] for b in blocks]).tobytes()


def _none_from_non_roots_then(comm, kind, last):
    """Calls where the non-roots pass None (the root-only check caches its
    views), the root's array changing shape, then the call ``last`` names."""
    call = getattr(comm, kind)
    lead = 1 if kind == "broadcast" else comm.size  # scatter: one block per rank
    got = []
    for rows in (2, 3, 3, 2):
        x = np.arange(lead * rows * 2, dtype=np.float32).reshape(-1, 2)[: lead * rows]
        if kind == "scatter":
            x = x.reshape(lead, rows, 2)
        got.append(call(x if comm.rank == 0 else None, root=0).tolist())
    x = np.ones((lead, 2), np.float32)
    try:
        if last == "shape":   # rank 2 passes an array of another shape than the root's
            call(x if comm.rank == 0 else np.ones((lead, 3), np.float32) if comm.rank == 2 else None, root=0)
        elif last == "root":  # rank 3 names another root
            call(x if comm.rank == 0 else None, root=1 if comm.rank == 3 else 0)
        else:                 # rank 1 passes the root's shape: that matches
            got.append(call(x if comm.rank in (0, 1) else None, root=0).tolist())
    except simdist.CollectiveMismatch as exc:
        return str(exc)
    return got


@pytest.mark.parametrize("kind", ["broadcast", "scatter"])
def test_none_from_non_roots_matches_and_a_mismatch_still_raises_on_every_rank(world4, kind):
    results = world4.run(_none_from_non_roots_then, kind, "same")
    for rank, got in enumerate(results):
        if kind == "broadcast":
            assert got[1] == np.arange(6, dtype=np.float32).reshape(3, 2).tolist(), rank
            assert got[4] == [[1.0, 1.0]], rank
        else:
            assert got[1] == np.arange(24, dtype=np.float32).reshape(4, 3, 2)[rank].tolist(), rank
            assert got[4] == [1.0, 1.0], rank
    shape = world4.run(_none_from_non_roots_then, kind, "shape")
    root = world4.run(_none_from_non_roots_then, kind, "root")
    wrong = "(1, 3)" if kind == "broadcast" else "(4, 3)"
    for rank in range(4):
        assert "rank 2" in shape[rank] and wrong in shape[rank], shape[rank]
        assert "root" in root[rank] and "rank 3" in root[rank], root[rank]


def _none_broadcasts_of_changing_arrays(comm):
    """The root (rank 1) sends arrays of changing dtype and shape, in a
    bank, in a half slot and in chunks, twice over; the others pass None."""
    arrays = [np.arange(2, dtype=np.float32), np.arange(6, dtype=np.int64).reshape(2, 3),
              np.arange(880, dtype=np.float32), np.arange(881, dtype=np.float32),
              np.float64(7.5), np.arange((4 << 20) // 4 + 3, dtype=np.float32)]
    got = []
    for x in arrays + arrays:
        out = comm.broadcast(x if comm.rank == 1 else None, root=1)
        got.append(out.dtype == x.dtype and out.shape == x.shape and np.array_equal(out, x))
    return got


def test_none_broadcasts_follow_the_roots_dtype_and_shape_from_call_to_call(world4):
    assert world4.run(_none_broadcasts_of_changing_arrays) == [[True] * 12] * 4


# -- one-phase calls through half slots --------------------------------------
BIG = 20_000  # float32: 80 kB, folded in parallel


def _half_slot_calls_across_contexts(comm, rounds):
    """One-phase calls too large for a bank (they use the half slot of their
    epoch's parity) and parallel folds (the whole slot), alternating between
    the world and a sub-communicator whose members also read the world's
    slots: a rank must not overwrite a half slot that a reader of another
    context has not finished reading."""
    pair = comm.split(comm.rank % 2, key=comm.rank)
    n = 4096 // 4  # 4 KiB per rank: more than a bank, less than half a slot
    got = []
    for r in range(rounds):
        x = np.full(n, comm.rank * 1000 + r, np.float32)
        blocks = np.full((comm.size, n // comm.size), comm.rank * 1000 + r, np.float32)
        world_sum = comm.allreduce(x)
        pair_sum = pair.allreduce(x + 1)
        gathered = comm.allgather(x)
        sent = pair.broadcast(x if pair.rank == r % 2 else None, root=r % 2)
        scattered = comm.reduce_scatter(blocks)
        exchanged = comm.alltoall(blocks)
        big = np.full(BIG, comm.rank * 1000 + r, np.float32)  # folded in parallel
        big_sum = comm.allreduce(big)
        pair_big = pair.reduce(big + 1, root=r % 2)
        got.append([float(world_sum[0]), float(world_sum[-1]), float(pair_sum[-1]),
                    gathered[:, -1].tolist(), float(sent[-1]), float(scattered[-1]), exchanged[:, -1].tolist(),
                    float(big_sum[0]), float(big_sum[-1]), None if pair_big is None else float(pair_big[-1])])
    return got


def _slow_reader_across_contexts(comm, rounds):
    """Rank 1 pauses after every arrival in its sub-communicator, so its
    reads of its partner's slot lag while the partner goes on to the world's
    calls, which write that slot too."""
    pair = comm.split(comm.rank % 2, key=comm.rank)
    if comm.rank == 1:
        arrive = pair._arrive

        def slow_arrive():
            arrive()
            time.sleep(0.002)

        pair._arrive = slow_arrive
    got = []
    for r in range(rounds):
        big = np.full(BIG, comm.rank * 1000 + r, np.float32)
        pair_sum = pair.allreduce(big)
        world_sum = comm.allreduce(big + 1)
        gathered = comm.allgather(np.full(2048, comm.rank + r, np.float32))
        got.append([float(pair_sum[0]), float(pair_sum[-1]), float(world_sum[0]), float(world_sum[-1]),
                    gathered[:, 0].tolist()])
    return got


def test_a_slow_reader_in_one_context_keeps_its_slots_from_another(world4):
    rounds = 24
    for rank, got in enumerate(world4.run(_slow_reader_across_contexts, rounds)):
        partner = [m for m in range(4) if m % 2 == rank % 2]
        for r, row in enumerate(got):
            pair = sum(m * 1000 + r for m in partner)
            world = sum(m * 1000 + r + 1 for m in range(4))
            assert row == [pair, pair, world, world, [m + r for m in range(4)]], f"rank {rank}, round {r}"


def test_half_slot_calls_across_contexts_carry_the_right_values(world4):
    rounds = 40
    results = world4.run(_half_slot_calls_across_contexts, rounds)
    for rank, got in enumerate(results):
        partner = [m for m in range(4) if m % 2 == rank % 2]
        for r, row in enumerate(got):
            mine = [m * 1000 + r for m in range(4)]
            pair_big = sum(m * 1000 + r + 1 for m in partner) if partner.index(rank) == r % 2 else None
            want = [sum(mine), sum(mine), sum(m * 1000 + r + 1 for m in partner), mine,
                    partner[r % 2] * 1000 + r, sum(mine), mine, sum(mine), sum(mine), pair_big]
            assert row == want, f"rank {rank}, round {r}"
