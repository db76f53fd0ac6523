"""Correctness checks of MPI programs (``simdist run --check``, ``World(check=...)``).

The simulator controls every message and schedule, so it can find what real
MPI hides: deadlocks with their cycle, sends that complete only because MPI
buffered them, message races, and misuse (mismatched types, buffers used
before Wait, leaks). Each check records a :class:`Finding`; the kinds are in
``KINDS`` and docs/correctness.md.
"""

from ._collect import FOUND, FindingsDir, render, to_json, unique
from ._findings import Call, Finding, allowed
from ._from_errors import deadlock_finding, findings_of, mismatch_finding, mismatch_on_rank
from ._kinds import GROUPS, KINDS, parse
from ._sink import active, any_enabled, enabled, here, record

__all__ = ["FOUND", "GROUPS", "KINDS", "Call", "Finding", "FindingsDir", "active", "allowed", "any_enabled", "deadlock_finding", "enabled", "findings_of", "here", "mismatch_finding", "mismatch_on_rank",
           "parse", "record", "render", "to_json", "unique"]
