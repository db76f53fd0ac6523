"""A repeated sized alltoall, compiled.

A parallel FFT calls the same small transposes thousands of times; in
Python each call passes some ten layers (the error handler's guard, the
progress step, the count, the parse of both buffers, the exchange), each
a microsecond or two, where Open MPI's whole call takes three. So once a
call of ``alltoall_sized`` has moved every block in its row (the small
case: ``_one_phase._exchange_sized`` with ``rows``), the caller may ask
for a ``Repeated`` (``_compiled.c``) of it: an object that, called with
later calls' arguments, checks that they are the same in every respect
the call read (the template of the arguments, the buffers' layouts, the
datatypes' handles), and that nothing in the rank's state asks for the
Python path (a message in flight or waiting, the communicator closed, a
signature other than this exchange's in the bank), and then does the
whole call in C, word for word as the Python path does it. It answers
False, having changed nothing, otherwise.

Every wait longer than the arena's spin, a sleeping peer to wake and a
signature that differs call back the same Python methods, so reports,
hang watch and mismatches see no difference. The compiled module is
optional: without a C compiler at install time, or with
``SIMDIST_COMPILED=0``, every call takes the Python path.
"""

from __future__ import annotations

import os

import numpy as np

from .. import _signature as sig
from ._arena import YIELD_NS
from ._layout import CALL, USER
from ._phases import STATIC_NDIM

try:
    from . import _compiled
except ImportError:  # pragma: no cover - installed without a C compiler
    _compiled = None

#: At most this many dimensions in a buffer or its rows, leaves in an argument.
MAX_DIMS, MAX_LEAVES, MAX_MEMBERS = 32, 96, 64


def available() -> bool:
    """Whether the compiled path is built and not turned off (``SIMDIST_COMPILED=0``)."""
    return _compiled is not None and os.environ.get("SIMDIST_COMPILED", "1") != "0"


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _bounds(a: np.ndarray) -> tuple[int, int]:
    """The first and one past the last byte of ``a`` (not empty)."""
    lo = hi = _address(a)
    for n, step in zip(a.shape, a.strides):
        lo, hi = lo + min(0, (n - 1) * step), hi + max(0, (n - 1) * step)
    return lo, hi + a.itemsize


def _loops(shape, user_strides, arena_strides, itemsize: int) -> tuple[list, list, list, int]:
    """The loops of a copy between two strided views of one shape: the
    innermost dimensions that are one run of bytes on both sides merge
    into the run."""
    shape, user, arena, run = list(shape), list(user_strides), list(arena_strides), itemsize
    while shape and user[-1] == run and arena[-1] == run:
        run *= shape.pop()
        user.pop()
        arena.pop()
    return shape, user, arena, run


def _side(leaves: list, buf: np.ndarray, rows: np.ndarray, arena_rows: list[np.ndarray], base: int,
          writable: bool, type_maps: dict) -> dict | None:
    """One buffer's part of a ``Repeated``: the argument's template, the
    buffer's layout, where its rows lie from its data pointer and in the
    arena (per bank), and the loops that copy them."""
    if not rows.size or not buf.size:
        return None
    (lo, hi), (row_lo, row_hi) = _bounds(buf), _bounds(rows)
    if not lo <= row_lo <= row_hi <= hi or buf.ndim > MAX_DIMS or rows.ndim > MAX_DIMS:
        return None  # rows outside the buffer: over a copy of it
    shape, user, arena, run = _loops(rows.shape, rows.strides, arena_rows[0].strides, rows.itemsize)
    if arena_rows[1].strides != arena_rows[0].strides:
        return None
    return {**_buffer(leaves, buf, writable, type_maps), "offset": _address(rows) - _address(buf), "run": run,
            "loops": shape, "user_steps": user, "arena_steps": arena,
            "arena_offset": [_address(a) - base for a in arena_rows]}


def _buffer(leaves: list, buf: np.ndarray, writable: bool, type_maps: dict) -> dict:
    """What either kind of side holds of its argument: the template, where
    its datatype keys are looked up, and the buffer's layout."""
    view = memoryview(buf)
    return {"leaves": leaves, "type_maps": type_maps, "array_type": np.ndarray, "format": view.format,
            "shape": list(view.shape), "strides": list(view.strides), "itemsize": view.itemsize,
            "writable": int(writable)}


def _compilable(sc, sizes: list[int]) -> bool:
    """Whether a call of ``sc``'s sized alltoall of ``sizes`` may be compiled at all."""
    return available() and sc._sized is not None and len(sizes) <= MAX_MEMBERS


def repeated(sc, transport, caller: dict, sizes: list[int], expected: list[int], sides: tuple, type_maps: dict):
    """A ``Repeated`` of ``sc``'s sized alltoall of ``sizes`` (this rank's
    blocks) and ``expected`` (the blocks it receives), each moved through
    its row; or None where the compiled path cannot do that call.

    ``sides`` is, for the send and the receive buffer, (the argument's
    template leaves, the buffer, its rows); ``transport`` the one whose
    mail the caller's progress step looks at; ``caller`` the rest of the
    caller's state the call reads and counts: ``st`` (whose ``coll_seq``
    it counts), ``engine`` and ``flight_names`` (the engine's attributes
    that are all empty when no message is in flight); ``type_maps`` the
    derived datatypes' maps by handle, where the leaves' datatype keys are
    looked up."""
    if not _compilable(sc, sizes):
        return None
    plan, room, width, my_heads, their_heads, their_rows = sc._sized
    if their_rows is None or max(sizes) > room:
        return None
    base = _address(np.frombuffer(sc._arena.q, np.int64, count=1))
    made = []
    for (leaves, buf, rows), mine in zip(sides, (True, False)):
        views = [sc._row_view(rows, bank, mine) for bank in (0, 1)]
        made.append(_side(leaves, buf, rows, views, base, not mine, type_maps))
    return _made(sc, transport, caller, sizes, expected, made, max(sizes), None)


#: A streamed call's fragments: at most this many bytes, and at most this
#: many in a ring (``_compiled.c``'s ``stream``; 64 KiB in rings of 4 to 8
#: measured fastest at 2 and 4 ranks for blocks of 256 KiB to 8 MiB).
FRAGMENT, DEPTH = 64 << 10, 8
#: Where a streamed row's ring starts, in bytes from its head (three cache lines).
RING_AT = 192
#: The word of a row's head that counts what a streamed call's peers published for its member.
EVENTS = 3
#: At most this many runs of memory in a streamed side's blocks.
MAX_RUNS = 1 << 16


def _ring(width: int) -> tuple[int, int] | None:
    """A streamed row's fragment size and ring depth (the same on every
    member: rows are as wide everywhere), or None if too narrow."""
    room = width - RING_AT
    frag = min(FRAGMENT, room // 2 & ~63)
    return None if frag < 4096 else (frag, min(DEPTH, room // frag))


def _runs_side(leaves: list, buf: np.ndarray, blocks: list, writable: bool, type_maps: dict) -> dict | None:
    """One buffer's part of a streamed ``Repeated``: the argument's template,
    the buffer's layout and each block's runs of memory, as (offset from
    the buffer's data pointer, length) pairs; None where a run lies
    outside the buffer (a parse over a copy of it) or there are too many."""
    if buf.ndim > MAX_DIMS or sum(len(b) for b in blocks) > MAX_RUNS:
        return None
    address = _address(buf)
    lo, hi = _bounds(buf) if buf.size else (address, address)
    runs, first = [], [0]
    for block in blocks:
        if len(block):
            if block[:, 0].min() < lo - address or (block[:, 0] + block[:, 1]).max() > hi - address:
                return None
            runs.extend(block.reshape(-1).tolist())
        first.append(len(runs) // 2)
    return {**_buffer(leaves, buf, writable, type_maps), "runs": runs, "first": first}


def streamed(sc, transport, caller: dict, sizes: list[int], expected: list[int], sides: tuple, type_maps: dict):
    """A streamed ``Repeated`` (``_compiled.c``'s ``stream``) of a sized
    alltoall whose blocks are longer than rows: as ``repeated``, but each
    of ``sides`` is (the template leaves, the buffer, per block its runs of
    memory as an int64 array of (offset from the buffer's data pointer,
    length) rows). None where the compiled path cannot do it."""
    if not _compilable(sc, sizes):
        return None
    plan, room, width, my_heads, their_heads, their_rows = sc._sized
    ring = _ring(width)
    if ring is None:
        return None
    made = [_runs_side(leaves, buf, blocks, not mine, type_maps)
            for (leaves, buf, blocks), mine in zip(sides, (True, False))]
    return _made(sc, transport, caller, sizes, expected, made, max(*sizes, room + 1), ring)


def _made(sc, transport, caller, sizes, expected, sides, longest: int, ring):
    """The ``Repeated`` of both ``sides`` (None if either is), with the words
    of ``sc`` it reads and writes; ``longest`` goes in its heads; ``ring``
    is a streamed call's (fragment, depth), else None."""
    plan, room, width, my_heads, their_heads, their_rows = sc._sized
    static, inline = plan[0], plan[4]
    span = transport._mail.ring_span(tuple(transport.members))
    if span is None or None in sides or any(len(s["leaves"]) > MAX_LEAVES for s in sides):
        return None
    bank = sc._bank
    if ring is None and sc._last_static[bank] is not static:  # a streamed call signs its bank where it must
        return None
    arena = sc._arena
    head, tail, step, n = span
    frag, depth = ring or (0, 0)
    # each member's EVENTS word (``_compiled.c``): in the head of its row for itself
    events = [[(off + i * width) // 8 + EVENTS for i, off in enumerate(offs)] for offs in sc._half_off]
    words = {
        "sizes": list(sizes), "expected": list(expected), "longest": longest, "room": room,
        "inline": int(bool(inline)), "spin": arena.spin_iters,
        "polls": transport._mail.polls_word, "ring_head": head, "ring_tail": tail, "ring_step": step, "ring_n": n,
        "seq_word": sc._seq_word, "call_epoch": sc._my_call_epoch, "ctx_word": sc._ctx_word,
        "state_word": sc._state, "arrive": sc._my_arrive, "done": sc._my_done, "progress": sc._progress,
        "sleepers": list(sc._sleeper_words), "my_sig": [off // 8 for off in sc._my_sig],
        "sig_words": sig.packer(max(static[STATIC_NDIM], 0)).size // 8, "my_heads": my_heads, "head_step": width // 8,
        "ctx": sc._ctx, "call_state": CALL, "user_state": USER,
        "peer_call_epoch_0": sc._peer_call_epoch[0], "peer_call_epoch_1": sc._peer_call_epoch[1],
        "peer_sig_0": [off // 8 for off in sc._peer_sig[0]], "peer_sig_1": [off // 8 for off in sc._peer_sig[1]],
        "their_heads_0": their_heads[0], "their_heads_1": their_heads[1], "peers": sc._peers,
        "streamed": int(ring is not None), "me": sc._rank, "frag": frag, "depth": depth, "yield_ns": YIELD_NS,
        "events_0": events[0], "events_1": events[1],
        "members": list(sc._members),
        "sc": sc, "arena": arena, "q": arena.q, "pending": arena.pending_release, "last_static": sc._last_static,
        "static": static, "peer_done": sc._peer_done, "peer_arrive": sc._peer_arrive, "mail": transport._mail,
        **caller,
    }
    return _compiled.Repeated(sides[0], sides[1], words)
