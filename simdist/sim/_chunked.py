"""The simulator's collective algorithms over the members' slots.

A call that does not take the one-phase path (``_one_phase``) moves its
data through the slots, one phase per chunk: messages larger than a slot
are cut into chunks, so a collective of any size fits in a bounded arena.
Each chunk is written into the writer's slot, the members arrive, read what
they need, and store ``done`` (``PhaseProtocol``'s steps); the first chunk's
phase also checks the signatures.

Reductions use the canonical fold of ``simdist._reduction``. Small messages
are folded by every rank on its own; larger ones are folded in parallel,
each rank folding one slice of the elements over all ranks and the others
copying that slice from its slot. Both give the bits of the fold. A named
order (``simdist._orders``) gathers the whole inputs instead.

``ChunkedCalls`` is a mixin of ``SimComm``; each ``_*_phases`` method is a
whole call, from signing to ``_end``.
"""

from __future__ import annotations

import numpy as np

from .._arguments import DTYPE_CODE, DTYPES, OP_CODE
from .._errors import InvalidValue
from .._orders import in_order
from .._reduction import fold, fold_in_blocks
from .. import _signature as sig
from ._phases import CACHE_LIMIT

#: Reductions of at most this many bytes are folded by every rank on its own.
SMALL_REDUCTION = 64 << 10
#: Above N = 2, a parallel fold's slice up to this size is copied out with the others'.
SMALL_SLICE = 128 << 10

_REDUCE_SCATTER, _ALLTOALL = sig.KIND_CODE["reduce_scatter"], sig.KIND_CODE["alltoall"]
_BROADCAST, _SCATTER = sig.KIND_CODE["broadcast"], sig.KIND_CODE["scatter"]
_BYTE = np.dtype(np.uint8)


class ChunkedCalls:
    """Collectives in phases of at most a slot per member."""

    def _init_slots(self, lay, members: list[int], kept) -> None:
        self._slot_off = [lay.slot_offset(m) for m in members]
        self._slot_bytes = lay.slot_bytes
        self._views = kept.views  # _flat_views and _fold_layout, by dtype and count

    # -- views of the members' slots ----------------------------------------------
    def _flat_views(self, dtype: np.dtype, count: int, offset: int = 0) -> list[np.ndarray]:
        """Per-member views of ``count`` elements at ``offset`` bytes into each slot."""
        key = (dtype, count, offset)
        views = self._views.get(key)
        if views is None:
            if len(self._views) > CACHE_LIMIT:
                self._views.clear()
            mm = self._arena.mm
            views = [np.ndarray((count,), dtype, mm, off + offset) for off in self._slot_off]
            self._views[key] = views
        return views

    def _block_views(self, dtype, count):
        """Per-member views of each slot as ``(size, count)`` blocks."""
        return [v.reshape(self._size, count) for v in self._flat_views(dtype, self._size * count)]

    def _chunk(self, dtype: np.dtype, blocks: int = 1) -> int:
        """Elements per block that fit in a slot holding ``blocks`` blocks."""
        per = self._slot_bytes // (dtype.itemsize * blocks)
        per -= per % 8 if per > 8 else 0  # chunks of bytes start at a multiple of 8 (alltoall_sized)
        if per == 0:
            raise InvalidValue(f"a slot of {self._slot_bytes} bytes cannot hold {blocks} blocks of {dtype}")
        return per

    def _chunk_phases(self, data, nbytes, consume):
        """The phases of a call where every member writes its ``data`` (this
        rank's: a flat array, or ``(size, n)`` blocks), a chunk of columns
        ``lo:hi`` per phase, and ``consume(views, lo, hi)`` reads the chunk
        from the members' slots (``_flat_views`` or ``_block_views``)."""
        def write(mine, lo, hi):
            mine[...] = data[..., lo:hi]

        self._phases_of(data.dtype, data.shape[-1], data.ndim == 2, nbytes, write, consume)

    def _phases_of(self, dtype, n, blocked, nbytes, write, consume):
        """``_chunk_phases`` of ``n`` columns, where ``write(mine, lo, hi)``
        fills this rank's view of the chunk in its slot."""
        cap = self._chunk(dtype, self._size if blocked else 1)
        views_of = self._block_views if blocked else self._flat_views
        me = self._rank
        for lo in range(0, max(n, 1), cap):
            hi = min(n, lo + cap)
            views = views_of(dtype, hi - lo)
            if lo:
                self._release()
            write(views[me], lo, hi)
            self._arrive()
            if not lo:
                self._check(nbytes)
            consume(views, lo, hi)
            self._done()

    # -- reductions -----------------------------------------------------------
    def _reduction(self, kind, name, x, op, root):
        """An allreduce (``root`` -1) or reduce of ``x``, in phases."""
        nbytes = self._begin(name, kind, x, OP_CODE[op], root)
        try:
            out = np.empty(x.shape, x.dtype) if root < 0 or root == self._rank else None
            flat = np.ascontiguousarray(x).reshape(-1)
            if self._order != "fold":
                return self._reduce_in_order(flat, out, op, nbytes)
            out_flat = out.reshape(-1) if out is not None else None
            if self._size == 1 or x.nbytes <= SMALL_REDUCTION:
                self._fold_everywhere(flat, out_flat, op, nbytes)
            else:
                self._fold_in_parallel(flat, out_flat, op, nbytes)
            return out
        finally:
            self._end()

    def _reduce_in_order(self, flat, out, op, nbytes):
        # A named order (see simdist._orders) depends on where each element
        # sits in the whole array, so the ranks exchange whole inputs and
        # each computes the order on its own: the same bits everywhere.
        parts = np.empty((self._size, flat.size), flat.dtype) if out is not None else None
        self._gather_phases(flat, parts, nbytes)
        if out is None:
            return None
        out.reshape(-1)[...] = in_order(self._order, op, list(parts))
        return out

    def _fold_everywhere(self, flat, out_flat, op, nbytes):
        size = self._size

        def fold_chunk(views, lo, hi):
            if out_flat is not None:
                fold(op, views, out_flat[lo:hi], size)

        self._chunk_phases(flat, nbytes, fold_chunk)

    def _fold_in_parallel(self, flat, out_flat, op, nbytes):
        # Rank r folds slice r of every chunk. It publishes only the slices
        # the others fold (its own slice it reads from its input), then folds
        # its slice in place: into the first part that is not its input
        # (member 0's slot, or member 1's for rank 0), so it writes lines it
        # has just read. The folded slices then lie in two runs: slice 0 in
        # member 1's slot, the others in member 0's. A rank copies a large
        # slice of its own to its result block by block, while the fold's
        # block is in the cache, and the others' runs after; a small one it
        # copies with the others, in the same two copies (fewer numpy calls:
        # at N = 8 and 16 each rank's calls count 4 and 8 times per CPU).
        n, cap = flat.size, self._chunk(flat.dtype)
        me = self._rank
        for lo in range(0, n, cap):
            hi = min(n, lo + cap)
            a, b, parts, mine, into, also, runs = self._fold_layout(flat.dtype, hi - lo)
            if lo:
                self._release()
            mine[:a] = flat[lo : lo + a]
            mine[b:] = flat[lo + b : hi]
            self._arrive()
            if not lo:
                self._check(nbytes)
            parts = parts.copy()
            parts[me] = flat[lo + a : lo + b]
            out = out_flat[lo:hi] if out_flat is not None else None
            fold_in_blocks(op, parts, into, self._size, also=out[a:b] if out is not None and also else None)
            self._arrive()  # every slice is folded: copy them out
            if out is not None:
                for c, d, folded in runs:
                    out[c:d] = folded
            self._done()

    def _fold_layout(self, dtype: np.dtype, count: int):
        """How this rank folds a chunk of ``count`` elements: its slice
        [a, b), the slots' parts of that slice (in rank order; its own the
        caller fills in), its slot, the part it folds into, whether the fold
        copies the slice to the result, and (c, d, view) for each run of
        folded slices to copy after it.

        The slices start on 64-byte boundaries of the slot: a ufunc writes
        an unaligned output up to twice as slowly (numpy's results start 16
        bytes past one)."""
        key = ("fold", dtype, count)
        layout = self._views.get(key)
        if layout is not None:
            return layout
        size, me = self._size, self._rank
        views = self._flat_views(dtype, count)
        align = max(1, 64 // dtype.itemsize)
        bounds = [count * j // size // align * align for j in range(size)] + [count]
        a, b = bounds[me], bounds[me + 1]
        parts = [v[a:b] for v in views]
        first = bounds[1]  # slice 0 is folded into member 1's slot, the others into member 0's
        # At N = 2 the fold's copy pays at every size (256 KiB allreduce: 29 us
        # against 40 with the copy after).
        also = size == 2 or (b - a) * dtype.itemsize > SMALL_SLICE
        if also:
            runs = [(0, first, views[1][:first])] if me else []
            runs += [(c, d, views[0][c:d]) for c, d in ((first, a), (b, count)) if c < d]
        else:
            runs = [(0, first, views[1][:first]), (first, count, views[0][first:])]
        layout = (a, b, parts, views[me], parts[1 if me == 0 else 0], also, runs)
        self._views[key] = layout
        return layout

    def _reduce_scatter_phases(self, x, op):
        nbytes = self._begin("reduce_scatter", _REDUCE_SCATTER, x, OP_CODE[op])
        try:
            me, size = self._rank, self._size
            out = np.empty(x.shape[1:], x.dtype)
            blocks = np.ascontiguousarray(x).reshape(size, -1)
            out_flat = out.reshape(-1)
            if self._order != "fold":  # block r of the allreduce in that order
                whole = self._reduce_in_order(blocks.reshape(-1), np.empty(x.shape, x.dtype), op, nbytes)
                out[...] = whole[me]
                return out
            self._chunk_phases(blocks, nbytes, lambda views, lo, hi: fold(op, [v[me] for v in views], out_flat[lo:hi], size))
            return out
        finally:
            self._end()

    # -- data movement ----------------------------------------------------------
    def _broadcast_phases(self, x, root, root_copy=True):
        """A broadcast where a non-root passed None, or larger than half a
        slot. Only the root writes its slot; it gets a copy of ``x`` back
        unless ``root_copy`` is false (None then)."""
        is_root = self._rank == root
        nbytes = self._begin("broadcast", _BROADCAST, x, 0, root, slot=is_root)
        try:
            me = self._rank
            if is_root:
                flat = np.ascontiguousarray(x).reshape(-1)
                dtype, shape = x.dtype, x.shape
            n = cap = None
            out_flat = None
            lo = 0
            while True:
                if lo:
                    self._release()
                if is_root:
                    n, cap = flat.size, self._chunk(dtype)
                    hi = min(n, lo + cap)
                    self._flat_views(dtype, hi - lo)[me][...] = flat[lo:hi]
                self._arrive()
                if not lo:
                    self._check(nbytes)
                    if not is_root:
                        dtype, shape, planned, inline = self._root_array(root)
                        if planned is not None:  # where the root's plan put it
                            out = planned.copy()
                            if not inline:
                                self._done(self._bank)
                            return out
                        out = np.empty(shape, dtype)
                        out_flat = out.reshape(-1)
                        n, cap = out_flat.size, self._chunk(dtype)
                    else:
                        out = np.array(x, order="C", copy=True) if root_copy else None
                hi = min(n, lo + cap)
                if not is_root:
                    out_flat[lo:hi] = self._flat_views(dtype, hi - lo)[root]
                self._done()
                lo += cap
                if lo >= n:
                    return out
        finally:
            self._end()

    def _gather(self, name, kind, x, root):
        """A gather (``root`` -1: an allgather) of ``x``, in phases."""
        nbytes = self._begin(name, kind, x, 0, root)
        try:
            size, me = self._size, self._rank
            out = np.empty((size, *x.shape), x.dtype) if root < 0 or root == me else None
            self._gather_phases(np.ascontiguousarray(x).reshape(-1), out, nbytes)
            return out
        finally:
            self._end()

    def _gather_phases(self, flat, out, nbytes):
        """Every member's ``flat`` into ``out`` (``(size, ...)``, or None)."""
        out2 = out.reshape(self._size, -1) if out is not None else None

        def copy_chunk(views, lo, hi):
            if out2 is not None:
                for j, v in enumerate(views):
                    out2[j, lo:hi] = v

        self._chunk_phases(flat, nbytes, copy_chunk)

    def _scatter_phases(self, x, root):
        """A scatter of root's ``x`` (the others' may be None). Only the root
        writes its slot; the others learn the dtype and shape from its
        signature row."""
        is_root = self._rank == root
        nbytes = self._begin("scatter", _SCATTER, x, 0, root, slot=is_root)
        try:
            me, size = self._rank, self._size
            blocks = np.ascontiguousarray(x).reshape(size, -1) if is_root else None
            dtype = shape = out_flat = None
            lo = 0
            while True:
                if lo:
                    self._release()
                if is_root:
                    dtype, shape = x.dtype, x.shape[1:]
                    n, cap = blocks.shape[1], self._chunk(dtype, size)
                    hi = min(n, lo + cap)
                    self._block_views(dtype, hi - lo)[me][...] = blocks[:, lo:hi]
                self._arrive()
                if not lo:
                    self._check(nbytes)
                    if not is_root:
                        code, _, _, *block_shape = self._root_words(root).tolist()  # shape (size, *block_shape)
                        dtype, shape = DTYPES[code - 1], tuple(block_shape)
                    out = np.empty(shape, dtype)
                    out_flat = out.reshape(-1)
                    n, cap = out_flat.size, self._chunk(dtype, size)
                hi = min(n, lo + cap)
                out_flat[lo:hi] = self._block_views(dtype, hi - lo)[root][me]
                self._done()
                lo += cap
                if lo >= n:
                    return out
        finally:
            self._end()

    def _alltoall_phases(self, x):
        nbytes = self._begin("alltoall", _ALLTOALL, x)
        try:
            me, size = self._rank, self._size
            out = np.empty(x.shape, x.dtype)
            out2 = out.reshape(size, -1)
            blocks = np.ascontiguousarray(x).reshape(size, -1)

            def take(views, lo, hi):
                for j, v in enumerate(views):
                    out2[j, lo:hi] = v[me]

            self._chunk_phases(blocks, nbytes, take)
            return out
        finally:
            self._end()

    def _alltoall_block_phases(self, width, pack, unpack):
        """An alltoall of ``(size, width)`` bytes packed and unpacked in place
        (``SimComm.alltoall_sized``), in ``_alltoall_phases``'s chunks."""
        size, me = self._size, self._rank
        self._enter((_ALLTOALL, 0, -1, DTYPE_CODE[_BYTE], 2, size, width))
        try:
            def write(mine, lo, hi):
                for j in range(size):
                    pack(j, lo, mine[j])

            def read(views, lo, hi):
                for j, view in enumerate(views):
                    unpack(j, lo, view[me])

            self._phases_of(_BYTE, width, True, self._sig_bytes[self._bank], write, read)
        finally:
            self._end()
