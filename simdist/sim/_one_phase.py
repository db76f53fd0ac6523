"""The simulator's fast path: small collectives in one phase.

An allreduce (up to ``SMALL_REDUCTION``), broadcast, allgather,
reduce_scatter or alltoall whose message fits in half a slot is one phase:
each member writes its part, meets the others (``PhaseProtocol._meet``:
sign, arrive, see each member's signature) and reads. Once its (dtype,
shape, op or root) has been seen, its checks and lookups are skipped: the
public method finds the call's *plan* in a dict and goes straight to
``_exchange`` or ``_small_broadcast``.

A message of at most the layout's ``inline_bytes`` travels in the context's
banks, which need no ``done`` (see ``_arena``); a larger one in the half
slots. Every rank decides where from the dtype and shape alone, so all
ranks agree. A plan is the tuple (static signature, views per bank, stacked
views per bank, fold by rows, inline, ufunc, divisor).

``OnePhaseCalls`` is a mixin of ``SimComm``, over ``PhaseProtocol``'s steps.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .._arguments import DTYPE_CODE, DTYPES, MAX_DIMS
from .._reduction import fold_new, fold_rows
from .. import _signature as sig
from ._phases import CACHE_LIMIT, STATIC_ROOT

#: From this many ranks on, a small fold is one numpy call (fold_rows)...
FOLD_ROWS_FROM = 6
#: ...when each part has at most this many elements per rank: its cost grows
#: with the elements, one call per part's does not (16 rows of 512 float32:
#: 23 us against 5.5; of 32: 2.5 against 4.3).
FOLD_ROWS_PER_RANK = 4
#: A plan's fields from this index on: fold by rows, inline, ufunc, divisor.
PLAN_BY_ROWS = 3
#: The head of each of its rows, a cache line: the block's length, the
#: sender's longest block, and a word that a compiled call streaming its
#: blocks sets (see ``_compiled.c``'s ``stream``), which the Python path clears.
SIZED_HEAD = 64

_REDUCE_SCATTER, _ALLTOALL = sig.KIND_CODE["reduce_scatter"], sig.KIND_CODE["alltoall"]
_BYTE = np.dtype(np.uint8)


@functools.lru_cache(maxsize=256)
def _part_offsets(lay, members: tuple, ctx: int) -> tuple:
    """Per bank, where each member's part of a one-phase call lies: in its
    context entry's bank, and in the half of its slot that the bank names;
    kept for the communicators a context and its members make again, never
    changed in place."""
    half = lay.slot_bytes // 2
    slots = [lay.slot_offset(m) for m in members]
    return ([[lay.inline_offset(m, ctx, bank) for m in members] for bank in (0, 1)],
            [[off + bank * half for off in slots] for bank in (0, 1)])


class OnePhaseCalls:
    """The one-phase calls of a communicator and their cached plans."""

    def _init_one_phase(self, lay, members: list[int], ctx: int, kept) -> None:
        """Where each member's part of a one-phase call lies, per bank:
        in its context entry's bank (``_inline_off``), or in the half of
        its slot that the bank names (``_half_off``); the plans and views
        ``kept`` (``_phases.KeptViews``) for the context and members."""
        self._inline_bytes = lay.inline_bytes
        # One-phase calls too large for a bank use half of each slot, the
        # half of their bank: see _release.
        self._half_bytes = lay.slot_bytes // 2
        self._inline_off, self._half_off = _part_offsets(lay, tuple(members), ctx)
        self._kept = kept
        self._plans, self._root_arrays, self._row_views = kept.plans, kept.root_arrays, kept.row_views
        self._sized = kept.sized  # _sized_plan

    def _placement(self, nbytes: int):
        """Where a one-phase call of ``nbytes`` per rank puts each member's
        part: (in the banks?, offsets per bank and member). The caller has
        checked that it fits in half a slot."""
        inline = nbytes <= self._inline_bytes
        return inline, self._inline_off if inline else self._half_off

    def _plan(self, key, op, root, ufunc=None, divisor=None):
        """The plan of a call by its key: (kind, dtype, shape, op or root)."""
        if len(self._plans) >= CACHE_LIMIT:
            self._plans.clear()
        kind, dtype, shape = key[:3]
        static = (kind, op, root, DTYPE_CODE[dtype], len(shape), *shape)
        size = math.prod(shape)
        inline, offsets = self._placement(size * dtype.itemsize)
        mm = self._arena.mm
        banks = tuple([np.ndarray(shape, dtype, mm, off) for off in offs] for offs in offsets)
        every = tuple(self._stacked(offs, dtype, shape) for offs in offsets)
        part = size // self._size if kind == _REDUCE_SCATTER else size
        by_rows = self._size >= FOLD_ROWS_FROM and part <= FOLD_ROWS_PER_RANK * self._size
        plan = self._plans[key] = (static, banks, every, by_rows, inline, ufunc, divisor)
        return plan

    def _stacked(self, offsets: list[int], dtype: np.dtype, shape: tuple) -> np.ndarray | None:
        """One strided view of an array at each of ``offsets`` (one per
        member, in rank order), or None unless they are evenly spaced and
        the view's extra axis fits in numpy's dimensions."""
        stride = offsets[1] - offsets[0] if len(offsets) > 1 else 1
        if len(shape) >= MAX_DIMS or stride <= 0 or any(b - a != stride for a, b in zip(offsets, offsets[1:])):
            return None
        item = np.empty(shape, dtype)
        return np.ndarray((len(offsets), *shape), dtype, self._arena.mm, offsets[0], (stride, *item.strides))

    def _small_broadcast(self, x, plan):
        static, banks, _, _, inline, _, _ = plan
        root = static[STATIC_ROOT]
        bank = (self._epoch + 1) & 1
        if not inline and self._rank == root:
            self._release(bank)
        views = banks[bank]
        try:
            if self._rank == root:
                views[root][...] = x
            self._meet(static)
            out = views[root].copy()
            if not inline:
                self._done(bank)
            return out
        finally:
            self._end()

    def _exchange(self, x, plan, read):
        """A one-phase allreduce, allgather, reduce_scatter or alltoall: publish
        ``x`` in this rank's bank or half slot (as the plan says), meet the
        others, return ``read(views, rows, plan)`` of the members' views and
        their stacked view (or None), and store ``done`` if it read slots."""
        static, banks, every, _, inline = plan[:5]
        bank = (self._epoch + 1) & 1
        if not inline:
            self._release(bank)
        views = banks[bank]
        try:
            views[self._rank][...] = x  # same dtype and shape (the plan)
            self._meet(static)
            out = read(views, every[bank], plan)
            if not inline:
                self._done(bank)
            return out
        finally:
            self._end()

    def _exchange_sized(self, sizes, pack, unpack, expected, rows, own=None):
        """``SimComm.alltoall_sized``'s meeting: each row of this rank's half
        slot is headed by its block's length and this rank's longest block,
        then holds the block if every block of this rank fits. Returns what
        each member sent this rank, the longest block of all members, the
        bytes a row holds, and whether ``rows`` moved every block (its own
        too); unpacks if every block fits and what came is ``expected``,
        after ``own()`` where rows do not move the blocks."""
        plan, room, width, my_heads, their_heads, their_rows = self._sized or self._sized_plan()
        bank = (self._epoch + 1) & 1
        if not plan[4]:
            self._release(bank)
        me, q = self._rank, self._arena.q
        longest = max(sizes)
        whole = rows is not None and their_rows is not None and longest <= room
        try:
            word, step = my_heads[bank], width // 8
            for n in sizes:  # the heads as words of the arena: no numpy call per word
                q[word] = n
                q[word + 1] = longest
                q[word + 2] = 0
                word += step
            if whole:
                self._row_view(rows[0], bank, True)[...] = rows[0]  # a setitem: cheaper than np.copyto's dispatch
            elif longest <= room:
                mine = plan[1][bank][me]
                for j, n in enumerate(sizes):
                    if n:
                        pack(j, 0, mine[j, SIZED_HEAD:SIZED_HEAD + n])
            self._meet(plan[0])
            heads = their_heads[bank]
            got = [q[word] for word in heads]
            longest = max([q[word + 1] for word in heads])
            whole = whole and longest <= room
            if got == expected:
                if whole:
                    rows[1][...] = self._row_view(rows[1], bank, False)
                else:
                    if own is not None:  # first: at 2 ranks it measured faster than after the others
                        own()
                    if longest <= room:
                        views = plan[1][bank]
                        for j, n in enumerate(got):
                            if n:
                                unpack(j, 0, views[j][me, SIZED_HEAD:SIZED_HEAD + n])
            if not plan[4]:
                self._done(bank)
            return got, longest, room, whole
        finally:
            self._end()

    def _row_view(self, rows: np.ndarray, bank: int, mine: bool) -> np.ndarray:
        """Where ``rows`` (row ``j``: the block to or from member ``j``) lie
        packed in the arena in ``bank``: this rank's rows (``mine``), or each
        member's row for this rank. Kept by bank, side, dtype and shape."""
        key = (bank, mine, rows.dtype, rows.shape)
        view = self._row_views.get(key)
        if view is None:
            if len(self._row_views) >= CACHE_LIMIT:
                self._row_views.clear()
            _, _, width, my_heads, their_heads, their_rows = self._sized
            offset = (my_heads[bank] if mine else their_heads[bank][0]) * 8 + SIZED_HEAD
            packed = np.empty(rows.shape[1:], rows.dtype).strides
            view = np.ndarray(rows.shape, rows.dtype, self._arena.mm, offset, (width if mine else their_rows, *packed))
            self._row_views[key] = view
        return view

    def _sized_plan(self):
        """``_exchange_sized``'s plan: a row of half a slot's share per member
        (an alltoall's of bytes, signed with ``_signature.SIZED_ROOT``, as
        its rows hold heads), the bytes a row holds after its head, a row's
        bytes, per bank the word of this rank's first head and of the head
        of each member's row for this rank (a head: two words, the length
        and the sender's longest), and the bytes from one member's row for
        this rank to the next where they step evenly (else None)."""
        width = self._half_bytes // self._size & ~(SIZED_HEAD - 1)
        plan = self._plan((_ALLTOALL, _BYTE, (self._size, width), sig.SIZED_ROOT), 0, sig.SIZED_ROOT)
        me, offsets = self._rank, self._half_off[0]
        mine = [offs[me] // 8 for offs in self._half_off]
        theirs = [[(off + me * width) // 8 for off in offs] for offs in self._half_off]
        step = offsets[1] - offsets[0] if len(offsets) > 1 else width
        even = all(b - a == step for a, b in zip(offsets, offsets[1:]))
        self._sized = self._kept.sized = (plan, width - SIZED_HEAD, width, mine, theirs, step if even else None)
        return self._sized

    # -- what each call reads --------------------------------------------------
    def _stack_all(self, views, rows, plan):
        return rows.copy() if rows is not None else np.stack(views)

    def _fold_all(self, views, rows, plan):
        by_rows, _, ufunc, divisor = plan[PLAN_BY_ROWS:]
        if by_rows and rows is not None:
            return fold_rows(ufunc, rows, divisor)
        return fold_new(ufunc, views, divisor)

    # In reduce_scatter and alltoall rank r reads block r of every member's
    # bank or half slot.
    def _fold_mine(self, views, rows, plan):
        by_rows, _, ufunc, divisor = plan[PLAN_BY_ROWS:]
        me = self._rank
        if by_rows and rows is not None:
            return fold_rows(ufunc, rows[:, me], divisor)
        return fold_new(ufunc, [v[me, ...] for v in views], divisor)

    def _take_mine(self, views, rows, plan):
        me = self._rank
        return rows[:, me].copy() if rows is not None else np.stack([v[me] for v in views])

    # -- a broadcast where this rank passed None -----------------------------------
    def _root_array(self, root: int):
        """For a broadcast where this rank passed None: the root's dtype and
        shape, the view of its array where its plan put it (in the bank or
        half slot of this call's bank; None if larger than half a slot), and
        whether that is the bank. Cached by bank, root, and the root's dtype
        code and shape (read from its row, after ``_check`` passed)."""
        words = self._root_words(root).tolist()  # dtype code, ndim, shape
        bank = self._bank
        key = (bank, root, *words)
        found = self._root_arrays.get(key)
        if found is None:
            if len(self._root_arrays) > CACHE_LIMIT:
                self._root_arrays.clear()
            dtype, shape = DTYPES[words[0] - 1], tuple(words[2:])
            nbytes = math.prod(shape) * dtype.itemsize
            inline, planned = nbytes <= self._inline_bytes, None
            if nbytes <= self._half_bytes:
                inline, offsets = self._placement(nbytes)
                planned = np.ndarray(shape, dtype, self._arena.mm, offsets[bank][root])
            found = self._root_arrays[key] = (dtype, shape, planned, inline)
        return found
