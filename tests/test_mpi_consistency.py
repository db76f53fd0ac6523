"""``World(backend="mpi", check_calls=True)``: ranks compare every
collective's signature before running it, so a mismatched program raises
CollectiveMismatch -- as on the simulator, with its messages -- instead of
hanging, crashing or mixing data.

These tests launch real ``mpiexec`` jobs. They are skipped only where no MPI
is installed, and never in CI (``CI`` set), where a missing MPI is a failure.
Tests whose run ends the MPI job (a hang) use a world of their own, so that
the replacement job does not outlive the test.
"""

from __future__ import annotations

import importlib.metadata
import time

import numpy as np
import pytest

import simdist
from conftest import mpiexec_or_skip

MPIEXEC = mpiexec_or_skip()
from simdist.mpi._driver import flavor  # noqa: E402  (after the skip: needs no MPI, but reads better here)

SIZE = 3
TIMEOUT = 4.0  # the checked world's; mismatches must be reported well within it
HANG_TIMEOUT = 2.0  # worlds whose runs are expected to hang


@pytest.fixture(scope="module")
def checked():
    with simdist.World(SIZE, backend="mpi", timeout=TIMEOUT, check_calls=True) as w:
        yield w


@pytest.fixture(scope="module")
def plain():
    with simdist.World(SIZE, backend="mpi", timeout=TIMEOUT) as w:
        yield w


def assert_usable(world):
    assert world.run(lambda c: c.allreduce(np.array([c.rank + 1]))) == [np.array([6])] * SIZE


# The programs are lambdas and closures, which travel by value: a function
# defined at the top level of this module would make each rank import it.
MISMATCHES = {
    # name: (program, fragments of the message)
    "kind": (
        lambda c: c.barrier() if c.rank == 0 else c.allreduce(np.ones(3)),
        ["rank 0 called barrier #1, rank 1 called allreduce #1 (float64 (3,), op=sum)",
         "every rank must call the same collectives in the same order"],
    ),
    "dtype": (
        lambda c: c.allreduce(np.ones(3, np.float32 if c.rank == 2 else np.float64)),
        ["ranks of the world called collectives that do not match: rank 0 called allreduce #1 "
         "(float64 (3,), op=sum), rank 2 called allreduce #1 (float32 (3,), op=sum); "
         "every rank must pass the same dtype"],
    ),
    "shape": (
        lambda c: c.allgather(np.ones(4 if c.rank == 1 else 3)),
        ["rank 0 called allgather #1 (float64 (3,)), rank 1 called allgather #1 (float64 (4,))",
         "every rank must pass the same shape"],
    ),
    "op": (
        lambda c: c.allreduce(np.ones(3), op="max" if c.rank == 2 else "sum"),
        ["rank 0 called allreduce #1 (float64 (3,), op=sum), rank 2 called allreduce #1 (float64 (3,), op=max)",
         "every rank must pass the same op"],
    ),
    "root": (
        lambda c: c.reduce(np.ones(3), root=1 if c.rank == 2 else 0),
        ["rank 0 called reduce #1 (float64 (3,), op=sum, root=0), rank 2 called reduce #1 (float64 (3,), op=sum, root=1)",
         "every rank must pass the same root"],
    ),
    "broadcast root": (
        lambda c: c.broadcast(np.ones(3), root=c.rank),
        ["rank 0 called broadcast #1 (float64 (3,), root=0), rank 1 called broadcast #1 (float64 (3,), root=1)",
         "same root"],
    ),
    "broadcast non-root shape": (  # without check_calls: that rank alone raises, after the transfer
        lambda c: c.broadcast(np.ones(3) if c.rank != 2 else np.ones(4)),
        ["rank 0 called broadcast #1 (float64 (3,), root=0), rank 2 called broadcast #1 (float64 (4,), root=0)",
         "same shape"],
    ),
    "scatter non-root shape": (
        lambda c: c.scatter(np.ones((3, 2)) if c.rank == 0 else None if c.rank == 1 else np.ones((3, 5))),
        ["rank 0 called scatter #1 (float64 (3, 2), root=0), rank 2 called scatter #1 (float64 (3, 5), root=0)",
         "same shape"],
    ),
    "same data, other collective": (
        lambda c: (c.reduce_scatter if c.rank == 1 else c.allreduce)(np.ones((3, 2))),
        ["rank 0 called allreduce #1 (float64 (3, 2), op=sum), rank 1 called reduce_scatter #1 (float64 (3, 2), op=sum)",
         "same collectives"],
    ),
    "split against barrier": (
        lambda c: c.split(0) if c.rank == 2 else c.barrier(),
        ["rank 0 called barrier #1, rank 2 called split #1", "same collectives"],
    ),
    "more than 8 dimensions": (
        lambda c: c.allgather(np.ones((1,) * 9 + (3 if c.rank == 1 else 2,))),
        ["rank 0 called allgather #1 (float64 (1, 1, 1, 1, 1, 1, 1, 1, 1, 2)), "
         "rank 1 called allgather #1 (float64 (1, 1, 1, 1, 1, 1, 1, 1, 1, 3))", "same shape"],
    ),
    "after send/recv": (  # send and recv are not collective: neither checked nor counted
        lambda c: (
            c.send(np.array([c.rank]), (c.rank + 1) % c.size, tag=7),
            c.recv((c.rank - 1) % c.size, tag=7),
            c.gather(np.ones(2), root=1 if c.rank == 0 else 0),
        ),
        ["rank 0 called gather #1 (float64 (2,), root=1), rank 1 called gather #1 (float64 (2,), root=0)"],
    ),
}


@pytest.mark.parametrize("name", list(MISMATCHES))
def test_mismatched_calls_raise_collective_mismatch_promptly(checked, name):
    program, fragments = MISMATCHES[name]
    started = time.monotonic()
    with pytest.raises(simdist.CollectiveMismatch) as info:
        checked.run(program)
    assert time.monotonic() - started < TIMEOUT / 4
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert len(info.value.calls) == 2  # both calls, by rank
    assert_usable(checked)


def test_every_rank_raises_the_same_mismatch_and_may_catch_it_and_continue(checked):
    def program(comm):
        caught = []
        for call in (
            lambda: comm.allreduce(np.ones(2, np.int32 if comm.rank == 1 else np.int64)),  # #1
            lambda: comm.allreduce(np.full(2, comm.rank + 1.0)),  # #2: matches
            lambda: comm.gather(np.ones(1)) if comm.rank else comm.barrier(),  # #3
        ):
            try:
                caught.append(call())
            except simdist.CollectiveMismatch as exc:
                caught.append(str(exc))
        return caught

    results = checked.run(program)
    for first, total, third in results:
        assert first == results[0][0] and "rank 1 called allreduce #1 (int32 (2,), op=sum)" in first
        np.testing.assert_array_equal(total, np.full(2, 6.0))
        assert third == results[0][2] and "rank 0 called barrier #3, rank 1 called gather #3" in third


def test_sub_communicators_from_split_check_their_calls(checked):
    def program(comm):
        sub = comm.split(comm.rank % 2)  # world ranks 0 and 2 in color 0; rank 1 alone
        return sub.allreduce(np.ones(2, np.float32 if comm.rank == 2 else np.float64))

    started = time.monotonic()
    with pytest.raises(simdist.CollectiveMismatch) as info:
        checked.run(program)
    assert time.monotonic() - started < TIMEOUT / 4
    first, *sites = str(info.value).splitlines()
    assert first == (
        "ranks of a sub-communicator (color 0) called collectives that do not match: rank 0 called allreduce #1 "
        "(float64 (2,), op=sum), rank 1 called allreduce #1 (float32 (2,), op=sum); every rank must pass the same dtype"
    )
    line = program.__code__.co_firstlineno + 2
    assert [site.split(": return")[0] for site in sites] == [
        f"  rank {r} of the run called it at test_mpi_consistency.py:{line}" for r in (0, 2)]  # world ranks
    assert_usable(checked)


def assert_identical(a, b, where=""):
    """Equal structure, and arrays equal in dtype, shape and bits."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), where
        assert (a.dtype, a.shape) == (b.dtype, b.shape) and a.tobytes() == b.tobytes(), (where, a, b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_identical(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_identical(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, (where, a, b)


@pytest.mark.slow
def test_matching_programs_give_the_same_results_as_without_check_calls(checked, plain):
    def every_collective(comm):
        """A matching program using every call of the contract, on inputs whose
        results are exact in any reduction order."""
        r, n = comm.rank, comm.size
        x = np.arange(12.0).reshape(3, 4) + r
        out = {
            "allreduce": comm.allreduce(x),
            "mean": comm.allreduce(x.astype(np.float32), op="mean"),
            "max": comm.allreduce(np.arange(5, dtype=np.int8) * (r + 1), op="max"),
            "wrap": comm.allreduce(np.full(4, 30000, np.int16)),
            "land": comm.allreduce(np.array([True, r != 1]), op="land"),
            "reduce": comm.reduce(x, root=1, op="prod"),
            "broadcast": comm.broadcast(np.arange(6).reshape(2, 3) if r == 2 else None, root=2),
            "broadcast arrays": comm.broadcast(np.full(2, r + 1j, np.complex64)),
            "scatter": comm.scatter(np.arange(n * 2, dtype=np.uint16).reshape(n, 2) if r == 0 else None),
            "allgather 0-d": comm.allgather(np.array(r * 1.5)),
            "gather empty": comm.gather(np.zeros((0, 2)), root=2),
            "reduce_scatter": comm.reduce_scatter(np.arange(n * 3, dtype=np.int32).reshape(n, 3) * (r + 1)),
            "alltoall": comm.alltoall(np.arange(n) + 10 * r),
            "barrier": comm.barrier(),
        }
        comm.send(np.array([r, r]), (r + 1) % n, tag=3)
        out["recv"] = comm.recv((r - 1) % n, tag=3)
        sub = comm.split(r % 2, key=-r)
        out["sub"] = (sub.rank, sub.size, sub.allreduce(np.array([r])), sub.broadcast(np.array([r]) if sub.rank == 0 else None))
        sub.free()
        part = comm.split(None if r == 1 else 5)
        out["part"] = None if part is None else (part.rank, part.allgather(np.array([r])))
        if part is not None:
            part.free()
        out["many dims"] = comm.allgather(np.ones((1,) * 9 + (2,), np.bool_))
        out["broadcast many dims"] = comm.broadcast(np.arange(2.0).reshape((1,) * 10 + (2,)) if r == 0 else None)
        out["scatter many dims"] = comm.scatter(np.arange(6.0).reshape((3,) + (1,) * 9 + (2,)) if r == 1 else None, root=1)
        return out

    with_check = checked.run(every_collective)
    without = plain.run(every_collective)
    assert_identical(with_check, without)
    assert_identical(with_check, simdist.run(every_collective, SIZE))  # and the simulator's


@pytest.mark.slow
def test_without_check_calls_a_dtype_mismatch_is_not_detected(plain):
    """What a mismatched dtype does without check_calls. With Open MPI 5 and
    3 ranks (observed every time): ranks 0 and 1 return garbage, the 12
    bytes of rank 2's float32 array and whatever follows them read as float64
    (e.g. [2.0078125, 3.00000024, 3.] instead of [3, 3, 3]), and rank 2
    fails with MPI_ERR_TRUNCATE, so World.run raises RankError for rank 2
    while nothing tells the other two that their result is wrong. (With
    large arrays the same mistake crashed ranks with SIGSEGV.) The job
    survives and runs correct programs afterwards. (MPICH aborts the whole
    job instead; what an unchecked mismatch does is the library's.)"""
    if flavor(MPIEXEC) != "openmpi":
        pytest.skip("pins Open MPI's behaviour for an unchecked mismatch")
    def program(comm):
        from mpi4py import MPI

        try:
            got = comm.allreduce(np.ones(3, np.float32 if comm.rank == 2 else np.float64))
        except Exception as exc:
            got = exc
        return MPI.Get_library_version(), type(got).__name__, str(got), got if isinstance(got, np.ndarray) else None

    results = plain.run(program)
    assert not any(kind == "CollectiveMismatch" for _, kind, _, _ in results)
    wrong = [r for r, (_, kind, _, got) in enumerate(results) if got is None or not np.array_equal(got, np.full(3, 3.0))]
    assert wrong, "no rank noticed or suffered the mismatch"
    if results[0][0].startswith("Open MPI v5"):
        assert [kind for _, kind, _, _ in results] == ["ndarray", "ndarray", "Exception"]
        assert "MPI_ERR_TRUNCATE" in results[2][2]
        assert not np.array_equal(results[0][3], np.full(3, 3.0))  # whatever lay past rank 2's 12 bytes

        def uncaught(comm):
            try:
                return comm.allreduce(np.ones(3, np.float32 if comm.rank == 2 else np.float64))
            except Exception as exc:  # unpickling an mpi4py exception would import mpi4py.MPI in the driver
                raise RuntimeError(str(exc)) from None

        with pytest.raises(simdist.RankError) as info:
            plain.run(uncaught)
        assert list(info.value.failures) == [2] and "MPI_ERR_TRUNCATE" in info.value.failures[2]
    assert_usable(plain)


@pytest.mark.slow
def _intel_mpi() -> bool:
    """Whether the MPI is Intel's (its runtime's package is installed; the
    driver must not initialise MPI to ask it)."""
    try:
        importlib.metadata.distribution("impi-rt")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.slow
def test_without_check_calls_different_collectives_hang_until_the_timeout():
    if _intel_mpi():
        pytest.skip("Intel MPI 2021 completes a barrier matched with an allreduce (docs/mpi.md, Mismatched calls)")
    with simdist.World(SIZE, backend="mpi", timeout=HANG_TIMEOUT) as world:
        started = time.monotonic()
        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(lambda c: c.barrier() if c.rank == 0 else c.allreduce(np.ones(3)))
        assert HANG_TIMEOUT <= time.monotonic() - started < HANG_TIMEOUT + 30  # + ending the job
        report = info.value.report
        assert report[0].startswith("waiting in barrier #1")
        assert report[1].startswith("waiting in allreduce #1 (float64 (3,), op=sum)")
        assert_usable(world)


@pytest.mark.slow
def test_check_calls_cannot_see_a_rank_that_returned_its_peers_time_out():
    """The simulator raises CollectiveMismatch at once when a rank returns
    while its peers wait; over MPI the peers wait in the signature Allgather
    until the timeout."""
    with simdist.World(SIZE, backend="mpi", timeout=HANG_TIMEOUT, check_calls=True) as world:
        with pytest.raises(simdist.CollectiveTimeout) as info:
            world.run(lambda c: None if c.rank == 0 else c.allreduce(np.ones(2, np.float32)))
        report = info.value.report
        assert report[0].startswith("returned from the function")
        assert report[1].startswith("waiting in allreduce #1 (float32 (2,), op=sum)")
        assert_usable(world)
