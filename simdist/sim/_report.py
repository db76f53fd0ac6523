"""Where is each rank? Read from the arena, for timeouts and mismatch messages.

Used by the driver (which maps the arena too) and by a rank that notices a
peer has returned while it waits for it. The sentences are both backends'
(``simdist._whereabouts``); this module reads what they say from the arena.

A rank that sleeps in a wait records where the user's code made the call
(``user_call_site``: the innermost frame outside simdist and the mpi4py
stand-in, as ``file.py:line``), so reports name the line, not the library.
"""

from __future__ import annotations

import os
import sys

from .. import _signature as sig
from .. import _whereabouts
from ._layout import (
    CALL, FAILED, IDLE, MPI_ANY_PEER, MPI_CALL_BYTES, RETURNED, S_CTX, S_MPI_PEER, S_P2P_KIND, S_P2P_NBYTES, S_P2P_PEER, S_P2P_SEQ, S_P2P_TAG,
    S_PROGRESS, S_SITE_FOR, S_STATE, S_WAITING_FOR, SITE_BYTES, USER,
)

P2P_CTX = -1
P2P_KINDS = {1: "send", 2: "recv", 3: "probe", 4: "send"}  # 4: a synchronous send
SSEND = 4

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Frames in these folders are the library's, not the user's.
_LIBRARY_DIRS = (_PACKAGE + os.sep, os.path.join(os.path.dirname(_PACKAGE), "fake_backends", "mpi4py") + os.sep)


def _library_dirs() -> tuple[str, ...]:
    """simdist's and the stand-in's folders, and torch's once it is imported
    (a ``dist.*`` call's site is the line that called torch)."""
    torch = sys.modules.get("torch")
    if torch is None or not getattr(torch, "__file__", None):
        return _LIBRARY_DIRS
    return (*_LIBRARY_DIRS, os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)


def user_call_site(full: bool = False) -> str:
    """``file.py:line`` of the innermost frame of the caller's stack that is
    not simdist's, the mpi4py stand-in's or torch's ("" if there is none);
    with ``full``, the file's absolute path."""
    frame = sys._getframe(1)
    libraries = _library_dirs()
    while frame is not None and frame.f_code.co_filename.startswith(libraries):
        frame = frame.f_back
    if frame is None:
        return ""
    path = frame.f_code.co_filename
    return f"{os.path.abspath(path) if full else os.path.basename(path)}:{frame.f_lineno}"


_NAME_BYTES = 96  # of a communicator's name in the site text


def record_site(arena) -> None:
    """Write where the user's code made this rank's current call (see
    ``S_SITE``), once per call, and the name its program gave the call's
    communicator, if any (``Arena.names``), after a newline."""
    q, lay, me = arena.q, arena.layout, arena.rank
    calls = q[lay.status_word(me, S_PROGRESS)] + 1
    if q[lay.status_word(me, S_SITE_FOR)] == calls:
        return
    name = arena.names.get(q[lay.status_word(me, S_CTX)])
    name = b"" if name is None else b"\n" + name.encode("utf-8", "replace")[:_NAME_BYTES]
    text = user_call_site(full=True).encode("utf-8", "replace")
    if len(text) + len(name) >= SITE_BYTES:
        text = user_call_site().encode("utf-8", "replace")[: SITE_BYTES - 1 - len(name)]
    at = lay.site_offset(me)
    arena.buf[at : at + SITE_BYTES] = (text + name).ljust(SITE_BYTES, b"\0")
    q[lay.status_word(me, S_SITE_FOR)] = calls


def _site_text(arena, rank: int) -> tuple[str, str] | None:
    """``rank``'s current call's site and its communicator's name ("" if
    unnamed), if it has slept in the call; else None."""
    lay, q = arena.layout, arena.q
    if q[lay.status_word(rank, S_STATE)] != CALL:
        return None
    if q[lay.status_word(rank, S_SITE_FOR)] != q[lay.status_word(rank, S_PROGRESS)] + 1:
        return None
    at = lay.site_offset(rank)
    site, _, name = bytes(arena.buf[at : at + SITE_BYTES]).rstrip(b"\0").decode("utf-8", "replace").partition("\n")
    return site, name


def call_location(arena, rank: int) -> tuple[str, int] | None:
    """The file (absolute path when it fitted) and line of ``rank``'s current
    call, if it has slept in it; else None."""
    text = _site_text(arena, rank)
    path, _, line = text[0].rpartition(":") if text else ("", "", "")
    return (path, int(line)) if path and line.isdigit() else None


def call_site(arena, rank: int) -> str:
    """Where ``rank``'s current call was made (``ring.py:12``), if it has
    slept in it; else ""."""
    location = call_location(arena, rank)
    return f"{os.path.basename(location[0])}:{location[1]}" if location else ""
#: In the S_P2P_NBYTES word of a probe: it is from any rank (the peer word
#: then holds the probing rank itself; see ``_arena``).
P2P_ANY_SOURCE = 1


def comm_name(ctx: int, names: dict | None = None) -> str:
    """How reports name context ``ctx``: the name the program gave it (``names``), if any."""
    if names and ctx in names:
        return names[ctx]
    return "the world" if ctx == 0 else f"a sub-communicator (context {ctx})"


def mpi_call(arena, rank: int) -> tuple[str, int | None] | None:
    """The MPI call ``rank`` stated it waits in (``Transport.waiting_in``)
    and the world rank it waits for (None: any rank), while it is in a
    transport call; else None."""
    lay, q = arena.layout, arena.q
    peer = q[lay.status_word(rank, S_MPI_PEER)]
    if not peer or q[lay.status_word(rank, S_STATE)] != CALL or q[lay.status_word(rank, S_CTX)] != P2P_CTX:
        return None
    at = lay.mpi_call_offset(rank)
    text = bytes(arena.buf[at : at + MPI_CALL_BYTES]).rstrip(b"\0").decode("utf-8", "replace")
    return text, (None if peer == MPI_ANY_PEER else peer - 1)


def waits_for(arena, rank: int) -> int | None:
    """The world rank ``rank`` waits for: the MPI call's peer if it stated
    one, else the transport's (None: any rank, or none)."""
    stated = mpi_call(arena, rank)
    if stated is not None:
        return stated[1]
    peer = arena.q[arena.layout.status_word(rank, S_WAITING_FOR)] - 1
    return peer if peer >= 0 else None


def current_call(arena, rank: int) -> str:
    """The call ``rank`` is in, e.g. ``allreduce #3 (float32 (4,), op=sum) on the world``,
    or the MPI call it stated (``Recv(source=1, tag=0)``)."""
    stated = mpi_call(arena, rank)
    if stated is not None:
        return stated[0]
    return _simulator_call(arena, rank)


def _simulator_call(arena, rank: int) -> str:
    lay = arena.layout
    q = arena.q
    ctx = q[lay.status_word(rank, S_CTX)]
    if ctx == P2P_CTX:
        kind = P2P_KINDS.get(q[lay.status_word(rank, S_P2P_KIND)], "p2p")
        peer = f"rank {q[lay.status_word(rank, S_P2P_PEER)]}"
        direction = "to" if kind == "send" else "from"
        tag = q[lay.status_word(rank, S_P2P_TAG)]
        detail = f"tag={'any' if tag < 0 else tag}"
        if kind == "send":
            detail += f", {q[lay.status_word(rank, S_P2P_NBYTES)]} bytes"
            if q[lay.status_word(rank, S_P2P_KIND)] == SSEND:
                detail += ", synchronous"
        elif kind == "probe" and q[lay.status_word(rank, S_P2P_NBYTES)] & P2P_ANY_SOURCE:
            peer = "any rank"
        return f"{kind} #{q[lay.status_word(rank, S_P2P_SEQ)]} {direction} {peer} ({detail})"
    # The current call's bank holds the larger call epoch: epochs only grow.
    bank = int(q[lay.call_epoch_word(rank, ctx, 1)] > q[lay.call_epoch_word(rank, ctx, 0)])
    row = sig.read(arena.buf, lay.sig_offset(rank, ctx, bank))
    text = _site_text(arena, rank)
    name = text[1] if text and text[1] else comm_name(ctx, arena.names)
    return f"{sig.describe(row, name)} on {name}"


#: The arena's state words, by the names of the shared sentences.
_STATES = {USER: _whereabouts.USER, CALL: _whereabouts.CALL, RETURNED: _whereabouts.RETURNED,
           FAILED: _whereabouts.FAILED, IDLE: _whereabouts.IDLE}


def whereabouts(arena, rank: int, waited: float | None = None) -> str:
    """One line saying what ``rank`` is doing."""
    q = arena.q
    lay = arena.layout
    state = q[lay.status_word(rank, S_STATE)]
    calls = q[lay.status_word(rank, S_PROGRESS)]
    if state != CALL:
        return _whereabouts.describe(_STATES.get(state, state), calls)
    call = current_call(arena, rank)
    site = call_site(arena, rank)
    if site:
        call += f" at {site}"
    return _whereabouts.describe(_whereabouts.CALL, calls, call, waited, waits_for(arena, rank))


def short_call(arena, rank: int) -> str:
    """``rank``'s current call as a link of a wait-for cycle, e.g.
    ``Recv(source=1, tag=0) at ring.py:12`` as an engine over the transport
    stated it, or ``send(dest=1, tag=0) at ring.py:12`` (peers are world ranks)."""
    lay, q = arena.layout, arena.q
    stated = mpi_call(arena, rank)
    if stated is not None:
        text = stated[0]
    elif q[lay.status_word(rank, S_CTX)] == P2P_CTX:
        kind = P2P_KINDS.get(q[lay.status_word(rank, S_P2P_KIND)], "p2p")
        peer = q[lay.status_word(rank, S_P2P_PEER)]
        any_source = kind == "probe" and q[lay.status_word(rank, S_P2P_NBYTES)] & P2P_ANY_SOURCE
        tag = q[lay.status_word(rank, S_P2P_TAG)]
        text = (f"{kind}({'dest' if kind == 'send' else 'source'}={'any' if any_source else peer}, "
                f"tag={'any' if tag < 0 else tag})")
    else:
        text = current_call(arena, rank)
    site = call_site(arena, rank)
    return f"{text} at {site}" if site else text
