"""Message races (``--check=race``): re-run a program with each other
admissible match of its wildcard receives and report where the result changes.

The original run records, on each rank, every wildcard decision and every
message that arrived (``fake_backends.mpi4py``'s race log). A message from
source s is an *admissible* other match of decision k of rank r if it
matches the receive's communicator and tag, comes from another source, is
the first such message from s that no earlier receive consumed (messages
from one sender never overtake each other), and its Lamport clock is not
after the decision's (so it was not sent because of that receive). Each
such alternative (at most ``bound`` of them, in rank and decision order) is
a re-run in which rank r's decisions 1..k-1 match what they matched in the
original and decision k matches only s; everything else is free. A re-run
whose output (each rank's stdout), exit status or failure differs from the
original's is a finding with the two schedules.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from ._findings import Call, Finding

#: Re-runs at most, unless ``--race-runs`` says otherwise.
DEFAULT_RUNS = 16
#: Seconds a re-run may hang before it is reported (the run's timeout if shorter).
RERUN_TIMEOUT = 10.0
FIX = "receive from a specific source, or make the result independent of the order (e.g. reduce in rank order)"


# -- the rank's side ----------------------------------------------------------------------------------
class _Tee(io.TextIOBase):
    """Text to a file, and also to ``terminal`` unless it is None."""

    def __init__(self, path: str, terminal):
        self._file = open(path, "w", encoding="utf-8")
        self._terminal = terminal

    def write(self, text: str) -> int:
        self._file.write(text)
        if self._terminal is not None:
            self._terminal.write(text)
        return len(text)

    def flush(self) -> None:
        self._file.flush()
        if self._terminal is not None:
            self._terminal.flush()

    def close(self) -> None:
        self._file.close()

    def isatty(self) -> bool:
        return self._terminal is not None and self._terminal.isatty()

    def fileno(self) -> int:  # output written to it directly is shown, not compared
        return (self._terminal or self._file).fileno()


@contextlib.contextmanager
def on_rank(race: dict | None, rank: int):
    """While a program runs on ``rank`` with races looked for (``race``: the
    run's directory, its forced decisions, whether its output is shown): keep
    the rank's stdout (and stderr of a quiet re-run) in the directory, and
    record the stand-in's wildcard matches there."""
    if race is None:
        yield
        return
    from fake_backends.mpi4py._schedule import recording

    directory = race["dir"]
    shown = None if race["quiet"] else sys.stdout
    if hasattr(shown, "reconfigure"):  # whole lines per write: ranks share the terminal
        shown.reconfigure(line_buffering=True, write_through=False)
    saved = sys.stdout, sys.stderr
    sys.stdout = out = _Tee(os.path.join(directory, f"out-{rank}.txt"), shown)
    if race["quiet"]:
        sys.stderr = _Tee(os.path.join(directory, f"err-{rank}.txt"), None)
    try:
        with recording(directory, race["forced"].get(rank, {})), _late_receives(race, rank):
            yield
    finally:
        out.flush()
        if sys.stderr is not saved[1]:
            sys.stderr.close()
        out.close()
        sys.stdout, sys.stderr = saved


def _late_receives(race: dict, rank: int):
    """How the user's nonblocking receives land (``--check=read-before-wait``)."""
    if "late" not in race:
        return contextlib.nullcontext()
    from fake_backends.mpi4py._latereads import deferring

    return deferring(race["late"], race["dir"], rank)


# -- the run's side --------------------------------------------------------------------------------------
@dataclass
class Result:
    """What one run gave: each rank's output lines, the exit status, the failure."""

    outputs: dict
    status: int
    error: str
    decisions: dict = field(default_factory=dict)  # rank -> its decisions
    arrivals: dict = field(default_factory=dict)  # rank -> its arrived messages
    noise: dict = field(default_factory=dict)  # rank -> lines not compared (None: its whole output); "status"
    directory: str = ""  # where the run's ranks wrote their logs


def _read(directory: str, size: int, status: int, error: str) -> Result:
    result = Result({}, status, error, directory=directory)
    for rank in range(size):
        path = os.path.join(directory, f"out-{rank}.txt")
        with contextlib.suppress(OSError), open(path, encoding="utf-8") as f:
            result.outputs[rank] = f.read().splitlines()
        with contextlib.suppress(OSError), open(os.path.join(directory, f"log-{rank}.json"), encoding="utf-8") as f:
            log = json.load(f)
            result.decisions[rank], result.arrivals[rank] = log["decisions"], log["arrivals"]
    return result


def alternatives(result: Result) -> list[tuple[int, dict, int]]:
    """Every admissible other match: (rank, decision, other source), in rank and decision order."""
    found = []
    for rank in sorted(result.decisions):
        senders = _Senders(result.arrivals[rank])
        matched = [d for d in result.decisions[rank] if "source" in d]  # the others: the run ended first
        others = {d["k"]: senders.others(d) for d in sorted(matched, key=lambda d: d["after"])}
        found += [(rank, d, s) for d in matched for s in others[d["k"]]]
    return found


class _Senders:
    """A rank's arrived messages by communicator and sender, in arrival order
    (which is each sender's order); asked in increasing ``after``."""

    def __init__(self, arrivals: list):
        self._queues: dict[int, dict[int, list]] = {}
        for _world, ctx, source, tag, clock, consumed in arrivals:
            self._queues.setdefault(ctx, {}).setdefault(source, []).append((tag, clock, consumed))
        self._start: dict[tuple, int] = {}  # (ctx, source) -> messages consumed before every later ask

    def others(self, decision: dict) -> list[int]:
        """The other senders whose first free matching message ``decision`` could have taken."""
        ctx, after, tag = decision["ctx"], decision["after"], decision["tag"]
        found = []
        for source, queue in sorted(self._queues.get(ctx, {}).items()):
            if source == decision["source"]:
                continue
            i = self._start.get((ctx, source), 0)
            while i < len(queue) and queue[i][2] is not None and queue[i][2] < after:
                i += 1
            self._start[(ctx, source)] = i
            first = next((m for m in itertools.islice(queue, i, None)
                          if (tag == -1 or m[0] == tag) and (m[2] is None or m[2] >= after)), None)
            if first is not None and first[1] <= decision["clock"]:
                found.append(source)
        return found


def _all_forced(result: Result) -> dict:
    """Every decision of every rank as it was."""
    return {rank: {d["k"]: d["source"] for d in decisions if "source" in d}
            for rank, decisions in result.decisions.items()}


def _noise(base: Result, control: Result) -> dict:
    """What differs between two runs with the same matches (times, addresses): never compared."""
    noise = {}
    for rank in set(base.outputs) | set(control.outputs):
        a, b = base.outputs.get(rank, []), control.outputs.get(rank, [])
        if len(a) != len(b):
            noise[rank] = None
        elif a != b:
            noise[rank] = {i for i, (x, y) in enumerate(zip(a, b)) if x != y}
    if base.status != control.status:
        noise["status"] = None
    return noise


def _forced(result: Result, rank: int, decision: dict, source: int) -> dict:
    earlier = {d["k"]: d["source"] for d in result.decisions[rank] if d["k"] < decision["k"] and "source" in d}
    return {rank: {**earlier, decision["k"]: source}}


class Explorer:
    """The re-runs of one ``simdist run``: the original's directory, then a
    re-run per admissible alternative (``race``); ``_latereads`` makes its
    re-runs with late receives (``read-before-wait``) through ``run``."""

    def __init__(self, checks, size: int, bound: int | None):
        self.races, self.late = "race" in checks, "read-before-wait" in checks
        self.on = self.races or self.late
        self.size = size
        self.bound = DEFAULT_RUNS if bound is None else bound
        self.summary = ""

    def __enter__(self) -> "Explorer":
        self._dirs: list[str] = []
        self.base: Result | None = None  # what the original run gave (``explore``)
        self.elapsed = 0.0  # how long it took (seconds)
        return self

    def __exit__(self, *exc) -> None:
        for d in self._dirs:
            shutil.rmtree(d, ignore_errors=True)

    def _settings(self, forced: dict, quiet: bool, late=None) -> dict:
        """A run's settings; ``late``: how its nonblocking receives land (``_latereads``)."""
        self._dirs.append(tempfile.mkdtemp(prefix="simdist-race-"))
        return {"dir": self._dirs[-1], "forced": forced, "quiet": quiet, **({"late": late} if self.late else {})}

    def run(self, rerun, forced: dict, late=None, timeout: float | None = None) -> Result:
        """A quiet re-run (``rerun(settings)`` -> ScriptOutcome; ``timeout``
        instead of ``RERUN_TIMEOUT``) and what it gave."""
        settings = self._settings(forced, True, late)
        if timeout is not None:
            settings["timeout"] = timeout
        outcome = rerun(settings)
        return _read(settings["dir"], self.size, outcome.status, outcome.error)

    def original(self) -> dict | None:
        """The race settings of the original run (None without the check)."""
        return self._settings({}, False) if self.on else None

    def explore(self, first, rerun) -> list[Finding]:
        """Re-run (``rerun(settings)`` -> ScriptOutcome) each alternative of the
        original run (``first``: its outcome); the findings."""
        if not self.on:
            return []
        self.base = _read(self._dirs[0], self.size, first.status, first.error)
        return self._races(self.base, rerun) if self.races else []

    def _races(self, base: Result, rerun) -> list[Finding]:
        options = alternatives(base)
        findings, done, runs, never = {}, set(), 0, 0
        if options and self.bound > 0:  # the same matches again: what differs then is not the order's doing
            base.noise = _noise(base, self.run(rerun, _all_forced(base)))
        for rank, decision, source in options:
            where = (rank, tuple(decision["site"]))
            if where in done or runs >= self.bound:
                continue
            runs += 1
            other = self.run(rerun, _forced(base, rank, decision, source))
            if not _took(other, rank, decision["k"]):  # it waited for a message sent only after it
                never += 1
                continue
            finding = _compare(base, other, rank, decision, source)
            if finding is not None:
                findings[where] = finding
                done.add(where)
        control = " and a control run" if options and self.bound > 0 else ""
        self.summary = (f"simdist --check race: {sum(len(d) for d in base.decisions.values())} wildcard matches, "
                        f"{len(options)} other admissible matches, {runs} re-runs (at most {self.bound}){control}"
                        + (f", {never} of them never got the message they were forced to match" if never else ""))
        return list(findings.values())


def _took(result: Result, rank: int, k: int) -> bool:
    """Whether decision ``k`` of ``rank`` matched (the forced message came)."""
    decisions = result.decisions.get(rank, [])
    return len(decisions) >= k and "source" in decisions[k - 1]


def _difference(base: Result, other: Result) -> str | None:
    """How ``other`` differs from ``base`` (None: it does not)."""
    noise = base.noise or other.noise
    for rank in range(max(len(base.outputs), len(other.outputs))):
        a, b = base.outputs.get(rank, []), other.outputs.get(rank, [])
        skip = noise.get(rank, set())
        if skip is None or a == b:
            continue
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y and i not in skip), None)
        if n is None and len(a) != len(b):
            n = min(len(a), len(b))
        if n is not None:
            return f"rank {rank} output line {n + 1}: {_line(a, n)} vs {_line(b, n)}"
    if base.status != other.status and "status" not in noise:
        return f"exit status {base.status} vs {other.status}{_failure(other) or _failure(base)}"
    return None


def _line(lines: list, n: int) -> str:
    return repr(lines[n]) if n < len(lines) else "(no line)"


def _failure(result: Result) -> str:
    lines = result.error.strip().splitlines() if result.error else []
    text = lines[0].removeprefix("simdist run: ").strip() if lines else ""
    return f" ({text[:160]}{'...' if len(text) > 160 else ''})" if text else ""


def _compare(base: Result, other: Result, rank: int, decision: dict, source: int) -> Finding | None:
    """The finding if forcing ``decision`` to ``source`` changed the result."""
    diff = _difference(base, other)
    if diff is None:
        return None
    first, second = decision["source"], source
    if first > second:  # the same finding whichever source the original happened to match
        first, second = second, first
        diff = _difference(other, base)
    message = (f"{decision['call']} can match the message of rank {first} or of rank {second}, "
               f"and the result differs: {diff} (matching rank {first} vs rank {second})")
    path, line = decision["site"]
    details = {"decision": decision["k"], "sources": [first, second], "difference": diff}
    return Finding("race", message, FIX, (Call(rank, decision["call"], path, line),), details)

