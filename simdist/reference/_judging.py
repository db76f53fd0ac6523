"""Judging a sweep's rows on the driver, from what every rank returned.

A row's cases are judged in order: values by :func:`simdist.reference.check`
(barrier and send/recv by the contract's words), and the contract checks
the ranks made. What is known of a row accumulates in its :class:`Tally`.
"""

from __future__ import annotations

import math

import numpy as np

from ._cases import Case, Row, case_input, describe_case, messages
from ._verdict import check

__all__ = ["Tally", "judge_row"]


#: Kinds of finding, by a phrase of the problem's text; "wrong result" otherwise.
_KINDS = (("raised", " raised "), ("input modified", "modified its input"),
          ("result aliases the input", "sharing memory"), ("read-only result", "read-only array"),
          ("result changed later", "changed when later calls ran"))


def kinds_of(problems: list[str]) -> list[str]:
    """The kinds of finding ``problems`` (one sentence each) report, in a fixed order."""
    found = [kind for kind, phrase in _KINDS if any(phrase in p for p in problems)]
    if any(not any(phrase in p for _, phrase in _KINDS) for p in problems):
        found.append("wrong result")
    return found


class Tally:
    """What is known about one row so far.

    The first failure is the row's reason; every kind of finding (a raise,
    an input modified, a wrong result, ...) is kept with its count and first
    case, so a raise in one case does not hide what the other cases found.
    """

    def __init__(self, row: Row):
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
        self.findings: dict[str, dict] = {}

    def fail(self, reason: str, problems: list[str] | None = None) -> None:
        """Count a failed case; ``problems`` are its findings (default: the reason alone)."""
        self.failed += 1
        if self.verdict != "FAIL":
            self.verdict, self.reason = "FAIL", reason
        for kind in kinds_of(problems or [reason]):
            finding = self.findings.setdefault(kind, {"kind": kind, "cases": 0, "first": reason})
            finding["cases"] += 1

    def as_dict(self) -> dict:
        row = self.row
        others: dict[str, list[str]] = {}  # first reason -> "kind in N case(s)"
        for f in self.findings.values():
            if f["first"] != self.reason:
                others.setdefault(f["first"], []).append(f"{f['kind']} in {f['cases']} case(s)")
        also = "; also " + "; ".join(f"{', '.join(kinds)}, first: {first}" for first, kinds in others.items())
        return {
            "collective": row.collective, "dtype": row.dtype, "op": row.op, "cases": self.cases,
            "failed_cases": self.failed, "exact": self.exact and self.cases > 0,
            "max_ratio": self.ratio, "max_error": self.error, "bound": self.bound, "worst_case": self.worst,
            "verdict": self.verdict, "reason": self.reason + (also if others else ""),
            "findings": list(self.findings.values()),
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


def _judge_barrier(entries: list, case: Case) -> list[str]:
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


def _judge_send_recv(row: Row, case: Case, entries: list, n: int, seed: int) -> list[str]:
    problems = []
    for r, entry in enumerate(entries):
        source = (r - 1) % n
        sent = messages(row, case, source, n, seed)
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


def judge_row(tally: Tally, row: Row, per_rank: list[list], n: int, seed: int) -> None:
    """Judge ``row`` (the tally's row, or some of its cases) from every rank's entries."""
    for i, case in enumerate(row.cases):
        got = [entries[i] if i < len(entries) else None for entries in per_rank]
        if all(g is None for g in got):
            return  # every rank stopped earlier (unsupported)
        text = describe_case(row, case, n)
        status = ["missing" if g is None else g[0] for g in got]
        if "unsupported" in status:
            said = [r for r, s in enumerate(status) if s == "unsupported"]
            message = got[said[0]][1]
            if len(said) == n and case == tally.row.cases[0]:
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
            inputs = [case_input(row, case, r, n, seed) for r in range(n)]
            verdict = check(row.collective, inputs, [g[1] for g in got], op=row.op or "sum",
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
            tally.fail(f"{text}: " + "; ".join(problems[:3]) + more, problems)

