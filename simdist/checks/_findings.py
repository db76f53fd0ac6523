"""A finding: what a check found, where, and the one-line fix."""

from __future__ import annotations

import linecache
import os
import re
from dataclasses import asdict, dataclass, field

from ._kinds import KINDS


@dataclass(frozen=True)
class Call:
    """One rank's part in a finding: the MPI call and the user's line that made it."""

    rank: int
    call: str  # e.g. "Recv(source=1, tag=0)"
    path: str = ""  # absolute path of the user's file ("" if unknown)
    line: int = 0

    @property
    def site(self) -> str:
        return f"{os.path.basename(self.path)}:{self.line}" if self.path else ""

    def __str__(self) -> str:
        return f"rank {self.rank}: {self.call}" + (f" at {self.site}" if self.path else "")


@dataclass(frozen=True)
class Finding:
    """``kind`` (a key of ``KINDS``), the ``calls`` involved (each rank's
    call and line), what happened (``message``, one line) and how to fix it
    (``fix``, one line). ``details`` holds kind-specific data for the JSON
    report (e.g. a race's two schedules)."""

    kind: str
    message: str
    fix: str
    calls: tuple[Call, ...] = ()
    details: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")

    @property
    def ranks(self) -> list[int]:
        return sorted({c.rank for c in self.calls})

    def key(self) -> tuple:
        """What makes two findings the same (the same kind at the same lines)."""
        return self.kind, self.message, tuple((c.rank, c.call, c.path, c.line) for c in self.calls)

    def to_json(self) -> dict:
        return {"kind": self.kind, "ranks": self.ranks, "message": self.message, "fix": self.fix,
                "calls": [{**asdict(c), "site": c.site} for c in self.calls], "details": self.details}

    @classmethod
    def from_json(cls, data: dict) -> "Finding":
        calls = tuple(Call(c["rank"], c["call"], c.get("path", ""), c.get("line", 0)) for c in data.get("calls", ()))
        return cls(data["kind"], data["message"], data["fix"], calls, data.get("details", {}))

    def render(self) -> str:
        who = ", ".join(map(str, self.ranks))
        lines = [f"[{self.kind}] {'rank' if len(self.ranks) == 1 else 'ranks'} {who}: {self.message}"
                 if self.ranks else f"[{self.kind}] {self.message}"]
        lines += [f"    {c}" for c in self.calls]
        lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


_ALLOW = re.compile(r"#.*\bsimdist:\s*allow\[([\w\-, ]+)\]")


def allowed(finding: Finding) -> bool:
    """Whether a line of the finding carries ``# simdist: allow[kind]``
    (several kinds comma-separated), which silences it."""
    for call in finding.calls:
        if not call.path:
            continue
        match = _ALLOW.search(linecache.getline(call.path, call.line))
        if match and finding.kind in {k.strip() for k in match.group(1).split(",")}:
            return True
    return False
