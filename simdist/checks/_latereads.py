"""Reads of a pending receive's buffer (``--check=read-before-wait``).

MPI writes a nonblocking receive's message into its buffer at some time
between the post and the completion; a program that reads the buffer in
between depends on the MPI, its transport and timing. Python cannot see a read of a numpy array, so the check looks
at what a read changes: the result. The original run lists each rank's
nonblocking receives into plain buffers by the line that posted them
(``fake_backends.mpi4py._latereads``); if there are any, a re-run makes
every one of them land as late as MPI allows (its buffer holds a pattern
until Wait or a true Test completes it) with every wildcard receive
matching what it matched in the original. A result that differs (each
rank's output, the exit status, a failure), and still differs from a
control run of the original schedule, depends on when a message lands;
with several post lines each is then deferred alone to find which (at
most the race bound of re-runs). A finding names the post and the
completion of the receive, and the difference.
"""

from __future__ import annotations

import json
import os

from ._findings import Call, Finding
from ._races import RERUN_TIMEOUT, Explorer, _all_forced, _difference, _noise

FIX = "read (or copy) the receive buffer only after Wait, or a Test that returns True, completes the receive"


def _listed(directory: str, size: int) -> dict:
    """rank -> the nonblocking receives it posted, by site (``late-R.json``)."""
    found = {}
    for rank in range(size):
        try:
            with open(os.path.join(directory, f"late-{rank}.json"), encoding="utf-8") as f:
                found[rank] = {tuple(e["site"]): e for e in json.load(f)}
        except (OSError, ValueError):
            continue
    return found


def explore(explorer: Explorer, rerun) -> list[Finding]:
    """The findings of the late re-runs of ``explorer``'s original run (after
    its ``explore``); their summary line goes to its ``summary``."""
    base = explorer.base
    if not explorer.late or base is None:
        return []
    sites = sorted({site for entries in _listed(base.directory, explorer.size).values() for site in entries})
    if not sites:
        return []
    forced = _all_forced(base)
    # a re-run does what the original did: it gets that time and more, not race's short bound
    limit = max(RERUN_TIMEOUT, 3 * explorer.elapsed + 5)

    def run(late=None):
        return explorer.run(rerun, forced, late, limit)

    late = run("all")
    runs = 1
    if _difference(base, late) is not None and not base.noise:  # what differs whatever lands when: not compared
        base.noise = _noise(base, run())
        runs += 1
    diff = _difference(base, late)
    culprits = []
    if diff is not None and len(sites) == 1:
        culprits = [(sites[0], diff, late)]
    elif diff is not None:
        for site in sites[:max(explorer.bound, 1)]:
            alone = run(list(site))
            runs += 1
            if (found := _difference(base, alone)) is not None:
                culprits.append((site, found, alone))
        culprits = culprits or [(site, diff, late) for site in sites]  # only together: each has a part
    summary = (f"simdist --check read-before-wait: nonblocking receives posted at {len(sites)} "
               f"line{'s' if len(sites) != 1 else ''}, {runs} re-run{'s' if runs != 1 else ''} with late landing")
    explorer.summary = "\n".join(filter(None, (explorer.summary, summary)))
    return [_finding(site, diff, result, base, explorer.size) for site, diff, result in culprits]


def _finding(site: tuple, diff: str, result, base, size: int) -> Finding:
    """The finding of the receives posted at ``site``, from the re-run
    ``result`` that showed ``diff`` (or the first run ``base``, if the
    re-run ended before the post)."""
    entries = {rank: e[site] for rank, e in _listed(result.directory, size).items() if site in e}
    entries = entries or {rank: e[site] for rank, e in _listed(base.directory, size).items() if site in e}
    calls = []
    for rank, entry in sorted(entries.items()):
        calls.append(Call(rank, entry["call"], *site))
        if entry.get("completed"):
            calls.append(Call(rank, "its completion (Wait, Test, ...)", *entry["completed"]))
    first = entries[min(entries)]
    return Finding("read-before-wait", _message(first["call"], diff), FIX, tuple(calls),
                   {"post": list(site), "completion": first.get("completed"), "difference": diff})


def _message(call: str, diff: str) -> str:
    return (f"the buffer of {call} is read before the request completes: with the message landing at the "
            f"completion (MPI may write it at any time until then) the result differs: {diff} "
            "(landing early vs at the completion)")
