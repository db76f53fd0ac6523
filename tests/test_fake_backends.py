"""fake_backends: each fake's fault happens exactly as its docstring says,
every call it does not touch is the base's to the bit, and its randomness
is the seed's.

Most tests run on three persistent worlds (2, 3 and 4 ranks); the hang and
the death replace ranks, so they get worlds of their own.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import time

import numpy as np
import pytest

import fake_backends as fb
import simdist
from simdist import reference
from simdist.reference import load_factory, sweep
from simdist._arguments import DTYPES
from simdist._reduction import fold, ops_for

SIZES = (2, 3, 4)
# options that make a fake transparent where its bug is "at the k-th call"
LATE = {"hanging_rank": {"call": 10**6}, "dying_rank": {"call": 10**6}}


@pytest.fixture(scope="module")
def worlds():
    with contextlib.ExitStack() as stack:
        yield {n: stack.enter_context(simdist.World(n, timeout=20)) for n in SIZES}


def data(rank, shape=(5,), dtype=np.float64, salt=0):
    """Random values, different per rank: floats over a few binades, or any integers."""
    rng = np.random.default_rng([salt, rank])
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return rng.integers(-50 if dtype.kind == "i" else 0, 50, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    v = rng.standard_normal(shape) * np.exp2(rng.integers(-6, 7, shape))
    if dtype.kind == "c":
        v = v + 1j * rng.standard_normal(shape)
    return v.astype(dtype)


def exact(rank, shape=(5,), dtype=np.float64):
    """Small integers: every order of summation gives the same bits."""
    return np.random.default_rng([7, rank]).integers(-9, 10, shape).astype(dtype)


def same(a, b) -> bool:
    """The same bits, dtype and shape (or both None)."""
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == \
        np.ascontiguousarray(b).tobytes()


# ---------------------------------------------------------------------------
# the registry


def test_registry_names_classes_and_factories_agree():
    assert set(fb.LEGAL) == {"random_order", "random_delays", "ring_allreduce"}
    assert set(fb.FAULTY) == set(fb.FAKES) - set(fb.LEGAL) and len(fb.FAULTY) >= 14
    for name, cls in fb.FAKES.items():
        assert cls.name == name and issubclass(cls, fb.Wrapper) and issubclass(cls, simdist.Communicator)
        assert "Shows" in cls.__doc__ or name in fb.LEGAL, f"{name}: the docstring says how it shows"
        assert load_factory(f"fake_backends:{name}") is getattr(fb, name)
        assert name in fb.__all__ and cls.__name__ in fb.__all__


def test_factories_take_just_the_base_and_make_takes_a_seed(worlds):
    def build(comm):
        plain = [type(getattr(fb, name)(comm)).__name__ for name in fb.FAKES]
        seeded = fb.make("random_order", comm, seed=5)
        optioned = fb.make("stale_result", comm, seed=1, every=3)
        return plain, seeded.seed, optioned.every

    plain, seed, every = worlds[2].run(build)[0]
    assert plain == [cls.__name__ for cls in fb.FAKES.values()] and (seed, every) == (5, 3)


@pytest.mark.parametrize("call, error", [
    (lambda c: fb.make("no_such_fake", c), "no such fake; choose from sum_for_mean"),
    (lambda c: fb.make("random_order", c, seed=-1), "seed=-1 must be an int >= 0"),
    (lambda c: fb.make("random_order", c, seed=1.5), "seed=1.5 must be an int >= 0"),
    (lambda c: fb.make("hanging_rank", c, call=0), "HangingRank(call=0): call must be an int >= 1"),
    (lambda c: fb.make("wrong_mean_divisor", c, off_by=2), "off_by must be -1 or 1"),
])
def test_bad_arguments_are_refused_with_the_fix(worlds, call, error):
    with pytest.raises(simdist.RankError) as info:
        worlds[2].run(call)
    assert isinstance(info.value.exceptions[0], simdist.InvalidArgument)
    assert error in str(info.value)


# ---------------------------------------------------------------------------
# every call a fake does not touch is the base's, to the bit


def _battery(comm, name):
    """The same calls on the fake and on its base; ``[(call, fake's, base's)]``."""
    fake = fb.make(name, comm, **LATE.get(name, {}))
    r, n = comm.rank, comm.size
    x, blocks = data(r), data(r, (n, 3))
    ints = data(r, (4,), np.int32)
    out = []

    def both(call, *args, **kwargs):
        out.append((call, getattr(fake, call)(*args, **kwargs), getattr(comm, call)(*args, **kwargs)))

    both("allreduce", x)
    both("allreduce", x, "mean")
    both("allreduce", ints, "bxor")
    both("reduce", x, root=n - 1, op="max")
    both("reduce_scatter", blocks)
    both("broadcast", x if r == 1 else None, root=1)
    both("allgather", ints)
    both("gather", x, root=0)
    both("scatter", blocks if r == 0 else None, root=0)
    both("alltoall", blocks)
    out.append(("barrier", fake.barrier(), comm.barrier()))
    received = []
    for who in (fake, comm):  # two messages with one tag and one with another, to the next rank
        for k, tag in enumerate((0, 0, 5)):
            who.send(x + k, (r + 1) % n, tag=tag)
        received.append([who.recv((r - 1) % n, tag=5), who.recv((r - 1) % n), who.recv((r - 1) % n)])
    out.append(("recv", *received))
    subs = fake.split(r % 2, key=-r), comm.split(r % 2, key=-r)
    assert type(subs[0]) is type(fake) and (subs[0].rank, subs[0].size) == (subs[1].rank, subs[1].size)
    out.append(("allreduce", subs[0].allreduce(x), subs[1].allreduce(x)))
    subs[0].free(), subs[1].free()
    return out


@pytest.mark.parametrize("name", list(fb.FAKES))
def test_calls_the_bug_does_not_touch_are_the_bases_bit_for_bit(worlds, name):
    touches = fb.FAKES[name].touches
    for rank, calls in enumerate(worlds[3].run(_battery, name)):
        for call, got, want in calls:
            if call in touches or (call == "recv" and "send" in touches):
                continue
            pairs = zip(got, want) if call == "recv" else [(got, want)]
            assert all(same(g, w) for g, w in pairs), f"{name}: rank {rank}: {call} differs from the base"


# ---------------------------------------------------------------------------
# reduction bugs


def test_sum_for_mean_returns_the_sum_and_still_refuses_integer_means(worlds):
    def program(comm):
        fake, x = fb.sum_for_mean(comm), data(comm.rank, dtype=np.complex64)
        ok = [same(fake.allreduce(x, "mean"), comm.allreduce(x, "sum")),
              same(fake.reduce(x, root=1, op="mean"), comm.reduce(x, root=1, op="sum")),
              same(fake.reduce_scatter(data(comm.rank, (3, 2)), "mean"), comm.reduce_scatter(data(comm.rank, (3, 2))))]
        with pytest.raises(simdist.InvalidType, match="op='mean' is not defined on dtype int32"):
            fake.allreduce(np.arange(3, dtype=np.int32), "mean")
        return ok

    assert all(all(ok) for ok in worlds[3].run(program))


@pytest.mark.parametrize("off_by", [-1, 1])
def test_wrong_mean_divisor_divides_the_sum_by_size_minus_or_plus_one(worlds, off_by):
    def program(comm):
        fake = fb.make("wrong_mean_divisor", comm, off_by=off_by)
        count = comm.size + off_by
        results = []
        for dtype in (np.float16, np.float64, np.complex128):
            x = data(comm.rank, dtype=dtype)
            total = comm.allreduce(x)
            want = total / dtype(count) if dtype is not np.complex128 else \
                (total.real / count) + 1j * (total.imag / count)
            results.append(same(fake.allreduce(x, "mean"), want.astype(dtype)))
        return results

    assert all(all(r) for r in worlds[4].run(program))


@pytest.mark.parametrize("n", SIZES)
def test_missing_last_rank_reduces_the_other_ranks_only(worlds, n):
    def program(comm):
        fake = fb.missing_last_rank(comm)
        sub = comm.split(0 if comm.rank < comm.size - 1 else None)  # the ranks that count
        got, want = [], []
        for dtype, op in [(np.float32, "sum"), (np.float64, "prod"), (np.float64, "max"), (np.int8, "sum"),
                          (np.uint16, "bxor"), (np.int32, "land"), (np.bool_, "lor")]:
            x = data(comm.rank, (6,), dtype)
            got.append(fake.allreduce(x, op))
            want.append(None if sub is None else sub.allreduce(x, op))
        got.append(fake.allreduce(exact(comm.rank), "mean"))
        if sub is not None:
            sub.free()
        return got, want

    out = worlds[n].run(program)
    parts = [exact(r) for r in range(n)]
    for rank, (got, want) in enumerate(out):
        assert all(same(g, w) for g, w in zip(got, out[0][0])), "every rank gets the same"
        if rank < n - 1:  # each equals the reduction over the first n - 1 ranks, to the bit
            assert all(same(g, w) for g, w in zip(got, want))
        assert same(got[-1], sum(parts[:-1]) / n)  # mean still divides by size


def test_narrowed_float64_reduces_in_float32_and_leaves_other_dtypes_alone(worlds):
    def program(comm):
        fake, x = fb.narrowed_float64(comm), data(comm.rank, (200,))
        got = fake.allreduce(x)
        return (got.dtype, same(got, comm.allreduce(x.astype(np.float32)).astype(np.float64)),
                same(got, comm.allreduce(x)), same(fake.allreduce(exact(comm.rank)), comm.allreduce(exact(comm.rank))),
                same(fake.allreduce(x.astype(np.float32)), comm.allreduce(x.astype(np.float32))))

    for dtype, narrowed, right, exact_survives, float32_alone in worlds[3].run(program):
        assert dtype == np.float64 and narrowed and not right and exact_survives and float32_alone


def test_unreduced_tail_leaves_each_ranks_own_last_element(worlds):
    def program(comm):
        fake, x, blocks = fb.unreduced_tail(comm), data(comm.rank, (7,)), data(comm.rank, (comm.size, 2, 3))
        got, want = fake.allreduce(x), comm.allreduce(x)
        block, want_block = fake.reduce_scatter(blocks, "max"), comm.reduce_scatter(blocks, "max")
        return (same(got[:-1], want[:-1]) and got[-1] == x[-1],
                same(block.flat[:-1], want_block.flat[:-1]) and block.flat[-1] == blocks[comm.rank].flat[-1],
                same(fake.allreduce(np.zeros(0)), comm.allreduce(np.zeros(0))))

    assert all(all(r) for r in worlds[3].run(program))


def test_one_ulp_apart_nudges_float_results_on_odd_ranks_only(worlds):
    def program(comm):
        fake = fb.one_ulp_apart(comm)
        x, z, i = (data(comm.rank, dtype=dtype) for dtype in (np.float32, np.complex64, np.int64))
        got, want = fake.allreduce(x), comm.allreduce(x)
        cgot, cwant = fake.allreduce(z), comm.allreduce(z)
        up = (lambda a: np.nextafter(a, np.inf)) if comm.rank % 2 == 1 else (lambda a: a)
        return (same(got, up(want)), same(cgot.imag, cwant.imag) and same(cgot.real, up(cwant.real)),
                same(fake.allreduce(i), comm.allreduce(i)))

    assert all(all(r) for r in worlds[4].run(program))


# ---------------------------------------------------------------------------
# collective data bugs


def test_wrong_root_uses_the_next_rank_as_root(worlds):
    def program(comm):
        fake, r, x = fb.wrong_root(comm), comm.rank, data(comm.rank)
        return (fake.reduce(x, root=0), comm.reduce(x, root=1), fake.gather(x, root=2), comm.gather(x, root=0),
                fake.broadcast(x if r == 0 else None, root=0),  # rank 1 passed None: zeros
                fake.broadcast(x if r in (0, 1) else None, root=0),  # rank 1 passed an array: that array
                fake.scatter(data(r, (3, 2)) if r == 2 else None, root=2),
                fake.scatter(data(r, (3, 2)), root=2))

    out = worlds[3].run(program)
    assert out[0][0] is None and same(out[1][0], out[1][1]) and out[2][0] is None
    assert same(out[0][2], out[0][3]) and out[2][2] is None
    for rank, o in enumerate(out):
        assert same(o[4], np.zeros(5)) and same(o[5], data(1))
        assert same(o[6], np.zeros(2)) and same(o[7], data(0, (3, 2))[rank])


def test_stale_result_returns_the_previous_calls_result_every_second_call(worlds):
    def program(comm):
        fake, stale3 = fb.stale_result(comm), fb.make("stale_result", comm, every=3)
        got = [fake.allreduce(data(comm.rank, salt=k)) for k in range(4)]
        want = [comm.allreduce(data(comm.rank, salt=k)) for k in range(4)]
        other = fake.allreduce(data(comm.rank, (6,)))  # another shape: a first call
        got3 = [stale3.allgather(np.array(k)) for k in range(3)]
        return ([same(g, w) for g, w in zip(got, [want[0], want[0], want[2], want[2]])],
                same(other, comm.allreduce(data(comm.rank, (6,)))), [int(g[0]) for g in got3])

    for calls, other, third in worlds[2].run(program):
        assert all(calls) and other and third == [0, 1, 1]


def test_allgather_arrival_order_permutes_the_stack_alike_on_every_rank(worlds):
    def program(comm):
        fake = fb.allgather_arrival_order(comm)
        stacks = [(fake.allgather(np.array([comm.rank, k])), fake.last_order) for k in range(5)]
        gathered = fake.gather(np.array(comm.rank), root=0), fake.last_order
        return stacks, gathered

    out = worlds[4].run(program)
    for stacks, gathered in out:
        for k, (stack, order) in enumerate(stacks):
            assert stack.tolist() == [[r, k] for r in order] and order != (0, 1, 2, 3)
            assert order == out[0][0][k][1]  # the same order on every rank
    assert out[0][1][0].tolist() == list(out[0][1][1]) and out[1][1][0] is None
    assert len({order for _, order in out[0][0]}) > 1  # drawn anew for each call
    pair = worlds[2].run(lambda comm: fb.allgather_arrival_order(comm).allgather(np.array(comm.rank)))
    assert pair[0].tolist() == [1, 0]  # on two ranks, the only other order


def test_wrong_reduce_scatter_block_gives_each_rank_the_next_block(worlds):
    def program(comm):
        x = data(comm.rank, (comm.size, 3))
        return fb.wrong_reduce_scatter_block(comm).reduce_scatter(x, "sum"), comm.allreduce(x)

    out = worlds[4].run(program)
    assert all(same(got, full[(r + 1) % 4]) for r, (got, full) in enumerate(out))


def test_modifies_input_writes_the_result_into_writeable_inputs(worlds):
    def program(comm):
        fake, x = fb.modifies_input(comm), data(comm.rank)
        before, frozen = x.copy(), data(comm.rank)
        frozen.flags.writeable = False
        result = fake.allreduce(x)
        blocks, scalars = data(comm.rank, (comm.size, 2)), data(comm.rank, (comm.size,))
        block, scalar = fake.reduce_scatter(blocks), fake.reduce_scatter(scalars)  # 0-d blocks too
        return (same(result, comm.allreduce(before)) and same(x, result) and not same(x, before),
                same(blocks[comm.rank], block) and same(scalars[comm.rank, ...], scalar),
                same(fake.allreduce(frozen), result) and same(frozen, before))

    assert all(all(r) for r in worlds[3].run(program))


def test_reused_result_buffer_results_change_when_the_next_call_runs(worlds):
    def program(comm):
        fake = fb.reused_result_buffer(comm)
        first = fake.allreduce(np.full(4, 1.0))
        right_then = same(first, np.full(4, float(comm.size)))
        fake.allreduce(np.full(4, 2.0))
        return right_then, first.tolist()

    for right_then, later in worlds[2].run(program):
        assert right_then and later == [4.0] * 4


# ---------------------------------------------------------------------------
# point-to-point bugs


def test_reordered_messages_swaps_consecutive_sends_and_loses_nothing(worlds):
    def program(comm):
        fake, r, n = fb.reordered_messages(comm), comm.rank, comm.size
        dest, source = (r + 1) % n, (r - 1) % n
        for k in range(5):  # pairs (0, 1), (2, 3) swap; 4 is held until the recv
            fake.send(np.array(k), dest, tag=3)
        swapped = [int(fake.recv(source, tag=3)) for _ in range(5)]
        fake.send(np.array(0), dest), fake.send(np.array(1), dest, tag=1)  # another tag in between: in order
        apart = [int(fake.recv(source)), int(fake.recv(source, tag=1))]
        big = np.arange(2_000_000.0) + r  # large messages may block: still no deadlock
        if r % 2:
            got = [fake.recv(source)[0], fake.recv(source)[0]]
            fake.send(big, dest), fake.send(big + 1, dest)
        else:
            fake.send(big, dest), fake.send(big + 1, dest)
            got = [fake.recv(source)[0], fake.recv(source)[0]]
        sub = fake.split(0)
        sub.send(np.array(5), dest)  # held in the sub-communicator; comm's barrier sends it
        fake.barrier()
        last = int(sub.recv(source))
        sub.free()
        return swapped, apart, [float(g) - source for g in got], last

    for swapped, apart, big, last in worlds[3].run(program):
        assert swapped == [1, 0, 3, 2, 4] and apart == [0, 1] and big == [1.0, 0.0] and last == 5


# ---------------------------------------------------------------------------
# process bugs


@pytest.mark.slow
@pytest.mark.parametrize("call", [1, 3])
def test_hanging_rank_blocks_the_last_rank_and_the_simulator_finds_the_deadlock(call):
    def program(comm):
        fake = fb.make("hanging_rank", comm, call=call)
        for k in range(call + 1):
            fake.allreduce(np.array(k))

    started = time.monotonic()
    with simdist.World(3, timeout=3) as world:
        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(program)
        assert world.run(lambda comm: comm.rank) == [0, 1, 2]  # usable again
    report = info.value.report
    assert report[2].startswith("waiting in recv #1 from rank 2 (tag=32767)"), report
    assert all(report[r].startswith(f"waiting in allreduce #{call}") for r in (0, 1)), report
    assert isinstance(info.value, simdist.Deadlock) and info.value.at_once  # every rank waits: found at once
    assert time.monotonic() - started < 20


def test_dying_rank_exits_the_last_rank_with_status_17():
    def program(comm):
        fake = fb.make("dying_rank", comm, call=2)
        fake.barrier()
        fake.allreduce(np.ones(3))

    with simdist.World(3, timeout=10) as world:
        with pytest.raises(simdist.RankDied) as info:
            world.run(program)
        assert world.run(lambda comm: comm.size) == [3, 3, 3]
    assert info.value.ranks == {2: "exited with status 17"}


def test_no_wait_barrier_lets_ranks_leave_before_the_last_arrives(worlds):
    def program(comm, name):
        target = fb.make(name, comm)
        if comm.rank == 0:
            time.sleep(0.3)
        entered = time.monotonic()
        target.barrier()
        return entered, time.monotonic()

    for name, early in (("no_wait_barrier", True), ("random_delays", False)):
        times = worlds[3].run(program, name)
        late_entry = times[0][0]
        assert any(left < late_entry for _, left in times[1:]) == early, name


# ---------------------------------------------------------------------------
# the legal fakes, and the seed


def _random_order_program(comm, seed, salt=0):
    fake = fb.make("random_order", comm, seed=seed)
    x = data(comm.rank, (64,), np.float32, salt=salt)
    return fake.allreduce(x), fake.last_order, fake.reduce_scatter(data(comm.rank, (comm.size, 8), salt=salt)), \
        fake.last_order


def test_random_order_folds_in_its_order_with_the_same_bits_on_every_rank(worlds):
    out = worlds[4].run(_random_order_program, 0)
    parts = [data(r, (64,), np.float32) for r in range(4)]
    order = out[0][1]
    assert sorted(order) == [0, 1, 2, 3] and all(o[1] == order for o in out)
    assert all(same(o[0], out[0][0]) for o in out)
    assert same(out[0][0], fold("sum", [parts[r] for r in order], np.empty(64, np.float32)))
    blocks = [data(r, (4, 8)) for r in range(4)]
    for r, o in enumerate(out):
        assert same(o[2], fold("sum", [blocks[j][r] for j in o[3]], np.empty(8)))


def test_random_order_same_seed_same_bits_other_seed_other_bits(worlds):
    runs = {seed: worlds[4].run(_random_order_program, seed) for seed in (0, 0, 1, 2, 3, 4)}
    again = worlds[4].run(_random_order_program, 0)
    assert all(same(a[0], b[0]) and a[1] == b[1] for a, b in zip(runs[0], again))
    assert len({runs[s][0][0].tobytes() for s in runs}) > 1  # some seed folds to other bits
    assert len({runs[s][0][1] for s in runs}) > 1


def test_random_order_honours_every_op_and_dtype_within_the_contract(worlds):
    def program(comm):
        fake, out = fb.random_order(comm), []
        for dtype in DTYPES:
            for op in ops_for(dtype):
                for shape in ((), (0,), (5,)):
                    x = data(comm.rank, shape, dtype)
                    out.append((str(dtype), op, shape, x, fake.allreduce(x, op), fake.reduce(x, root=1, op=op)))
        with pytest.raises(simdist.InvalidType, match="rank .: allreduce: op='mean' is not defined on dtype int8"):
            fake.allreduce(np.zeros(2, np.int8), "mean")
        return out

    out = worlds[3].run(program)
    for k, (dtype, op, shape, *_) in enumerate(out[0]):
        inputs = [o[k][3] for o in out]
        for collective, column in (("allreduce", 4), ("reduce", 5)):
            v = reference.check(collective, inputs, [o[k][column] for o in out], op=op, root=1)
            assert v.ok, f"{collective} {dtype} {op} {shape}: {v.reason}"


def test_random_order_refuses_calls_whose_op_differs_between_ranks(worlds):
    def program(comm):
        with pytest.raises(simdist.CollectiveMismatch, match="do not match"):
            fb.random_order(comm).allreduce(np.ones(3), "max" if comm.rank == 1 else "sum")

    worlds[3].run(program)


@pytest.mark.slow
def test_simdist_check_catches_a_faulty_fake_and_passes_the_legal_one():
    report = sweep(2, factory="fake_backends:sum_for_mean", quick=True, collectives=["allreduce"],
                   dtypes=["float32", "int32"])
    assert {(r["collective"], r["dtype"], r["op"]) for r in report["rows"] if r["verdict"] == "FAIL"} == \
        {("allreduce", "float32", "mean")}
    legal = sweep(3, factory="fake_backends:random_order", quick=True, collectives=["allreduce", "reduce_scatter"],
                  dtypes=["float16", "complex64", "int8"])
    assert legal["ok"], [r["reason"] for r in legal["rows"] if r["verdict"] != "pass"]


# ---------------------------------------------------------------------------
# the docs


@pytest.mark.slow
def test_the_examples_in_docs_fakes_md_print_what_the_page_shows():
    """Every python block runs; one followed by a text block prints exactly that text."""
    page = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "fakes.md").read_text()
    examples = re.findall(r"```python\n(.*?)```\n(?:\n```text\n(.*?)```)?", page, re.S)
    assert sum(bool(shown) for _, shown in examples) >= 4
    for code, shown in examples:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs/fakes.md example", "exec"), {"__name__": "__docs__"})
        if shown:
            assert out.getvalue() == shown, code
