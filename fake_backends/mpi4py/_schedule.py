"""Wildcard matches of one rank, recorded and forced (``--check=race``).

While ``simdist run --check=race`` runs a program, each rank's engine keeps
a :class:`RaceLog`: a Lamport clock piggybacked on every message (the
record's last header word, as DAMPI does), every message that arrived
(with its send clock and when a receive consumed it), and every wildcard
decision: the k-th receive with ``ANY_SOURCE`` (or a probe with it that
found a message), its call and user line, and what it matched. At the end
of the run the log goes to a JSON file that ``simdist.checks`` reads to
find the other admissible matches (a message from another source that
matches the envelope, was not consumed before, and whose send clock is not
after the decision, so it was not sent because of it).

A re-run is given ``forced``: decision k -> the source (rank in the
communicator) it must match; the receive (or probe) then matches only that
source, the others stay free.
"""

from __future__ import annotations

import contextlib
import json
import os

from simdist import checks

ANY_SOURCE = -1

#: This process's settings while a run with races on is active: (directory, forced decisions) or None.
_settings: tuple[str, dict] | None = None


@contextlib.contextmanager
def recording(directory: str, forced: dict):
    """Record (and force) wildcard matches of the engines made in the block."""
    global _settings
    saved, _settings = _settings, (directory, {int(k): int(v) for k, v in forced.items()})
    try:
        yield
    finally:
        _settings = saved


def new_log(rank: int) -> "RaceLog | None":
    """The log of a new engine of ``rank``, or None when races are not looked for."""
    return None if _settings is None else RaceLog(rank, *_settings)


class RaceLog:
    """One rank's clock, arrivals and wildcard decisions (see the module doc)."""

    def __init__(self, rank: int, directory: str, forced: dict):
        self.rank, self.directory, self.forced = rank, directory, forced
        self.clock = 0
        self.consumed = 0  # receives that consumed a message so far
        self.arrivals: list[list] = []  # [world source, ctx, source, tag, clock, consumed at (or None)]
        self.decisions: list[dict] = []
        self._wildcards = 0

    def stamp(self) -> int:
        """The clock a message sent now carries."""
        self.clock += 1
        return self.clock

    def arrived(self, world: int, ctx: int, source: int, tag: int, clock: int) -> int:
        """Note an arrived message; return its index (the envelope keeps it)."""
        self.arrivals.append([world, ctx, source, tag, clock, None])
        return len(self.arrivals) - 1

    def wildcard(self, source: int, call: str) -> tuple[int | None, int]:
        """A receive posted with ``source``: (its decision number or None, the source to match)."""
        if source != ANY_SOURCE:
            return None, source
        self._wildcards += 1
        k = self._wildcards
        self.decisions.append({"k": k, "call": _call_text(call), "site": _site(self.rank, call)})
        return k, self.forced.get(k, source)

    def probe_source(self, source: int) -> int:
        """The source a wildcard probe may find now (its decision would be the next)."""
        return self.forced.get(self._wildcards + 1, source) if source == ANY_SOURCE else source

    def probed(self, requested: int, tag: int, arrival: int, call: str) -> None:
        """A probe with ``requested`` source found the message ``arrival``."""
        k, _ = self.wildcard(requested, call)
        if k is not None:  # it saw the message: what follows may depend on it
            self.clock = max(self.clock, self.arrivals[arrival][4]) + 1
            self._decide(k, tag, arrival, self.consumed)

    def consume(self, arrival: int, k: int | None, tag: int) -> None:
        """A receive (decision ``k``, None if not a wildcard) consumed message ``arrival``."""
        entry = self.arrivals[arrival]
        entry[5] = self.consumed
        self.clock = max(self.clock, entry[4]) + 1
        if k is not None:
            self._decide(k, tag, arrival, self.consumed + 1)
        self.consumed += 1

    def _decide(self, k: int, tag: int, arrival: int, after: int) -> None:
        """Decision ``k`` took message ``arrival``; messages consumed at ``after`` or later were still free."""
        world, ctx, source = self.arrivals[arrival][:3]
        self.decisions[k - 1].update(ctx=ctx, tag=tag, source=source, world=world, after=after, clock=self.clock)

    def dump(self) -> None:
        path = os.path.join(self.directory, f"log-{self.rank}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"rank": self.rank, "arrivals": self.arrivals, "decisions": self.decisions}, f)


def _call_text(desc) -> str:
    """The call as the user wrote it: the engine's description without its communicator."""
    return str(desc).split(" on ")[0]


def _site(rank: int, desc) -> list:
    call = checks.here(rank, _call_text(desc))
    return [call.path, call.line]


def probe_call(source: int, tag: int, take: bool) -> str:
    """How a probe that found a message is named in a finding."""
    names = "ANY_SOURCE" if source == ANY_SOURCE else str(source)
    return f"{'Mprobe' if take else 'Probe'}(source={names}, tag={'ANY_TAG' if tag == -1 else tag})"
