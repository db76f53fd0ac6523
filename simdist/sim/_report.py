"""Where is each rank? Read from the arena, for timeouts and mismatch messages.

Used by the driver (which maps the arena too) and by a rank that notices a
peer has returned while it waits for it. The sentences are both backends'
(``simdist._whereabouts``); this module reads what they say from the arena.
"""

from __future__ import annotations

from .. import _signature as sig
from .. import _whereabouts
from ._layout import (
    CALL, FAILED, IDLE, RETURNED, S_CTX, S_P2P_KIND, S_P2P_NBYTES, S_P2P_PEER, S_P2P_SEQ, S_P2P_TAG,
    S_PROGRESS, S_STATE, S_WAITING_FOR, USER,
)

P2P_CTX = -1
P2P_KINDS = {1: "send", 2: "recv", 3: "probe"}
#: In the S_P2P_NBYTES word of a probe: it is from any rank (the peer word
#: then holds the probing rank itself; see ``_arena``).
P2P_ANY_SOURCE = 1


def comm_name(ctx: int) -> str:
    return "the world" if ctx == 0 else f"a sub-communicator (context {ctx})"


def current_call(arena, rank: int) -> str:
    """The call ``rank`` is in, e.g. ``allreduce #3 (float32 (4,), op=sum) on the world``."""
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
        elif kind == "probe" and q[lay.status_word(rank, S_P2P_NBYTES)] & P2P_ANY_SOURCE:
            peer = "any rank"
        return f"{kind} #{q[lay.status_word(rank, S_P2P_SEQ)]} {direction} {peer} ({detail})"
    # The current call's bank holds the larger call epoch: epochs only grow.
    bank = int(q[lay.call_epoch_word(rank, ctx, 1)] > q[lay.call_epoch_word(rank, ctx, 0)])
    row = sig.read(arena.buf, lay.sig_offset(rank, ctx, bank))
    return f"{sig.describe(row)} on {comm_name(ctx)}"


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
    peer = q[lay.status_word(rank, S_WAITING_FOR)] - 1
    return _whereabouts.describe(_whereabouts.CALL, calls, current_call(arena, rank), waited,
                                 peer if peer >= 0 else None)
