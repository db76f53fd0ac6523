"""Every error simdist raises, in one tree.

    SimdistError                  base of everything below
    ├── RankError                 one or more ranks raised; carries each traceback
    ├── CollectiveMismatch        ranks disagree on a call (kind, dtype, shape, op, root)
    ├── CollectiveTimeout         a rank waited in a call longer than the world's timeout
    │   └── Deadlock              ranks wait for each other in a cycle: the wait-for cycle
    ├── RankDied                  a worker process was killed or exited
    ├── ChecksFailed              World(check=...) found something: its findings
    └── InvalidArgument           bad input to a collective (also a TypeError/ValueError)
        ├── InvalidType           ... of the wrong type or dtype (subclasses TypeError)
        └── InvalidValue          ... of a wrong value (subclasses ValueError)

RankError, CollectiveMismatch, CollectiveTimeout and RankDied are raised by the
driver (``World.run``); the world is usable again after any of them.
CollectiveMismatch and InvalidArgument are also raised inside ranks, by the
communicator, so rank code may catch them.

Outside the tree, ``Aborted`` unwinds a rank whose run is being aborted; it
never leaves the rank (the rank reports itself as interrupted).
"""

from __future__ import annotations

__all__ = [
    "SimdistError",
    "RankError",
    "CollectiveMismatch",
    "CollectiveTimeout",
    "Deadlock",
    "RankDied",
    "ChecksFailed",
    "InvalidArgument",
    "InvalidType",
    "InvalidValue",
]


class SimdistError(Exception):
    """Base class of every simdist error."""

    __module__ = "simdist"


def _ranks_text(ranks: list[int]) -> str:
    """``rank 1``, ``ranks 0 and 2``, ``ranks 0, 1 and 3``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


class RankError(SimdistError):
    """One or more ranks raised an exception.

    ``failures`` maps each failed rank to the formatted traceback it raised;
    ``exceptions`` maps it to the exception object when it could be pickled
    back to the driver (else ``None``). Ranks that were only interrupted
    because a peer failed are listed in ``aborted``. Ranks whose process
    died in the same run (which the world has replaced) are in ``died``,
    mapped to how, as in :class:`RankDied`.
    """

    __module__ = "simdist"

    def __init__(self, failures: dict[int, str], exceptions=None, aborted=(), died=None):
        self.failures = dict(sorted(failures.items()))
        self.exceptions = dict(exceptions or {})
        self.aborted = sorted(aborted)
        self.died = dict(sorted((died or {}).items()))
        parts = [f"{_ranks_text(list(self.failures))} raised"]
        if len(self.failures) == 1:  # its exception, as the traceback's last line says it
            lines = [line for line in next(iter(self.failures.values())).strip().splitlines() if line.strip()]
            parts[0] += f" {lines[-1].strip()}" if lines else ""
        if self.died:
            replaced = "it" if len(self.died) == 1 else "them"
            parts[0] += "; " + "; ".join(f"rank {r} {how}" for r, how in self.died.items())
            parts[0] += f" (the world has replaced {replaced})"
        for rank, tb in self.failures.items():
            parts.append(f"--- rank {rank} ---\n{tb.rstrip()}")
        if self.aborted:
            parts.append(f"(ranks {self.aborted} were interrupted because of the failure)")
        super().__init__("\n".join(parts))

    def __reduce__(self):
        return type(self), (self.failures, self.exceptions, self.aborted, self.died)


class CollectiveMismatch(SimdistError):
    """Ranks of one communicator made calls that cannot match.

    Raised at once, on every rank of the call, instead of a hang or garbage:
    different collectives, or the same one with a different dtype, shape, op
    or root, or a rank that returned while its peers wait for it.
    ``calls`` maps each rank involved to a description of its call.
    """

    __module__ = "simdist"

    def __init__(self, message: str, calls: dict[int, str] | None = None):
        self.calls = dict(calls or {})
        super().__init__(message)

    def __reduce__(self):
        return type(self), (str(self), self.calls)


class CollectiveTimeout(SimdistError):
    """A rank waited in a communication call for longer than the timeout.

    ``report`` maps every rank to a line saying where it was: waiting in which
    call (with its sequence number and signature) and for whom, running user
    code, or already returned.
    """

    __module__ = "simdist"

    def __init__(self, timeout: float, report: dict[int, str]):
        self.timeout = timeout
        self.report = dict(sorted(report.items()))
        lines = [f"no progress for {timeout:g} s (the world's timeout); where each rank is:"]
        lines += [f"  rank {r}: {where}" for r, where in self.report.items()]
        super().__init__("\n".join(lines))

    def __reduce__(self):
        return type(self), (self.timeout, self.report)


class Deadlock(CollectiveTimeout):
    """Ranks wait for each other in a cycle, so none of them can ever return.

    ``cycle`` lists ``(rank, call)`` along the wait-for cycle, each rank
    waiting for the next and the last for the first (``closed``); when the
    last waits for a message from any rank instead, ``closed`` is False.
    ``report`` maps every rank to where it is, as in CollectiveTimeout.
    ``at_once`` is True when the simulator found it as soon as every rank
    that had not returned waited in a wait no rank could end, False when it
    was found at the world's ``timeout``. ``locations`` maps a rank of the
    cycle to the file (absolute path) and line of the user's call it waits
    in, where known.
    """

    __module__ = "simdist"

    def __init__(self, timeout: float, report: dict[int, str], cycle: list, closed: bool = True,
                 at_once: bool = True, locations: dict | None = None):
        self.locations = {int(r): (str(path), int(line)) for r, (path, line) in (locations or {}).items()}
        self.timeout = timeout
        self.report = dict(sorted(report.items()))
        self.cycle = [(int(r), str(call)) for r, call in cycle]
        self.closed = closed
        self.at_once = at_once
        links = [f"rank {r} in {call}" for r, call in self.cycle]
        links.append(f"rank {self.cycle[0][0]}" if closed and self.cycle else "any rank")
        when = ("found as soon as every rank that had not returned waited" if at_once
                else f"no progress for {timeout:g} s (the world's timeout)")
        lines = ["deadlock: " + " <- ".join(links),
                 f"(each rank waits for the next; {when}); where each rank is:"]
        lines += [f"  rank {r}: {where}" for r, where in self.report.items()]
        SimdistError.__init__(self, "\n".join(lines))

    def __reduce__(self):
        return type(self), (self.timeout, self.report, self.cycle, self.closed, self.at_once, self.locations)


class ChecksFailed(SimdistError):
    """The checks of ``World(check=...)`` found something in a run.

    ``findings`` lists each ``simdist.checks.Finding`` (kind, the ranks'
    calls with file and line, the fix); the message is their report.
    ``results`` holds the run's return values by rank when the run itself
    succeeded, else None (the error the run raised is the ``__cause__``).
    """

    __module__ = "simdist"

    def __init__(self, message: str, findings: list, results: list | None = None):
        self.findings = list(findings)
        self.results = results
        super().__init__(message)

    def __reduce__(self):
        return type(self), (str(self), self.findings, self.results)


class RankDied(SimdistError):
    """A worker process died (killed by a signal, or exited) during a run.

    Raised when no rank raised; when ranks raised too, the run raises
    :class:`RankError` and lists the dead ranks in its ``died``.
    ``ranks`` maps each dead rank to a description such as ``"killed by
    SIGKILL"`` or ``"exited with status 3"``.
    """

    __module__ = "simdist"

    def __init__(self, ranks: dict[int, str], context: str = ""):
        self.ranks = dict(sorted(ranks.items()))
        self.context = context
        what = "; ".join(f"rank {r} {how}" for r, how in self.ranks.items())
        super().__init__(f"{what}{context}")

    def __reduce__(self):
        return type(self), (self.ranks, self.context)


class InvalidArgument(SimdistError):
    """A collective was called with an argument it cannot accept."""

    __module__ = "simdist"


class InvalidType(InvalidArgument, TypeError):
    """An argument of the wrong type or dtype."""

    __module__ = "simdist"


class InvalidValue(InvalidArgument, ValueError):
    """An argument with a value out of range."""

    __module__ = "simdist"


class Aborted(BaseException):
    """Raised inside a rank to unwind it when the run is being aborted.

    A BaseException so that ``except Exception`` in user code does not
    swallow it.
    """

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
