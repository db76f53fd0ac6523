"""The rank's side: which checks are on, and where its findings go.

A run with checks hands each rank the kinds to look for and a directory;
a rank appends each finding as one JSON line to its own file there
(``rank-R.jsonl``), flushed at once, so findings survive a rank that later
hangs, fails or is killed. The run's side reads them (``_collect``).
"""

from __future__ import annotations

import contextlib
import json
import os

from .._frames import caller_site
from ._findings import Call, Finding

_kinds: frozenset[str] = frozenset()
_file = None
_seen: set = set()


@contextlib.contextmanager
def active(kinds, directory: str | None, rank: int):
    """Turn the ``kinds`` of checks on in this process for the block;
    findings go to ``directory``/rank-``rank``.jsonl (nothing is on when
    ``directory`` is None)."""
    global _kinds, _file
    if directory is None or not kinds:
        yield
        return
    saved = _kinds, _file
    _kinds, _file = frozenset(kinds), open(os.path.join(directory, f"rank-{rank}.jsonl"), "a", encoding="utf-8")
    try:
        yield
    finally:
        _file.close()
        _kinds, _file = saved
        _seen.clear()


def any_enabled() -> bool:
    """Whether this process looks for any kind of finding."""
    return bool(_kinds)


def enabled(kind: str) -> bool:
    """Whether this process looks for ``kind`` (see ``KINDS``)."""
    return kind in _kinds


def record(finding: Finding) -> None:
    """Keep ``finding`` (once per kind and lines) if its kind is on."""
    if finding.kind not in _kinds or _file is None or finding.key() in _seen:
        return
    _seen.add(finding.key())
    _file.write(json.dumps(finding.to_json()) + "\n")
    _file.flush()


def here(rank: int, call: str) -> Call:
    """``call`` on ``rank``, at the user's line that is running now."""
    site = caller_site()
    return Call(rank, call, *site) if site else Call(rank, call)
