"""Misuse checks of the stand-in (``simdist run --check``): type-mismatch,
buffer-in-use, request-leak, handle-leak, unreceived, finalize-pending,
handle-at-finalize.

The stand-in's modules call the hooks below where a request or handle is
made, completed or freed, where a message is sent and matched; each hook
returns at once unless one of these checks is on (``ON``, set by ``start``
when the stand-in is installed). ``at_end`` reports what is left when the
rank's program ends normally (MPI.Finalize, or the end of its script),
``at_failure`` when it fails.

* A message of the buffer API carries a *note* after its payload (header
  word 7 is its size, see ``_p2p``): the sender's call, line and type
  signature. The receive compares signatures when it matches the message;
  ``unreceived`` names the sender from it.
* ``unreceived`` must see every message sent to the rank: each rank's end
  sends every other rank an end marker after its last message, and takes
  what arrives until it has all of them (``_drain``, bounded in time).
* Handles (handle-leak, handle-at-finalize) are ``_handleleaks``'s.

What counts as the user's call is ``_usercode``'s.
"""

from __future__ import annotations

import json
import time

import numpy as np

from simdist import checks
from simdist._errors import SimdistError
from simdist._frames import caller_site

from . import _handleleaks
from ._usercode import call_at, user_site

#: The kinds of this module.
KINDS = ("type-mismatch", "buffer-in-use", "request-leak", "handle-leak", "unreceived", "finalize-pending",
         "handle-at-finalize")

#: Whether any of these checks is on in this installation (``start``): every
#: hook returns at once when not, so a run without them costs a call per hook.
ON = False
_requests: dict[int, tuple] = {}  # id(operation, or persistent handle) -> (operation, Prequest or None, Call)
_truncated: list = []  # truncation findings, reported if the program then fails (``at_failure``)
_buffers: dict[int, tuple] = {}  # id(op) -> (op, view, digest, Call): send buffers a request owns


def start() -> None:
    """The stand-in is installed: note whether any of these checks is on."""
    global ON
    ON = any(checks.enabled(kind) for kind in KINDS)
    _handleleaks.start()


def watching(kind: str) -> bool:
    """Whether ``kind`` is looked for on this rank (cheap: a set lookup)."""
    return checks.enabled(kind)


# -- requests -------------------------------------------------------------------------------
def _nonblocking(call: str) -> bool:
    return call[:1] in ("I", "i")


def made(request, call: str, desc: str):
    """``request``, which the stand-in's ``call`` made; tracked when the call
    is a nonblocking one from the user's code (keyed by its operation: a
    copy of the request completes it too)."""
    if not ON:
        return request
    if _nonblocking(call) and (watching("request-leak") or watching("finalize-pending")) and request._op is not None:
        site = user_site()
        if site is not None:
            _requests[id(request._op)] = (request._op, None, call_at(desc, site))
    return request


def paired(request, *parts):
    """A Sendrecv's request, made of ``parts``: tracked as the receive was."""
    if not ON:
        return request
    entries = [_requests.pop(id(part._op), None) for part in parts] if _requests else ()
    entry = next((e for e in entries if e is not None), None)
    if entry is not None:
        _requests[id(request._op)] = (request._op, None, entry[2])
    return request


def persistent_made(request, desc: str):
    """A persistent request (Send_init, ...): it must be freed."""
    if not ON:
        return request
    if watching("request-leak") or watching("finalize-pending"):
        site = user_site()
        if site is not None:
            _requests[id(request._persistent)] = (None, request, call_at(desc, site))
    return request


def persistent_freed(request) -> None:
    if _requests and request._persistent is not None:
        _requests.pop(id(request._persistent), None)


def completed(op) -> None:
    """A request's operation completed (Wait, a true Test, Free)."""
    if not ON:
        return
    if _requests:
        _requests.pop(id(op), None)
    if _buffers:
        send_completed(op)
    check = getattr(op, "check", None)
    if check is not None and not op.cancelled and op.sink is not None:
        check.completed(op.sink)


# -- buffers of nonblocking sends ------------------------------------------------------------
def _digest(view) -> bytes:
    """The bytes of a buffer as they are now (a copy: comparing is faster than hashing)."""
    return view.tobytes()


def send_posted(op, view, call: str, desc: str) -> None:
    """A nonblocking send owns ``view`` (uint8, the user's memory) until its
    request completes: remember its digest."""
    if not ON:
        return
    if (_nonblocking(call) or call.endswith("_init")) and watching("buffer-in-use") and view.size:
        site = user_site()
        if site is not None:
            _buffers[id(op)] = (op, view, _digest(view), call_at(desc, site))


def send_completed(op) -> None:
    """The request of ``op`` completed: its buffer must be as it was posted."""
    if not _buffers:
        return
    entry = _buffers.pop(id(op), None)
    if entry is None:
        return
    _, view, digest, call = entry
    if _digest(view) != digest:
        checks.record(checks.Finding(
            "buffer-in-use", f"the send buffer of {call.call} was written before the request completed; "
                             "MPI may send the old bytes, the new ones or a mix",
            "write the buffer only after Wait (or a true Test) completes the send", (call,)))


class RecvCheck:
    """What the checks keep of one receive: its datatype's signature, the
    user's call, and (for buffer-in-use) the digest of what the stand-in
    wrote into the user's buffer."""

    __slots__ = ("datatype", "call", "in_user_memory", "written")

    def __init__(self, datatype, call, in_user_memory: bool):
        self.datatype, self.call, self.written = datatype, call, None
        self.in_user_memory = in_user_memory  # False: a derived datatype's sink is a packed copy

    def stored(self, sink, nbytes: int) -> None:
        """The message's ``nbytes`` are in ``sink``."""
        if self.in_user_memory and watching("buffer-in-use"):
            self.written = (nbytes, _digest(sink[:nbytes]))

    def completed(self, sink) -> None:
        """The request completed: the bytes written must be unchanged."""
        if self.written is not None and _digest(sink[:self.written[0]]) != self.written[1]:
            checks.record(checks.Finding(
                "buffer-in-use", f"the receive buffer of {self.call.call} was written before the request "
                                 "completed; under MPI the message may overwrite the write, or the write the message",
                "use the receive buffer only after Wait (or a true Test) completes the receive", (self.call,)))
        self.written = None


def recv_check(spec, what: str) -> RecvCheck | None:
    """The checks' record of a receive into ``spec`` (None: no check on, a
    pickle, or not the user's call)."""
    if not ON:
        return None
    if spec is None or not (watching("type-mismatch") or watching("buffer-in-use")):
        return None
    site = user_site()
    if site is None:
        return None
    return RecvCheck(spec.datatype, call_at(what, site), spec.target is None)


# -- type signatures -------------------------------------------------------------------------
def signature(datatype, nbytes: int) -> list | None:
    """The type signature a buffer of ``nbytes`` packed bytes of ``datatype``
    carries, as ``[basic..., count]`` (one element's basic types by their
    numpy representation, and how many elements); None for bytes (MPI.BYTE,
    MPI.PACKED), which match anything."""
    if datatype is None or getattr(datatype, "_key", "") in ("BYTE", "PACKED"):
        return None
    found = _signatures.get(datatype._id)
    if found is None:
        found = _signatures[datatype._id] = _basics(datatype)
    basics, size = found
    if not basics or size == 0:
        return None
    return [*basics, nbytes // size]


_signatures: dict = {}  # a datatype's handle -> (its basic types, its size)


def _basics(datatype) -> tuple[list, int]:
    try:
        tm = datatype._typemap("Recv")
        from ._derived import BASIC

        return [_basic_name(BASIC[int(c)]) for c in tm.codes], tm.size
    except Exception:  # noqa: BLE001 - a datatype without a type map: nothing to compare
        return [], 0


def _basic_name(datatype) -> str:
    dtype = getattr(datatype, "_dtype", None)
    return dtype.str if dtype is not None else datatype._key


def signatures_differ(sent: list, received: list, nbytes: int) -> bool:
    """Whether the basic types of a message (``sent``) are not a prefix of
    the receive's, element by element (periodic sequences: compare one
    common period, at most the message's length)."""
    a, b = sent[:-1], received[:-1]
    if a == b:
        return False
    n = min(sent[-1] * len(a), _lcm(len(a), len(b)), 1 << 16)
    return any(a[i % len(a)] != b[i % len(b)] for i in range(n))


def _lcm(x: int, y: int) -> int:
    from math import gcd

    return x * y // gcd(x, y)


# -- what travels with a message ----------------------------------------------------------------
_send_spec = None  # the parsed buffer of the send being prepared (``note``)


def sending(spec) -> None:
    """The buffer of the send being prepared (its datatype goes in the note)."""
    if not ON:
        return
    global _send_spec
    if watching("type-mismatch"):
        _send_spec = spec


def note(what: str, nbytes: int) -> np.ndarray | None:
    """What a message carries for the checks (None when they are off): the
    sender's call and line, and its type signature."""
    if not ON:
        return None
    global _send_spec
    spec, _send_spec = _send_spec, None
    if not (watching("type-mismatch") or watching("unreceived")):
        return None
    site = user_site() or caller_site() or ("", 0)
    sig = signature(spec.datatype, nbytes) if spec is not None else None
    text = json.dumps({"call": what, "path": site[0], "line": site[1], "sig": sig})
    return np.frombuffer(text.encode(), np.uint8)


def _sender(env, sent: dict | None = None) -> checks.Call:
    sent = sent or json.loads(bytes(env.note))
    return checks.Call(env.world, sent["call"], sent["path"], sent["line"])


def matched(env, op) -> None:
    """A receive matched a message: report truncation and reinterpretation."""
    check = op.check
    if not watching("type-mismatch") or env.note is None or op.sink is None:
        return
    sent = json.loads(bytes(env.note))
    calls = (_sender(env, sent), check.call)
    if env.nbytes > op.sink.size:  # MPI raises ERR_TRUNCATE: a finding only if that ends the program
        _truncated.append(checks.Finding(
            "type-mismatch", f"a message of {env.nbytes} bytes was received into a buffer of {op.sink.size} bytes "
                             "(MPI.ERR_TRUNCATE)",
            "receive with a count (and datatype) that holds the whole message, or send less", calls))
        return
    mine = signature(check.datatype, env.nbytes)
    if sent["sig"] and mine and signatures_differ(sent["sig"], mine, env.nbytes):
        checks.record(checks.Finding(
            "type-mismatch", f"the message's datatype ({_types(sent['sig'])}) differs from the receive's "
                             f"({_types(mine)}): its bytes are reinterpreted",
            "receive with the datatype the message was sent with (or MPI.BYTE for raw bytes)", calls))


def _types(sig: list) -> str:
    names = {"<i4": "int32", "<i8": "int64", "<f4": "float32", "<f8": "float64", "<c16": "complex128",
             "<c8": "complex64", "|i1": "int8", "|u1": "uint8", "<i2": "int16"}
    return ", ".join(names.get(t, t) for t in sig[:-1][:4]) + (", ..." if len(sig) > 5 else "")


# -- the end of the rank's program ---------------------------------------------------------------
FIN_CTX = -(1 << 62)  # the context of the end marker each rank sends every other (``_drain``)


def at_end(rt) -> None:
    """The rank's program ends (MPI.Finalize, or the end of its script):
    report what is left, then forget it."""
    if not ON:
        return
    try:
        if watching("unreceived"):
            _report_unreceived(rt)
        else:
            rt.engine.progress()  # a receive whose message has arrived is not pending
        _report_requests()
        _handleleaks.report_held()
    finally:
        _forget()


def at_failure() -> None:
    """The rank's program failed: a truncation it did not handle was its error."""
    for finding in _truncated:
        checks.record(finding)
    _forget()


def _forget() -> None:
    global ON
    ON = False
    _handleleaks.forget()
    for books in (_requests, _buffers, _truncated, _signatures):
        books.clear()


#: How long a rank's end waits for the other ranks' end markers (seconds).
#: A peer that never ends (blocked for ever on this rank) must not hang the
#: end: after this the rank ends as it would without the check, and what
#: arrives later is not seen.
DRAIN_SECONDS = 5.0


def _drain(rt) -> bool:
    """Take every message sent to this rank: each rank sends every other an
    end marker after its last message and takes what arrives until it has
    everyone's (polling, for at most ``DRAIN_SECONDS``). False when a peer
    failed or the markers did not all come (then nothing is reported)."""
    engine, me, members = rt.engine, rt.me, rt.world.transport.members
    size = len(members)
    empty = np.empty(0, np.uint8)
    for dest in members:
        if dest != me:
            engine.send(dest, FIN_CTX, me, 0, empty, 0, False)
    deadline = time.monotonic() + DRAIN_SECONDS
    try:
        while True:
            engine.progress()
            if sum(1 for env in engine._unexpected if env.ctx == FIN_CTX) >= size - 1:
                return True
            if time.monotonic() > deadline or _a_peer_failed(rt.universe, me):
                return False
            time.sleep(0.002)
    except SimdistError:  # a peer failed: the run is ending anyway
        return False
    finally:
        engine._unexpected[:] = [env for env in engine._unexpected if env.ctx != FIN_CTX]


def _a_peer_failed(transport, me: int) -> bool:
    """Whether another rank of the run has failed (its markers will never come)."""
    return any(transport.failed(rank) for rank in range(transport.world_size) if rank != me)


def _report_unreceived(rt) -> None:
    if not _drain(rt):
        return
    me = rt.me
    for env in rt.engine._unexpected:
        if env.note is None:  # the stand-in's own messages (RMA, collectives), not the user's sends
            continue
        sender = _sender(env)
        checks.record(checks.Finding(
            "unreceived", f"a message of {env.nbytes} bytes from rank {env.world} to rank {me} "
                          f"(tag={env.tag}) was never received",
            "receive every message sent (or do not send it)", (sender,)))


def _report_requests() -> None:
    for op, request, call in list(_requests.values()):
        persistent = request is not None
        op = request._op if persistent else op
        if op is not None and not op.done:
            checks.record(checks.Finding(
                "finalize-pending", f"MPI.Finalize with the request of {call.call} still pending",
                "complete every request (Wait, Waitall) before MPI.Finalize", (call,)))
        else:
            what = "persistent request" if persistent else "request"
            checks.record(checks.Finding(
                "request-leak", f"the {what} of {call.call} was never "
                                f"{'freed' if persistent else 'completed (Wait, a true Test) or freed'}",
                "call Free on persistent requests when done" if persistent else
                "complete every request: Wait, Waitall or a Test that returns True", (call,)))


