"""The run's side: a directory the ranks write findings to, and the report."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from ._findings import Finding, allowed
from ._kinds import KINDS

#: Exit status of a run whose program succeeded and whose checks found something.
FOUND = 3


class FindingsDir:
    """A private temporary directory for one run's findings, removed on exit;
    none (``path`` None) for a run without checks."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.path: str | None = None

    def __enter__(self) -> "FindingsDir":
        if self.enabled:
            self.path = tempfile.mkdtemp(prefix="simdist-findings-")
        return self

    def __exit__(self, *exc) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)

    def collect(self, extra=()) -> list[Finding]:
        """Every rank's findings and ``extra`` ones, each once, without those
        a ``# simdist: allow[kind]`` silences, in the order of ``KINDS``."""
        found = list(extra)
        for name in sorted(os.listdir(self.path)) if self.path else ():
            with open(os.path.join(self.path, name), encoding="utf-8") as f:
                found += [Finding.from_json(json.loads(line)) for line in f if line.strip()]
        return unique(found)


def _joined(findings) -> list[Finding]:
    """Findings of one collective mismatch (the same message), from the
    ranks and from the run, as one: per rank, the call that names a line."""
    joined: dict[str, Finding] = {}
    rest = []
    for f in findings:
        if f.kind != "collective-order":
            rest.append(f)
            continue
        calls = {c.rank: c for c in joined[f.message].calls} if f.message in joined else {}
        for c in f.calls:
            if c.rank not in calls or (c.path and not calls[c.rank].path):
                calls[c.rank] = c
        joined[f.message] = Finding(f.kind, f.message, f.fix, tuple(calls[r] for r in sorted(calls)), f.details)
    return rest + list(joined.values())


def unique(findings) -> list[Finding]:
    order = list(KINDS)
    seen, kept = set(), []
    for f in _joined(findings):
        if f.key() not in seen and not allowed(f):
            seen.add(f.key())
            kept.append(f)
    return sorted(kept, key=lambda f: (order.index(f.kind), f.ranks, [c.line for c in f.calls]))


def render(findings: list[Finding], checks) -> str:
    """The terminal report: one block per finding, or the all-clear line."""
    names = ",".join(k for k in KINDS if k in checks)
    if not findings:
        return f"simdist --check ({names}): no findings"
    head = f"simdist --check ({names}): {len(findings)} finding{'s' if len(findings) != 1 else ''}"
    return "\n".join([head, *(f.render() for f in findings)])


def to_json(findings: list[Finding], checks) -> dict:
    return {"checks": [k for k in KINDS if k in checks], "count": len(findings),
            "findings": [f.to_json() for f in findings]}
