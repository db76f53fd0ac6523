"""``simdist check``: sweep every collective of a backend and judge each call.

:func:`sweep` runs, on one persistent :class:`simdist.World`, every collective
of the contract with every dtype, every op the dtype takes, every root and a
set of shapes, and judges every call with :func:`simdist.reference.check`
(data movement and reductions) or by the contract's words (barrier, send and
recv). It returns a report: one row per (collective, dtype, op), and totals.
"""

# How the sweep is organised (read this before changing it)
#
# * A *row* is (collective, dtype, op); a *case* is one call of the row's
#   collective: a shape, a kind of data ("exact": small integers, or powers
#   of two for products, which every order reduces exactly, judged bit for
#   bit; "random": judged against the reference's bound), a root, and a
#   repeat number (fresh data each time).
# * Inputs are a pure function of (seed, row id, case index, rank): the ranks
#   make their own, and the driver makes them again to judge the outputs, so
#   only outputs travel back.
# * Many rows run in one ``world.run`` (a round trip costs ~1 ms); the driver
#   judges them after the run. A run that raises cannot say how far it got,
#   so: a rank's exception is wrapped in ``_CaseError`` naming its row (that
#   row fails, the rest of the batch runs again); any other failure (a hang,
#   a mismatch, a dead rank) makes each row of the batch run on its own, and
#   the row that fails again gets the failure as its reason.
# * "Unsupported": a rank whose call raises ``InvalidArgument`` saying "not
#   supported" skips the rest of the row. If every rank did so at the row's
#   first case the row is "unsupported"; any other pattern (some ranks only,
#   or after earlier cases succeeded) is a failure. Ranks that disagree
#   usually hang or mismatch on the next call, which ends the run; that is
#   attributed as above.
# * Contract checks besides the values: inputs are untouched (their bytes
#   before and after the call); results are writeable, share no memory with
#   the input, and are not changed by later calls (a result that is a view of
#   a backend's buffer is overwritten by the next call: every result's digest
#   is taken right after its call and again at the end of the run).

from __future__ import annotations

import hashlib
import importlib
import math
import time
import traceback
from typing import Callable, NamedTuple

import numpy as np

from . import reference
from ._arguments import DTYPES
from ._errors import (
    CollectiveMismatch,
    CollectiveTimeout,
    InvalidArgument,
    InvalidType,
    InvalidValue,
    RankDied,
    RankError,
    SimdistError,
)
from ._reduction import ops_for
from ._world import World

__all__ = ["sweep", "load_factory", "COLLECTIVES", "VERDICTS"]

#: The rows of a sweep, in report order; ``send_recv`` is send and recv.
COLLECTIVES = (
    "allreduce", "reduce", "reduce_scatter", "broadcast", "allgather", "gather", "scatter", "alltoall",
    "send_recv", "barrier",
)
#: A row's verdict.
VERDICTS = ("pass", "FAIL", "unsupported")

_REDUCTIONS = frozenset(("allreduce", "reduce", "reduce_scatter"))
_ROOTED = frozenset(("reduce", "broadcast", "gather", "scatter"))
_BLOCKS = frozenset(("reduce_scatter", "scatter", "alltoall"))  # inputs of shape (size, ...)
_SMALL_SHAPES = {"0-d": (), "empty": (0,), "1": (1,), "13": (13,), "3x5 strided": (3, 5)}
_KINDS = ("exact", "random")

#: Elements of the large case, by what judging it costs: reference.check
#: judges integers, min/max, bitwise ops and data movement with numpy, float
#: sums in double or math.fsum, and products element by element in Python.
_LARGE = {"numpy": 100_003, "double": 100_003, "fsum": 30_011, "prod": 1_009, "cprod": 257}
_QUICK_LARGE = {"numpy": 10_007, "double": 10_007, "fsum": 4_001, "prod": 257, "cprod": 61}
_MAX_HANGS = 3  # timeouts after which the rows not yet run are not run
_FAILURE_BUDGET = 60.0  # seconds of failed runs after which the same happens
_BARRIER_LATE = 0.003  # seconds the late rank of a barrier case sleeps


class _Case(NamedTuple):
    index: int
    shape: str  # a key of _SMALL_SHAPES, or "large"
    kind: str  # "exact" or "random"
    root: int
    repeat: int
    length: int  # elements of a "large" case


class _Row(NamedTuple):
    rid: int
    collective: str
    dtype: str | None
    op: str | None
    cases: tuple

    @property
    def label(self) -> str:
        return " ".join(p for p in (self.collective, self.dtype, self.op) if p)


class _CaseError(Exception):
    """A rank's call raised: carries the row, the case and the error, so the
    driver knows which row failed."""

    def __init__(self, rank: int, rid: int, case: str, error: str):
        self.rank, self.rid, self.case, self.error = rank, rid, case, error
        super().__init__(f"rank {rank}: {case}: {error}")

    def __reduce__(self):
        return type(self), (self.rank, self.rid, self.case, self.error)


# ---------------------------------------------------------------------------
# the plan


def _large_length(collective: str, dtype: np.dtype, op: str | None, quick: bool, n: int) -> int:
    table = _QUICK_LARGE if quick else _LARGE
    if collective in ("allgather", "gather") and n > 4:  # results of at most 4 large arrays per rank
        return table["numpy"] * 4 // n
    if op in ("sum", "mean") and dtype.kind in "fc":
        return table["double" if dtype.kind == "f" and dtype.itemsize <= 4 else "fsum"]
    if op == "prod" and dtype.kind in "fc":
        return table["cprod" if dtype.kind == "c" else "prod"]
    return table["numpy"]


def _plan(n: int, quick: bool, collectives=COLLECTIVES, dtypes=DTYPES) -> list[_Row]:
    """Every row of the sweep with its cases, in report order."""
    repeats = 1 if quick else 2
    rows: list[_Row] = []
    for collective in collectives:
        if collective == "barrier":
            cases = tuple(_Case(i, "-", "-", i % n, i, 0) for i in range(2 * n if quick else 4 * n))
            rows.append(_Row(len(rows), collective, None, None, cases))
            continue
        roots = range(n) if collective in _ROOTED else (0,)
        for dtype in dtypes:
            for op in (ops_for(dtype) if collective in _REDUCTIONS else (None,)):
                cases = []
                for root in roots:
                    for shape in _SMALL_SHAPES:
                        for kind in _KINDS:
                            for repeat in range(repeats):
                                cases.append(_Case(len(cases), shape, kind, root, repeat, 0))
                if not (collective == "send_recv" and n == 1):  # a large send to oneself may block for ever
                    # one large case where both kinds are judged bit for bit alike
                    bounded = collective in _REDUCTIONS and dtype.kind in "fc" and op in ("sum", "mean", "prod")
                    length = _large_length(collective, dtype, op, quick, n)
                    for kind, root in zip(_KINDS if bounded else ("random",), (n - 1, 0) if bounded else (n - 1,)):
                        cases.append(_Case(len(cases), "large", kind, root, 0, length))
                rows.append(_Row(len(rows), collective, str(dtype), op, tuple(cases)))
    return rows


def _describe(row: _Row, case: _Case, n: int) -> str:
    """The case, for a reason that follows the row's label."""
    if row.collective == "barrier":
        return f"call {case.index + 1} (rank {case.root} late)"
    shape = _element_shape(row.collective, case, n)
    parts = [f"shape {shape}" + (" non-contiguous read-only" if case.shape == "3x5 strided" else ""),
             f"{case.kind} inputs"]
    if row.collective in _ROOTED:
        parts.append(f"root {case.root}")
    parts.append(f"call {case.repeat + 1}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------
# inputs: a pure function of (seed, row, case, rank)


def _element_shape(collective: str, case: _Case, n: int) -> tuple:
    """The shape each rank passes (root's, for broadcast and scatter)."""
    if case.shape == "large":
        shape = (max(1, case.length // n),) if collective in _BLOCKS else (case.length,)
    else:
        shape = _SMALL_SHAPES[case.shape]
    return (n, *shape) if collective in _BLOCKS else shape


def _values(rng: np.random.Generator, shape: tuple, dtype: np.dtype, role: str, kind: str) -> np.ndarray:
    """An array of ``shape``: ``role`` is the op of a reduction, or "move"."""
    count = math.prod(shape)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if kind == "random" and (role == "move" or dtype.kind in "iu"):  # any bits: NaN payloads, wrap-around
        return np.frombuffer(rng.bytes(count * dtype.itemsize), dtype).reshape(shape).copy()
    if dtype.kind in "iu":  # small integers
        return rng.integers(0 if dtype.kind == "u" else -3, 4, shape).astype(dtype)
    parts = 2 if dtype.kind == "c" else 1
    if kind == "exact":  # every order gives the exact result
        if role == "prod":
            choices = [-1.0, 0.0, 1.0] if parts == 2 else [-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]
            v = rng.choice(choices, (parts, *shape))
        else:
            v = rng.integers(-16, 17, (parts, *shape)).astype(np.float64)
    elif role == "prod":  # factors of magnitude 0.5 .. 2: no overflow or underflow
        v = rng.choice([-1.0, 1.0], (parts, *shape)) * np.exp2(rng.uniform(-1, 1, (parts, *shape)))
    else:  # magnitudes over 16 binades: cancellation and rounding
        v = rng.standard_normal((parts, *shape)) * np.exp2(rng.integers(-8, 9, (parts, *shape)))
    return (v[0] + 1j * v[1] if parts == 2 else v[0]).astype(dtype)


def _rng(seed: int, row: _Row, case: _Case, rank: int) -> np.random.Generator:
    return np.random.default_rng([seed, row.rid, case.index, rank])


def _array(rng, shape: tuple, dtype: np.dtype, role: str, kind: str, strided: bool) -> np.ndarray:
    if not strided:
        return _values(rng, shape, dtype, role, kind)
    base = _values(rng, (*shape[:-1], 2 * shape[-1]), dtype, role, kind)
    x = base[..., ::2]
    x.flags.writeable = False
    return x


def _input(row: _Row, case: _Case, rank: int, n: int, seed: int):
    """What ``rank`` passes in a collective case (None: a non-root's broadcast
    or scatter, on even repeats; odd repeats pass an array that is ignored)."""
    dtype = np.dtype(row.dtype)
    rng = _rng(seed, row, case, rank)
    shape = _element_shape(row.collective, case, n)
    strided = case.shape == "3x5 strided"
    if row.collective in ("broadcast", "scatter") and rank != case.root:
        return None if case.repeat % 2 == 0 else _array(rng, shape, dtype, "move", "random", strided)
    role = row.op if row.collective in _REDUCTIONS else "move"
    return _array(rng, shape, dtype, role, case.kind, strided)


def _messages(row: _Row, case: _Case, rank: int, n: int, seed: int) -> list[tuple[int, np.ndarray]]:
    """``(tag, array)`` that ``rank`` sends to ``rank + 1`` in a send_recv
    case: two with tag 0 (they must arrive in order), and for small shapes a
    third with tag 7, which the receiver takes first."""
    dtype = np.dtype(row.dtype)
    rng = _rng(seed, row, case, rank)
    shape = _element_shape(row.collective, case, n)
    strided = case.shape == "3x5 strided"
    tags = (0, 0) if case.shape == "large" else (0, 0, 7)
    return [(tag, _array(rng, shape, dtype, "move", case.kind, strided)) for tag in tags]


# ---------------------------------------------------------------------------
# the ranks' side


def load_factory(spec: str) -> Callable:
    """The callable named by ``spec`` = ``"module:callable"`` (the part after
    the colon may be dotted: ``"pkg.mod:Class.create"``)."""
    if not isinstance(spec, str):
        raise InvalidType(f"factory={spec!r} must be a str 'module:callable', e.g. 'mybackend:make_comm'")
    module, sep, attr = spec.partition(":")
    if not (sep and module and attr):
        raise InvalidValue(f"factory={spec!r} must be 'module:callable', e.g. 'mybackend:make_comm'")
    try:
        obj = importlib.import_module(module)
    except ImportError as exc:
        raise InvalidValue(
            f"factory={spec!r}: cannot import module {module!r} ({exc}); run from the directory that holds "
            f"it, add that directory to PYTHONPATH, or install it"
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidValue(f"factory={spec!r}: {module}:{attr} has no attribute {part!r}") from None
    if not callable(obj):
        raise InvalidType(f"factory={spec!r}: {module}:{attr} is a {type(obj).__name__}, not a callable")
    return obj


def _target(comm, factory: str | None):
    return comm if factory is None else load_factory(factory)(comm)


def _probe(comm, factory: str | None):
    target = _target(comm, factory)
    return comm.rank, comm.size, target.rank, target.size, type(target).__name__


def _digest(a) -> bytes | None:
    if not isinstance(a, np.ndarray):
        return None
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).digest()


def _call(target, collective: str, x, op, root):
    if collective == "allreduce":
        return target.allreduce(x, op=op)
    if collective == "reduce":
        return target.reduce(x, root=root, op=op)
    if collective == "reduce_scatter":
        return target.reduce_scatter(x, op=op)
    if collective == "broadcast":
        return target.broadcast(x, root=root)
    if collective == "gather":
        return target.gather(x, root=root)
    if collective == "scatter":
        return target.scatter(x, root=root)
    return getattr(target, collective)(x)  # allgather, alltoall


def _send_recv(target, sent: list, case: _Case, rank: int, n: int) -> list:
    """Rank r sends ``sent`` to r+1 and receives from r-1; for large
    messages even ranks send first and odd ranks receive first, so no cycle
    of blocked sends can form. Returns what it received, in the order sent."""
    dest, source = (rank + 1) % n, (rank - 1) % n
    got: list = [None] * len(sent)

    def receive():
        if len(sent) == 3:
            got[2] = target.recv(source, tag=7)  # a later tag first: recv selects by tag
        got[0] = target.recv(source, tag=0)
        got[1] = target.recv(source, tag=0)

    receive_first = case.shape == "large" and rank % 2 == 1
    if receive_first:
        receive()
    for tag, x in sent:
        target.send(x, dest, tag=tag)
    if not receive_first:
        receive()
    return got


def _unsupported(exc: Exception) -> bool:
    return isinstance(exc, InvalidArgument) and "not supported" in str(exc).lower()


def _run_case(target, row: _Row, case: _Case, rank: int, n: int, seed: int) -> list:
    """One call; returns ``[result, input modified, aliases input, read-only, digest]``."""
    if row.collective == "barrier":
        if rank == case.root:
            time.sleep(_BARRIER_LATE)
        entered = time.monotonic()
        value = target.barrier()
        return [(entered, time.monotonic(), None if value is None else type(value).__name__), False, False, False, None]
    if row.collective == "send_recv":
        sent = _messages(row, case, rank, n, seed)
        before = [x.tobytes() for _, x in sent]
        got = _send_recv(target, sent, case, rank, n)
        modified = any(x.tobytes() != b for (_, x), b in zip(sent, before))
        readonly = any(isinstance(g, np.ndarray) and not g.flags.writeable for g in got)
        return [got, modified, False, readonly, [_digest(g) for g in got]]
    x = _input(row, case, rank, n, seed)
    before = None if x is None else x.tobytes()
    out = _call(target, row.collective, x, row.op, case.root)
    modified = x is not None and x.tobytes() != before
    array = isinstance(out, np.ndarray)
    aliases = array and x is not None and np.may_share_memory(out, x)
    readonly = array and not out.flags.writeable
    return [out, modified, aliases, readonly, _digest(out)]


def _rank_main(comm, factory: str | None, rows: list[_Row], n: int, seed: int):
    """Run ``rows`` on this rank; per row, a list of case entries:
    ``["ok", result, modified, aliases, readonly, changed]`` or
    ``["unsupported", message]``."""
    target = _target(comm, factory)
    rank = comm.rank
    out = []
    for row in rows:
        entries = []
        for case in row.cases:
            try:
                entry = _run_case(target, row, case, rank, n, seed)
            except Exception as exc:
                if _unsupported(exc):
                    entries.append(["unsupported", f"{type(exc).__name__}: {exc}"])
                    break
                lines = traceback.format_exception_only(type(exc), exc)
                where = traceback.extract_tb(exc.__traceback__)[-1]
                error = "".join(lines).strip() + f" (raised at {where.filename}:{where.lineno} in {where.name})"
                raise _CaseError(rank, row.rid, f"{row.label}, {_describe(row, case, n)}", error) from None
            entries.append(["ok", *entry])
        out.append(entries)
    for entries in out:  # results must not change when later calls run
        for entry in entries:
            if entry[0] == "ok":
                result, digest = entry[1], entry[5]
                if isinstance(result, list):
                    entry[5] = any(_digest(r) != d for r, d in zip(result, digest))
                else:
                    entry[5] = digest is not None and _digest(result) != digest
    return out


# ---------------------------------------------------------------------------
# judging, on the driver


class _Tally:
    """What is known about one row so far."""

    def __init__(self, row: _Row):
        self.row = row
        self.cases = 0
        self.failed = 0
        self.exact = True
        self.ratio = 0.0
        self.error = 0.0
        self.bound = 0.0
        self.worst = ""
        self.verdict = "pass"
        self.reason = ""

    def fail(self, reason: str) -> None:
        self.failed += 1
        if self.verdict != "FAIL":
            self.verdict, self.reason = "FAIL", reason

    def as_dict(self) -> dict:
        row = self.row
        return {
            "collective": row.collective, "dtype": row.dtype, "op": row.op, "cases": self.cases,
            "failed_cases": self.failed, "exact": self.exact and self.cases > 0,
            "max_ratio": self.ratio, "max_error": self.error, "bound": self.bound, "worst_case": self.worst,
            "verdict": self.verdict, "reason": self.reason,
        }


def _contract_problems(collective: str, ranks_entries: list) -> list[str]:
    """What the contract says of every call besides the values."""
    problems = []
    for r, entry in enumerate(ranks_entries):
        _, _, modified, aliases, readonly, changed = entry
        if modified:
            problems.append(f"rank {r}: {collective} modified its input in place; inputs are never modified")
        if aliases:
            problems.append(f"rank {r}: {collective} returned an array sharing memory with its input; "
                            "results are new arrays")
        if readonly:
            problems.append(f"rank {r}: {collective} returned a read-only array; results are new, writeable arrays")
        if changed:
            problems.append(f"rank {r}: the result of this call changed when later calls ran (a view of the "
                            "backend's buffer?); results are new arrays that own their memory")
    return problems


def _judge_barrier(entries: list, case: _Case) -> list[str]:
    late = case.root
    entered = entries[late][1][0]
    problems = []
    for r, entry in enumerate(entries):
        _, left, returned = entry[1]
        if returned is not None:
            problems.append(f"rank {r}: barrier returned {returned}; the contract says None")
        if left < entered:
            problems.append(f"rank {r}: left the barrier {1e3 * (entered - left):.2f} ms before rank {late} "
                            "entered it")
    return problems


def _judge_send_recv(row: _Row, case: _Case, entries: list, n: int, seed: int) -> list[str]:
    problems = []
    for r, entry in enumerate(entries):
        source = (r - 1) % n
        sent = _messages(row, case, source, n, seed)
        for k, ((tag, want), got) in enumerate(zip(sent, entry[1])):
            what = f"rank {r}: recv(source={source}, tag={tag}) of message {k + 1}"
            if not isinstance(got, np.ndarray):
                problems.append(f"{what} returned {type(got).__name__}, not a numpy array")
            elif (got.dtype, got.shape) != (want.dtype, want.shape):
                problems.append(f"{what} returned dtype {got.dtype} shape {got.shape}; rank {source} sent "
                                f"dtype {want.dtype} shape {want.shape}")
            elif got.tobytes() != want.tobytes():
                flat_got, flat_want = got.reshape(-1), np.ascontiguousarray(want).reshape(-1)
                bad = _first_difference(flat_got, flat_want)
                problems.append(f"{what}: element {bad} is {flat_got[bad]!r} but rank {source} sent "
                                f"{flat_want[bad]!r}")
    return problems


def _first_difference(a: np.ndarray, b: np.ndarray) -> int:
    bytes_a = np.ascontiguousarray(a).view(np.uint8).reshape(a.size, -1)
    bytes_b = np.ascontiguousarray(b).view(np.uint8).reshape(b.size, -1)
    return int(np.flatnonzero((bytes_a != bytes_b).any(axis=1))[0])


def _judge_row(tally: _Tally, per_rank: list[list], n: int, seed: int) -> None:
    """Judge one row from every rank's entries."""
    row = tally.row
    for i, case in enumerate(row.cases):
        got = [entries[i] if i < len(entries) else None for entries in per_rank]
        if all(g is None for g in got):
            return  # every rank stopped earlier (unsupported)
        text = _describe(row, case, n)
        status = ["missing" if g is None else g[0] for g in got]
        if "unsupported" in status:
            said = [r for r, s in enumerate(status) if s == "unsupported"]
            message = got[said[0]][1]
            if len(said) == n and i == 0:
                tally.verdict, tally.reason = "unsupported", message
            elif len(said) == n:
                tally.fail(f"{text}: every rank raised 'not supported' after earlier calls of {row.label} "
                           f"succeeded (a dtype and op are supported for every shape and root, or not at all): "
                           f"{message}")
            else:
                others = [r for r in range(n) if r not in said]
                tally.fail(f"{text}: rank(s) {said} raised 'not supported' but rank(s) {others} did not: {message}")
            return
        tally.cases += 1
        problems = _contract_problems(row.collective, got)
        if row.collective == "barrier":
            problems += _judge_barrier(got, case)
        elif row.collective == "send_recv":
            problems += _judge_send_recv(row, case, got, n, seed)
        else:
            inputs = [_input(row, case, r, n, seed) for r in range(n)]
            verdict = reference.check(row.collective, inputs, [g[1] for g in got], op=row.op or "sum",
                                      root=case.root)
            tally.exact &= verdict.exact
            if verdict.ratio > tally.ratio:
                tally.ratio, tally.error, tally.bound, tally.worst = (
                    verdict.ratio, verdict.max_error, verdict.bound, text)
            if not verdict.ok:
                problems.append(verdict.reason)
        if problems:
            if row.collective in ("barrier", "send_recv"):
                tally.ratio = math.inf
            more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
            tally.fail(f"{text}: " + "; ".join(problems[:3]) + more)


def _why(exc: SimdistError) -> str:
    """A failed run, in one paragraph."""
    if isinstance(exc, RankError):
        parts = []
        for r, tb in exc.failures.items():
            last = [line for line in tb.strip().splitlines() if line.strip()]
            parts.append(f"rank {r} raised {last[-1].strip() if last else '?'}")
        return "; ".join(parts)
    if isinstance(exc, CollectiveTimeout):
        where = "; ".join(f"rank {r}: {w}" for r, w in exc.report.items())
        return f"hang: no progress for {exc.timeout:g} s (the timeout); {where}"
    if isinstance(exc, CollectiveMismatch):
        return f"CollectiveMismatch: {str(exc).splitlines()[0]}"
    if isinstance(exc, RankDied):
        return f"a rank died: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _case_error(exc: SimdistError) -> _CaseError | None:
    if isinstance(exc, RankError):
        # ranks out of step blame different rows; the earliest is the culprit
        found = [e for _, e in sorted(exc.exceptions.items()) if isinstance(e, _CaseError)]
        return min(found, key=lambda e: (e.rid, e.rank)) if found else None
    return None


def _batches(rows: list[_Row], target_cases: int) -> list[list[_Row]]:
    """Consecutive rows, up to about ``target_cases`` cases and 400,000
    elements of large cases per run (so results stay a few MB)."""
    batches, current, cases, elements = [], [], 0, 0
    for row in rows:
        size = sum(c.length for c in row.cases)
        if current and (cases + len(row.cases) > target_cases or elements + size > 400_000):
            batches.append(current)
            current, cases, elements = [], 0, 0
        current.append(row)
        cases += len(row.cases)
        elements += size
    if current:
        batches.append(current)
    return batches


class _Runner:
    """Runs batches of rows on a world and judges what they returned."""

    def __init__(self, world: World, factory, size: int, seed: int, progress, rows: list[_Row]):
        self.world, self.factory, self.size, self.seed, self.progress = world, factory, size, seed, progress
        self.tallies = {row.rid: _Tally(row) for row in rows}
        self.total = sum(len(row.cases) for row in rows)
        self.done = 0
        self.hangs = 0
        self.failed_time = 0.0

    def _report(self, label: str) -> None:
        if self.progress:
            self.progress(self.done, self.total, label)

    def run(self, pending: list[list[_Row]]) -> None:
        # Judging runs between runs, not beside them: a thread would hold the
        # GIL while the driver answers the ranks, and the simulator's waiting
        # ranks yield the CPU in a loop when oversubscribed; both made the
        # sweep slower on 2 cores.
        while pending:
            batch = pending.pop(0)
            if self.hangs >= _MAX_HANGS or self.failed_time > _FAILURE_BUDGET:
                why = f"{self.hangs} hangs" if self.hangs >= _MAX_HANGS else f"{self.failed_time:.0f} s of failed runs"
                for row in batch:
                    self.tallies[row.rid].fail(f"not run: the sweep stopped after {why}")
                continue
            results = self._run(batch, pending)
            if results is None:
                continue
            for k, row in enumerate(batch):
                _judge_row(self.tallies[row.rid], [per_rank[k] for per_rank in results], self.size, self.seed)
                self.done += len(row.cases)
                self._report(row.label)

    def _run(self, batch: list[_Row], pending: list[list[_Row]]):
        """The ranks' entries for ``batch``, or None when the run failed (then
        the failed row is recorded, or the batch's rows are queued one by one)."""
        t0 = time.perf_counter()
        try:
            return self.world.run(_rank_main, self.factory, batch, self.size, self.seed)
        except SimdistError as exc:
            self.failed_time += time.perf_counter() - t0
            timeout = isinstance(exc, CollectiveTimeout)
            culprit = _case_error(exc)
            if culprit is not None:  # a rank raised in a known row: the others run again
                failed = next(row for row in batch if row.rid == culprit.rid)
                self.tallies[failed.rid].fail(f"rank {culprit.rank} raised in {culprit.case}: {culprit.error}")
                self.done += len(failed.cases)
                rest = [row for row in batch if row.rid != culprit.rid]
                if rest:
                    pending.insert(0, rest)
            elif len(batch) > 1:  # which row? each on its own
                pending[:0] = [[row] for row in batch]
            else:
                self.hangs += timeout
                self.tallies[batch[0].rid].fail(_why(exc))
                self.done += len(batch[0].cases)
            self._report(batch[-1].label)
            return None


def _selection(collectives, dtypes) -> tuple[tuple, tuple]:
    """The collectives and dtypes to sweep, in report order (None: all)."""
    if collectives is None:
        chosen = COLLECTIVES
    else:
        names = [collectives] if isinstance(collectives, str) else list(collectives)
        unknown = [c for c in names if c not in COLLECTIVES]
        if unknown or not names:
            raise InvalidValue(f"sweep: collectives={collectives!r}: {', '.join(map(repr, unknown)) or 'none given'}; "
                               f"choose from {', '.join(COLLECTIVES)}")
        chosen = tuple(c for c in COLLECTIVES if c in names)
    if dtypes is None:
        kinds = DTYPES
    else:
        names = [dtypes] if isinstance(dtypes, str) else list(dtypes)
        try:
            wanted = {np.dtype(d) for d in names}
        except TypeError as exc:
            raise InvalidValue(f"sweep: dtypes={dtypes!r}: {exc}") from None
        unknown = [str(d) for d in wanted if d not in DTYPES]
        if unknown or not names:
            raise InvalidValue(f"sweep: dtypes={dtypes!r}: {', '.join(unknown) or 'none given'} not among the "
                               f"contract's dtypes {', '.join(map(str, DTYPES))}")
        kinds = tuple(d for d in DTYPES if d in wanted)
    return chosen, kinds


def _check_args(size, backend, factory, quick, progress, seed, timeout) -> None:
    if isinstance(size, bool) or not isinstance(size, int):
        raise InvalidType(f"sweep: size={size!r} must be an int >= 1")
    if size < 1:
        raise InvalidValue(f"sweep: size={size} must be >= 1")
    if backend not in ("sim", "mpi"):
        raise InvalidValue(f"sweep: backend={backend!r} must be 'sim' or 'mpi'; a user's communicator is "
                           "passed as factory='module:callable'")
    if factory is not None:
        load_factory(factory)  # fails here, with a clear message, rather than on every rank
    if progress is not None and not callable(progress):
        raise InvalidType(f"sweep: progress={progress!r} must be a callable progress(done, total, label) or None")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidValue(f"sweep: seed={seed!r} must be an int >= 0")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise InvalidValue(f"sweep: timeout={timeout!r} must be a number of seconds > 0")


def sweep(
    size: int,
    backend: str = "sim",
    factory: str | None = None,
    *,
    quick: bool = False,
    progress: Callable[[int, int, str], None] | None = None,
    seed: int = 0,
    timeout: float = 10.0,
    collectives=None,
    dtypes=None,
) -> dict:
    """Check every collective of a backend on a world of ``size`` ranks.

    ``backend`` ("sim" or "mpi") is the world's; ``factory``, a
    ``"module:callable"`` string, names a user's communicator: on every rank,
    ``factory(base)`` gets the world's communicator and returns the object to
    check (anything with the contract's methods). The factory is imported by
    name on each rank, so it must be importable there (the ranks get the
    driver's ``sys.path`` and working directory).

    Every collective x dtype x op the dtype takes x root runs on shapes 0-d,
    empty, 1, 13, a non-contiguous read-only 3x5 and a large one, with small
    integers that every order sums exactly (judged bit for bit) and random
    data (judged against :func:`simdist.reference.check`'s bound), twice
    with fresh data (once with ``quick``, which also shrinks the large
    shape). ``barrier`` is checked to hold every rank until the last one
    arrives, ``send``/``recv`` to deliver in order by tag.

    A call that raises :class:`simdist.InvalidArgument` saying "not
    supported" on every rank, at the first call of a row, makes the row
    "unsupported". Anything else wrong -- a value, a dtype or shape, an input
    modified, a result that aliases the input or changes later, a rank
    raising, a mismatch, a hang (after ``timeout`` seconds without progress)
    -- makes it "FAIL" with the reason; the sweep goes on with the next row.
    After 3 hangs, or a minute spent in failed runs, the rows not yet run are
    reported as failed ("not run").

    ``collectives`` and ``dtypes`` (names; default all, see
    :data:`COLLECTIVES`) restrict the sweep. ``progress(done, total,
    label)``, if given, is called as cases complete.

    Returns a report of JSON types (except ``inf`` ratios): ``rows``, a list
    of dicts with ``collective``, ``dtype``, ``op``, ``cases``,
    ``failed_cases``, ``exact``, ``max_ratio`` (max error / bound; 0 for
    bit-for-bit rows, ``inf`` for a failed bit-for-bit check), ``max_error``,
    ``bound``, ``worst_case``, ``verdict`` and ``reason``; ``totals``;
    ``ok``; ``seconds``; and the settings. Raises
    :class:`simdist.InvalidArgument` for bad arguments (a factory that cannot
    be imported, say), and :class:`simdist.SimdistError` when nothing can be
    checked (the factory raises, or the world cannot start).
    """
    _check_args(size, backend, factory, quick, progress, seed, timeout)
    collectives, dtypes = _selection(collectives, dtypes)
    started = time.perf_counter()
    rows = _plan(size, quick, collectives, dtypes)
    with World(size, backend=backend, timeout=timeout) as world:
        try:
            probe = world.run(_probe, factory)
        except SimdistError as exc:
            raise SimdistError(f"check: cannot build the communicator to check on {size} rank(s) "
                               f"(backend={backend!r}, factory={factory!r}): {_why(exc)}") from exc
        identity = [f"rank {r}: {name}.rank={tr}, .size={ts}; expected {r} and {size}"
                    for r, (_, _, tr, ts, name) in enumerate(probe) if (tr, ts) != (r, size)]
        runner = _Runner(world, factory, size, seed, progress, rows)
        runner.run(_batches(rows, 120 if backend == "sim" else 200))
    tallies = runner.tallies
    report_rows = [tallies[row.rid].as_dict() for row in rows]
    report_rows.insert(0, {
        "collective": "rank/size", "dtype": None, "op": None, "cases": 1, "failed_cases": int(bool(identity)),
        "exact": True, "max_ratio": 0.0, "max_error": 0.0, "bound": 0.0, "worst_case": "",
        "verdict": "FAIL" if identity else "pass", "reason": "; ".join(identity),
    })
    counts = {v: sum(r["verdict"] == v for r in report_rows) for v in VERDICTS}
    return {
        "size": size,
        "backend": backend,
        "factory": factory,
        "quick": quick,
        "seed": seed,
        "timeout": float(timeout),
        "collectives": list(collectives),
        "dtypes": [str(d) for d in dtypes],
        "ok": counts["FAIL"] == 0,
        "rows": report_rows,
        "totals": {
            "rows": len(report_rows),
            "pass": counts["pass"],
            "fail": counts["FAIL"],
            "unsupported": counts["unsupported"],
            "cases": sum(r["cases"] for r in report_rows),
            "failed_cases": sum(r["failed_cases"] for r in report_rows),
            "max_ratio": max((r["max_ratio"] for r in report_rows if r["verdict"] == "pass"), default=0.0),
        },
        "seconds": round(time.perf_counter() - started, 3),
    }
