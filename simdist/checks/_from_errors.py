"""Findings made from the errors a run raises: a deadlock, a collective mismatch."""

from __future__ import annotations

import re

from .._errors import CollectiveMismatch, Deadlock
from ._findings import Call, Finding

#: A link of a cycle that is a standard-mode send (not Ssend, Bsend), blocking
#: or waited for: the stand-in's MPI calls, or the contract's ``send``.
_STANDARD_SEND = re.compile(r"^(?:Wait\w* for )?(?:[Ii]?[Ss]end|Send_init|[Ii]?[Ss]endrecv(?:_replace)?)\(dest=")
_AT = re.compile(r"^(?P<call>.*?) at (?P<path>[^ ]+?):(?P<line>\d+)(?P<rest>.*)$")


def _call(rank: int, text: str) -> Call:
    match = _AT.match(text)
    if not match:
        return Call(rank, text)
    return Call(rank, (match["call"] + match["rest"]).strip(), match["path"], int(match["line"]))


def _link(exc, rank: int, text: str) -> Call:
    """A link of a deadlock's cycle as a Call: the MPI call's text, and the
    file and line the simulator recorded (``Deadlock.locations``)."""
    call = _call(rank, text)
    where = getattr(exc, "locations", {}).get(rank)
    return Call(rank, call.call, *where) if where else call


def deadlock_finding(exc, checks) -> Finding:
    """The finding of a ``simdist.Deadlock``: its wait-for cycle. With
    ``buffering`` on (standard sends run synchronous), a cycle through a
    send is a ``buffering`` finding: the program relies on MPI buffering."""
    calls = tuple(_link(exc, r, text) for r, text in exc.cycle)
    sends = tuple(c for c in calls if _STANDARD_SEND.match(c.call))
    if "buffering" in checks and sends:
        return Finding("buffering", "these standard-mode sends complete only if MPI buffers them (as it may below "
                                    "its eager limit); run as Ssend, they deadlock",
                       "post the receives first (Irecv, then Send, then Wait), or use Sendrecv", sends,
                       {"cycle": [str(c) for c in calls], "closed": exc.closed})
    how = "each rank waits for the next, and the last for the first" if exc.closed else \
        "each rank waits for the next, and the last for a message from any rank that no rank will send"
    return Finding("deadlock", f"deadlock: {how}",
                   "reorder the calls so one side sends (or posts a nonblocking receive) before it receives",
                   calls, {"cycle": [c.rank for c in calls], "closed": exc.closed, "at_once": exc.at_once})


_MISMATCH_FIX = "call the collectives of each communicator in the same order, with the same arguments, on every rank"


def mismatch_finding(exc) -> Finding:
    """The finding of a ``simdist.CollectiveMismatch``, as the run sees it
    (each rank's call, without its line)."""
    calls = tuple(_call(r, text) for r, text in sorted(exc.calls.items()))
    return Finding("collective-order", str(exc).splitlines()[0], _MISMATCH_FIX, calls)


def mismatch_on_rank(exc, rank: int) -> Finding | None:
    """The same finding as one rank raising ``exc`` sees it: its own call, at
    the user's line the traceback names (the run joins the ranks' findings:
    ``_collect.unique``). None for a mismatch with a rank that returned."""
    from .._frames import user_frame

    if not _called(exc):
        return None
    frame = user_frame(exc.__traceback__)
    text = exc.calls.get(rank, "")
    call = Call(rank, _call(rank, text).call, frame.filename, frame.lineno) if frame else _call(rank, text)
    return Finding("collective-order", str(exc).splitlines()[0], _MISMATCH_FIX, (call,))


def findings_of(exc, checks) -> list[Finding]:
    """The findings of the error a run raised, for the kinds in ``checks``:
    a Deadlock's cycle, a CollectiveMismatch's calls; none for others."""
    if isinstance(exc, Deadlock) and checks & {"deadlock", "buffering"}:
        return [deadlock_finding(exc, checks)]
    if isinstance(exc, CollectiveMismatch) and "collective-order" in checks and _called(exc):
        return [mismatch_finding(exc)]
    return []


def _called(exc) -> bool:
    """Whether every rank of a mismatch made a call: a rank that returned
    (or exited) while a peer waits ends the run with its own error, and
    calls no collective in another order."""
    return all(text != "returned" for text in exc.calls.values())
