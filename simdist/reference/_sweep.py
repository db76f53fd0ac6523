"""The sweep behind ``simdist check``: every collective of a backend, judged
call by call.

:func:`sweep` runs, on one persistent :class:`simdist.World`, every collective
of the contract with every dtype, every op the dtype takes, every root and a
set of shapes, and judges every call with :func:`simdist.reference.check`
(data movement and reductions) or by the contract's words (barrier, send and
recv). It returns a report: one row per (collective, dtype, op), and totals.
"""

# How the sweep is organised (read this before changing it)
#
# * The plan (rows of cases, and each case's inputs as a pure function of
#   seed, row, case and rank) is in ``_cases``; what the ranks run, and the
#   contract checks only they can make, in ``_ranks``; the judging of a row
#   on the driver in ``_judging``. This module runs batches and reports.
# * Many rows run in one ``world.run`` (a round trip costs ~1 ms); the driver
#   judges them after the run. A run that raises cannot say how far it got,
#   so: a rank's exception is wrapped in ``CaseError`` naming its case (that
#   case fails, the batch runs again without it, so the row's other cases
#   are still judged); any other failure (a hang,
#   a mismatch, a dead rank) makes each row of the batch run on its own, and
#   the row that fails again gets the failure as its reason.
# * "Unsupported": a rank whose call raises ``InvalidArgument`` saying "not
#   supported" skips the rest of the row. If every rank did so at the row's
#   first case the row is "unsupported"; any other pattern (some ranks only,
#   or after earlier cases succeeded) is a failure. Ranks that disagree
#   usually hang or mismatch on the next call, which ends the run; that is
#   attributed as above.

from __future__ import annotations

import time
from typing import Callable

from .._errors import (
    CollectiveMismatch,
    CollectiveTimeout,
    Deadlock,
    InvalidType,
    InvalidValue,
    RankDied,
    RankError,
    SimdistError,
)
from .._world import World
from ._cases import Row, plan
from ._focus import extra_dtypes, implemented, named_backend, select_collectives, select_dtypes, select_ops
from ._judging import Tally, judge_row
from ._ranks import CaseError, identify, load_factory, rank_main

__all__ = ["sweep", "VERDICTS"]

#: A row's verdict.
VERDICTS = ("pass", "FAIL", "unsupported")

_MAX_HANGS = 3  # timeouts after which the rows not yet run are not run
_FAILURE_BUDGET = 60.0  # seconds of failed runs after which the same happens


def _why(exc: SimdistError) -> str:
    """A failed run, in one paragraph."""
    if isinstance(exc, RankError):
        parts = []
        for r, tb in exc.failures.items():
            last = [line for line in tb.strip().splitlines() if line.strip()]
            parts.append(f"rank {r} raised {last[-1].strip() if last else '?'}")
        return "; ".join(parts)
    if isinstance(exc, Deadlock):  # its first line is the cycle
        return str(exc).splitlines()[0]
    if isinstance(exc, CollectiveTimeout):
        where = "; ".join(f"rank {r}: {w}" for r, w in exc.report.items())
        return f"hang: no progress for {exc.timeout:g} s (the timeout); {where}"
    if isinstance(exc, CollectiveMismatch):
        return f"CollectiveMismatch: {str(exc).splitlines()[0]}"
    if isinstance(exc, RankDied):
        return f"a rank died: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _case_error(exc: SimdistError) -> CaseError | None:
    if isinstance(exc, RankError):
        # ranks out of step blame different rows; the earliest is the culprit
        found = [e for _, e in sorted(exc.exceptions.items()) if isinstance(e, CaseError)]
        return min(found, key=lambda e: (e.rid, e.rank)) if found else None
    return None


def _batches(rows: list[Row], target_cases: int) -> list[list[Row]]:
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

    def __init__(self, world: World, factory, size: int, seed: int, progress, rows: list[Row],
                 first_failure: bool = False, failed_before: bool = False):
        self.world, self.factory, self.size, self.seed, self.progress = world, factory, size, seed, progress
        self.first_failure = first_failure
        self.failed_before = failed_before  # a check before the rows (rank/size) failed
        self.tallies = {row.rid: Tally(row) for row in rows}
        self.not_run: set[int] = set()  # rows left out after the first failure
        self.total = sum(len(row.cases) for row in rows)
        self.done = 0
        self.hangs = 0
        self.failed_time = 0.0

    def _report(self, label: str) -> None:
        if self.progress:
            self.progress(self.done, self.total, label)

    def run(self, pending: list[list[Row]]) -> None:
        # Judging runs between runs, not beside them: a thread would hold the
        # GIL while the driver answers the ranks, and the simulator's waiting
        # ranks yield the CPU in a loop when oversubscribed; both made the
        # sweep slower on 2 cores.
        while pending:
            if self.first_failure and (self.failed_before or any(t.verdict == "FAIL" for t in self.tallies.values())):
                # a queued row may have failed already (a rank raised in one of its cases)
                self.not_run = {row.rid for batch in pending for row in batch
                                if not (self.tallies[row.rid].cases or self.tallies[row.rid].failed)}
                return
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
                judge_row(self.tallies[row.rid], row, [per_rank[k] for per_rank in results], self.size, self.seed)
                self.done += len(row.cases)
                self._report(row.label)

    def _run(self, batch: list[Row], pending: list[list[Row]]):
        """The ranks' entries for ``batch``, or None when the run failed (then
        the failed row is recorded, or the batch's rows are queued one by one)."""
        t0 = time.perf_counter()
        try:
            return self.world.run(rank_main, self.factory, batch, self.size, self.seed, self.world.sync_sends)
        except SimdistError as exc:
            self.failed_time += time.perf_counter() - t0
            timeout = isinstance(exc, CollectiveTimeout)
            culprit = _case_error(exc)
            if culprit is not None:  # a rank raised in a known case: the batch runs again without it
                self.tallies[culprit.rid].fail(f"rank {culprit.rank} raised in {culprit.case}: {culprit.error}")
                self.done += 1
                rest = [row._replace(cases=tuple(c for c in row.cases if c.index != culprit.index))
                        if row.rid == culprit.rid else row for row in batch]
                rest = [row for row in rest if row.cases]
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


def _selection(collectives, ops, dtypes, factory) -> tuple[tuple, tuple, tuple, tuple | None]:
    """The collectives, ops and dtypes to sweep, in report order (None: all),
    and what the factory implements (None: it does not say)."""
    chosen = select_collectives(collectives, "sweep: collectives")
    implements = implemented(factory)
    if implements is not None:
        narrowed = tuple(c for c in chosen if c in implements)
        if not narrowed:
            raise InvalidValue(f"sweep: collectives={collectives!r}: {factory} implements only "
                               f"{', '.join(implements)} ({factory}.implements)")
        chosen = narrowed
    return (chosen, select_ops(ops, "sweep: ops"), select_dtypes(dtypes, "sweep: dtypes", extra_dtypes(factory)),
            implements)


def _check_args(size, backend, factory, quick, progress, seed, timeout) -> None:
    if isinstance(size, bool) or not isinstance(size, int):
        raise InvalidType(f"sweep: size={size!r} must be an int >= 1")
    if size < 1:
        raise InvalidValue(f"sweep: size={size} must be >= 1")
    if backend not in ("sim", "mpi"):
        raise InvalidValue(f"sweep: backend={backend!r} must be 'sim', 'mpi', 'torch-gloo' or 'torch-nccl'; a "
                           "user's communicator is passed as factory='module:callable'")
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
    ops=None,
    dtypes=None,
    sync_sends: bool = False,
    first_failure: bool = False,
) -> dict:
    """Check every collective of a backend on a world of ``size`` ranks.

    ``backend`` ("sim" or "mpi") is the world's, or one of torch's:
    ``"torch-gloo"`` (Gloo, a ``ProcessGroupGloo`` of the simulated ranks)
    or ``"torch-nccl"`` (NCCL on CUDA tensors; :class:`simdist.SimdistError`
    saying so where there is no GPU); ``factory``, a
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

    ``collectives``, ``ops`` and ``dtypes`` (names; default all, see
    :data:`SWEEP_COLLECTIVES`) restrict the sweep (``ops`` narrows the rows
    of reductions; data movement has no op). A factory whose callable has an
    attribute ``implements`` (a set of collective names) is checked on those
    collectives only: the rest are its base's; one with ``extra_dtypes``
    (names: ``"bfloat16"``) gets their rows too (torch's backends do),
    judged with bfloat16's precision. ``sync_sends`` runs the
    world with synchronous sends (see :class:`simdist.World`): the
    ``send_recv`` row then receives in the order sent, even ranks sending
    first (on one rank, where a rank sends to itself, it is left out). ``first_failure`` stops
    the sweep once a row has failed: the rows not yet judged (those after
    it, and others of its run when a rank raised) are left out of the
    report, and ``totals["not_run"]`` counts them.
    ``progress(done, total, label)``, if given, is called as cases complete.

    Returns a report of JSON types (except ``inf`` ratios): ``rows``, a list
    of dicts with ``collective``, ``dtype``, ``op``, ``cases``,
    ``failed_cases``, ``exact``, ``max_ratio`` (max error / bound; 0 for
    bit-for-bit rows, ``inf`` for a failed bit-for-bit check), ``max_error``,
    ``bound``, ``worst_case``, ``verdict`` and ``reason``; ``totals``;
    ``ok``; ``seconds``; and the settings (``implements``: what the factory
    says it implements, or None). Raises
    :class:`simdist.InvalidArgument` for bad arguments (a factory that cannot
    be imported, say), and :class:`simdist.SimdistError` when nothing can be
    checked (the factory raises, or the world cannot start).
    """
    named = backend
    backend, factory = named_backend(backend, factory, "sweep: backend")
    _check_args(size, backend, factory, quick, progress, seed, timeout)
    collectives, ops, dtypes, implements = _selection(collectives, ops, dtypes, factory)
    if sync_sends and size == 1 and "send_recv" in collectives:  # a synchronous send to oneself never completes
        collectives = tuple(c for c in collectives if c != "send_recv")
        if not collectives:
            raise InvalidValue("sweep: collectives=['send_recv'] on one rank needs buffered sends (a rank sends "
                               "to itself first); run it without sync_sends")
    started = time.perf_counter()
    rows = plan(size, quick, collectives, dtypes, ops)
    with World(size, backend=backend, timeout=timeout, sync_sends=sync_sends) as world:
        try:
            identities = world.run(identify, factory)
        except SimdistError as exc:
            raise SimdistError(f"check: cannot build the communicator to check on {size} rank(s) "
                               f"(backend={backend!r}, factory={factory!r}): {_why(exc)}") from exc
        identity = [f"rank {r}: {name}.rank={tr}, .size={ts}; expected {r} and {size}"
                    for r, (_, _, tr, ts, name) in enumerate(identities) if (tr, ts) != (r, size)]
        runner = _Runner(world, factory, size, seed, progress, rows, first_failure, failed_before=bool(identity))
        runner.run(_batches(rows, 120 if backend == "sim" else 200))
    tallies = runner.tallies
    report_rows = [tallies[row.rid].as_dict() for row in rows if row.rid not in runner.not_run]
    report_rows.insert(0, {
        "collective": "rank/size", "dtype": None, "op": None, "cases": 1, "failed_cases": int(bool(identity)),
        "exact": True, "max_ratio": 0.0, "max_error": 0.0, "bound": 0.0, "worst_case": "",
        "verdict": "FAIL" if identity else "pass", "reason": "; ".join(identity),
    })
    counts = {v: sum(r["verdict"] == v for r in report_rows) for v in VERDICTS}
    return {
        "size": size,
        "backend": named,
        "factory": factory,
        "quick": quick,
        "first_failure": first_failure,
        "seed": seed,
        "timeout": float(timeout),
        "collectives": list(collectives),
        "ops": list(ops),
        "dtypes": [str(d) for d in dtypes],
        "implements": None if implements is None else list(implements),
        "ok": counts["FAIL"] == 0,
        "rows": report_rows,
        "totals": {
            "rows": len(report_rows),
            "pass": counts["pass"],
            "fail": counts["FAIL"],
            "unsupported": counts["unsupported"],
            "not_run": len(runner.not_run),
            "cases": sum(r["cases"] for r in report_rows),
            "failed_cases": sum(r["failed_cases"] for r in report_rows),
            "max_ratio": max((r["max_ratio"] for r in report_rows if r["verdict"] == "pass"), default=0.0),
        },
        "seconds": round(time.perf_counter() - started, 3),
    }
