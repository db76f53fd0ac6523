"""The simulator's communicator: the contract's collectives over the arena.

Every collective is a sequence of phases (see ``_arena``): each member
writes its part into its own slot, arrives, waits for all members, reads
what it needs from the others' slots, and stores ``done``. The first phase
also compares the members' call signatures, so mismatched calls raise
CollectiveMismatch on every rank instead of hanging or mixing data.
Messages larger than a slot are cut into chunks, one phase per chunk, so a
collective of any size fits in a bounded arena.

Reductions use the canonical fold of ``simdist._reduction``. Small messages
are folded by every rank on its own; larger ones are folded in parallel, each
rank folding one slice of the elements over all ranks and the others copying
that slice from its slot. Both give the bits of the fold.
"""

from __future__ import annotations

import math

import numpy as np

from .._arguments import DTYPE_CODE, DTYPES, OP_CODE, as_input, check_blocks, check_int, check_op, check_rank_arg
from .._communicator import Communicator
from .._errors import InvalidValue, SimdistError
from .._orders import in_order
from .._reduction import fold, fold_in_blocks, fold_new, fold_rows, fold_ufunc
from .. import _signature as sig
from ._arena import CALL, S_CTX, S_PROGRESS, S_STATE, USER
from ._arena import _acquire as _fence_in, _release as _fence_out  # fence(), spelled out
from ._p2p import Mailboxes
from ._report import comm_name

#: Reductions of at most this many bytes are folded by every rank on its own.
SMALL_REDUCTION = 64 << 10
#: Above N = 2, a parallel fold's slice up to this size is copied out with the others'.
SMALL_SLICE = 128 << 10
#: From this many ranks on, a small fold is one numpy call (fold_rows)...
FOLD_ROWS_FROM = 6
#: ...when each part has at most this many elements per rank: its cost grows
#: with the elements, one call per part's does not (16 rows of 512 float32:
#: 23 us against 5.5; of 32: 2.5 against 4.3).
FOLD_ROWS_PER_RANK = 4

_K = sig.KIND_CODE
_ALLREDUCE, _REDUCE, _BROADCAST = _K["allreduce"], _K["reduce"], _K["broadcast"]
_ALLGATHER, _GATHER, _SCATTER = _K["allgather"], _K["gather"], _K["scatter"]
_REDUCE_SCATTER, _ALLTOALL, _BARRIER = _K["reduce_scatter"], _K["alltoall"], _K["barrier"]
_SPLIT, _FREE = _K["split"], _K["free"]
_BARRIER_CALL = (_BARRIER, 0, -1, 0, -1)  # its signature (see _enter)


class SimComm(Communicator):
    """A communicator of the simulator; see :class:`simdist.Communicator`.

    ``members`` are the world ranks of the communicator in its rank order;
    ``ctx`` is the context index its members' control entries use.

    Simulator-only point-to-point helpers (private; for the mpi4py imitation):

    ``_probe(source=None, tag=None, block=True) -> (source, tag) | None``
        The first message on this communicator from ``source`` (a rank of
        this communicator; None: any) with ``tag`` (an int >= 0; None: any),
        without receiving it: a following ``recv(source, tag)`` with the
        returned source and tag returns exactly that message. From one
        source it is the earliest sent that matches. With ``source=None``
        the sources are checked in ascending rank order and the first with
        a matching message *at the time of its check* wins, so which source
        wins depends on timing, as with MPI_ANY_SOURCE. Messages of other
        communicators are never seen. ``block=False`` returns None at once
        when nothing matches. ``block=True`` waits as ``recv`` does: the
        rank is "waiting in probe #n from rank r (tag=t)" (or "from any
        rank", "tag=any") for the hang watch and its reports, and a peer
        that fails, or an abort, unwinds it. A message larger than the ring
        is reported as soon as its header is in the ring; to look past a
        message that does not match, the probe receives it into the
        per-rank stash ``recv`` uses, which may wait (in a non-blocking
        probe too) for its sender to finish writing it, and no longer.

    ``_try_send(x, dest, tag=0) -> bool``
        ``send`` if it would not wait, else nothing. ``send`` waits whenever
        the message's record (its payload plus 40 + 8 * ndim bytes, padded
        to 8) does not fit in the free space of the ring to ``dest`` --
        always for a message larger than the ring, but also for a small one
        behind unreceived messages -- until ``dest`` receives enough of it.
        ``_try_send`` sends and returns True when the record fits now (then
        the send does not wait, since only the receiver frees space), and
        returns False without sending otherwise.
    """

    def __init__(self, arena, mailboxes: Mailboxes, members: list[int], ctx: int, epoch: int = 0, order: str = "fold"):
        me = arena.rank
        lay = arena.layout
        self._arena = arena
        self._mail = mailboxes
        self._members = members
        self._rank = members.index(me)
        self._size = len(members)
        self._ctx = ctx
        self._epoch = epoch
        self._seq = 0
        self._freed = False
        self._peers = [m for m in members if m != me]
        self._peer_arrive = [lay.arrive_word(m, ctx) for m in self._peers]
        self._peer_done = [w + 1 for w in self._peer_arrive]
        self._my_arrive = lay.arrive_word(me, ctx)
        # Signatures alternate between two banks by the parity of the
        # call's first epoch (see _arena): index [bank] below.
        self._bank = 0
        self._my_sig = [lay.sig_offset(me, ctx, bank) for bank in (0, 1)]
        self._seq_word = [off // 8 + 1 for off in self._my_sig]
        self._my_call_epoch = [lay.call_epoch_word(me, ctx, bank) for bank in (0, 1)]
        self._peer_call_epoch = [[lay.call_epoch_word(m, ctx, bank) for m in self._peers] for bank in (0, 1)]
        self._peer_sig = [[lay.sig_offset(m, ctx, bank) for m in self._peers] for bank in (0, 1)]
        self._inline_off = [[lay.inline_offset(m, ctx, bank) for m in members] for bank in (0, 1)]
        self._member_sig = [[lay.sig_offset(m, ctx, bank) for m in members] for bank in (0, 1)]
        self._sig_views: dict = {}
        self._root_views: dict = {}
        self._root_arrays: dict = {}
        self._slot_off = [lay.slot_offset(m) for m in members]
        self._slot_bytes = lay.slot_bytes
        # One-phase calls too large for a bank use half of each slot, the
        # half of their bank: see _release.
        self._half_bytes = lay.slot_bytes // 2
        self._half_off = [[off + bank * self._half_bytes for off in self._slot_off] for bank in (0, 1)]
        self._state = lay.status_word(me, S_STATE)
        self._ctx_word = lay.status_word(me, S_CTX)
        self._inline_bytes = lay.inline_bytes
        self._progress = lay.status_word(me, S_PROGRESS)
        self._views: dict = {}
        self._plans: dict = {}
        self._last_static = [None, None]
        self._sig_bytes = [0, 0]
        self._last_views = [None, None]  # _meet's signature views of _last_static
        self._peer_sleeping = [(lay.sleeping_word(m), m) for m in self._peers]
        # The members' sleeping flags lie between those of the first and last
        # member, all zero while nobody sleeps: one comparison per publish.
        q = arena.q
        self._sleepers = q[lay.sleeping_word(min(members)) : lay.sleeping_word(max(members)) + 1]
        self._nobody = memoryview(bytes(len(self._sleepers) * 8)).cast("q")
        self._name = comm_name(ctx)
        self._order = order

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    # -- phases ---------------------------------------------------------------
    # The hot path of every call: small calls spend most of their time here,
    # so the phase steps are written out rather than layered.
    def _begin(self, name: str, kind: int, x, op: int = 0, root: int = -1, slot: bool = True) -> int:
        """Enter a call that reads the slots, and writes this rank's unless
        ``slot`` is False (see ``_enter``). Returns the signature's length
        in bytes."""
        if self._freed:
            raise SimdistError(f"rank {self._rank}: {name} on a communicator that was freed")
        if x is None:
            static = (kind, op, root, 0, -1)
        else:
            static = (kind, op, root, DTYPE_CODE[x.dtype], x.ndim, *x.shape)
        self._enter(static, slot)
        return self._sig_bytes[self._bank]

    def _enter(self, static: tuple, slot: bool = True) -> None:
        """Write the signature ``static`` (all but the sequence number) in
        the bank of the call's first epoch and mark this rank as in a call.
        A call that writes its slot (``slot``) first waits until the readers
        of our last slot phase are done."""
        if slot:
            self._release()
        self._meet(static, arrive=False)

    def _meet(self, static: tuple, arrive: bool = True) -> None:
        """A one-phase call once its part is written (in the bank of the
        coming epoch, or in a released half slot): sign, arrive, and see each
        member's call epoch and signature, waiting for it if needed. The
        caller reads, then calls ``_end``. Without ``arrive`` (a call of
        several phases, see ``_enter``) only sign: write the signature in the
        bank of the coming epoch and mark this rank as in a call.

        A member's call epoch is stored after its part and signature, so
        once it reads this call's epoch, both are there to read; a member
        already in its next call writes the other bank. Any difference in
        the signatures falls back to ``_check``."""
        q = self._arena.q
        epoch = self._epoch + 1
        self._bank = bank = epoch & 1
        self._seq = seq = self._seq + 1
        if static is self._last_static[bank] or static == self._last_static[bank]:
            q[self._seq_word[bank]] = seq  # only the sequence number changes
        else:
            packer = sig.packer(max(static[4], 0))
            packer.pack_into(self._arena.mm, self._my_sig[bank], static[0], seq, *static[1:])
            self._last_static[bank] = static
            self._sig_bytes[bank] = packer.size
            self._last_views[bank] = None
        q[self._my_call_epoch[bank]] = epoch  # the signature is complete
        q[self._ctx_word] = self._ctx
        q[self._state] = CALL
        if not arrive:
            return
        self._epoch = epoch  # _publish, written out
        q[self._my_arrive] = epoch
        _fence_in()
        _fence_out()
        if self._sleepers != self._nobody:
            self._wake_sleeping_peers()
        views = self._last_views[bank]
        if views is None:
            views = self._last_views[bank] = self._signature_views(self._sig_bytes[bank], bank)
        mine = views[0]
        for word, other, peer in views[2]:
            if q[word] < epoch:
                self._arena.wait_word(word, epoch, peer)
            if other != mine:
                self._arena.wait_words(self._peer_arrive, epoch, self._peers)
                self._check(self._sig_bytes[bank])
                return

    def _end(self) -> None:
        q = self._arena.q
        q[self._progress] += 1
        q[self._state] = USER

    def _release(self, half: int | None = None) -> None:
        """Wait until the readers of this rank's slot are done with it: with
        one half of it (0 or 1), or with the whole slot (None)."""
        arena = self._arena
        pending = arena.pending_release
        for h in (0, 1) if half is None else (half,):
            readers = pending[h]
            if readers is not None:
                pending[h] = None
                q = arena.q
                for w in readers[0]:
                    if q[w] < readers[1]:
                        arena.wait_words(*readers)
                        break

    def _publish(self, word: int, value: int) -> None:
        """Store ``value`` at ``word``, then wake the members asleep (after a
        fence: see the arena's Dekker argument)."""
        arena = self._arena
        q = arena.q
        q[word] = value
        _fence_in()
        _fence_out()
        if self._sleepers != self._nobody:
            self._wake_sleeping_peers()

    def _wake_sleeping_peers(self) -> None:
        q = self._arena.q
        for flag, member in self._peer_sleeping:
            if q[flag]:
                self._arena.wake(member)

    def _arrive(self) -> None:
        self._epoch = epoch = self._epoch + 1
        self._publish(self._my_arrive, epoch)
        q = self._arena.q
        for w in self._peer_arrive:
            if q[w] < epoch:
                self._arena.wait_words(self._peer_arrive, epoch, self._peers)
                break

    def _done(self, half: int | None = None) -> None:
        """After reading the members' slots (or one half of each): let them
        write there again."""
        self._publish(self._my_arrive + 1, self._epoch)
        readers = (self._peer_done, self._epoch, self._peers)
        pending = self._arena.pending_release
        if half is None:
            pending[0] = pending[1] = readers
        else:
            pending[half] = readers

    def _check(self, nbytes: int) -> None:
        """Compare our signature with every peer's (after the first arrival)."""
        bank = self._bank
        mine, theirs, _ = self._signature_views(nbytes, bank)
        for other in theirs:
            if other != mine:
                break
        else:
            return
        static = self._last_static[bank]
        if static[0] in sig.ROOT_ONLY_ARRAY and self._root_only_match(bank, static[2]):
            return
        buf, lay = self._arena.buf, self._arena.layout
        rows = {m: sig.read(buf, lay.sig_offset(m, self._ctx, bank)) for m in self._members}
        try:
            sig.check_match(self._name, {self._members.index(m): row for m, row in rows.items()})
        except BaseException:
            # Every member detects it and abandons the call; release any
            # member that would wait for us to be done with its slot.
            self._publish(self._my_arrive + 1, self._epoch)
            raise

    def _signature_views(self, nbytes: int, bank: int):
        """Signatures of ``nbytes`` in ``bank``: (ours, the peers', and
        (call epoch word, signature, world rank) per peer), cached."""
        views = self._sig_views.get((nbytes, bank))
        if views is not None:
            return views
        # Views of int64 words: memoryviews compare item by item, so
        # 7 words compare in about 25 ns, 56 bytes in about 130.
        q, n = self._arena.q, nbytes // 8
        mine = self._my_sig[bank] // 8
        theirs = [q[off // 8 : off // 8 + n] for off in self._peer_sig[bank]]
        views = self._sig_views[nbytes, bank] = (
            q[mine : mine + n], theirs, list(zip(self._peer_call_epoch[bank], theirs, self._peers)))
        return views

    def _root_only_match(self, bank: int, root: int) -> bool:
        """Broadcast or scatter, where a non-root may pass None: True if every
        member's signature is the root's, or the root's kind, seq, op and
        root with no array. Every member reads the same rows, so all reach
        the same verdict; on False, ``check_match`` decides."""
        q = self._arena.q
        offsets = self._member_sig[bank]
        ndim = q[offsets[root] // 8 + sig.NDIM_WORD]
        if not 0 <= ndim <= sig.MAX_NDIM:
            return False
        views = self._root_views.get((bank, root, ndim))
        if views is None:
            if len(self._root_views) > 64:
                self._root_views.clear()
            n, key = sig.HEAD_WORDS + ndim, sig.KEY_WORDS
            views = self._root_views[bank, root, ndim] = (
                [q[off // 8 : off // 8 + key] for off in offsets],
                [q[off // 8 : off // 8 + n] for off in offsets],
                [off // 8 + sig.NDIM_WORD for off in offsets],
            )
        keys, rows, ndim_words = views
        key, row = keys[root], rows[root]
        for i, w in enumerate(ndim_words):
            if q[w] == -1:  # None: its dtype code is 0 (see _begin)
                if keys[i] != key or q[w - 1] != 0:
                    return False
            elif rows[i] != row:
                return False
        return True

    def _root_array(self, root: int):
        """For a broadcast where this rank passed None: the root's dtype and
        shape, the view of its array where its plan put it (in the bank or
        half slot of this call's bank; None if larger than half a slot), and
        whether that is the bank. Cached by bank, root, and the root's dtype
        code and shape (read from its row, after ``_check`` passed)."""
        q = self._arena.q
        bank = self._bank
        off = self._member_sig[bank][root] // 8
        words = q[off + sig.NDIM_WORD - 1 : off + sig.HEAD_WORDS + max(q[off + sig.NDIM_WORD], 0)]
        key = (bank, root, *words.tolist())  # dtype code, ndim, shape
        found = self._root_arrays.get(key)
        if found is None:
            if len(self._root_arrays) > 64:
                self._root_arrays.clear()
            dtype, shape = DTYPES[key[2] - 1], key[4:]
            nbytes = math.prod(shape) * dtype.itemsize
            inline, planned = nbytes <= self._inline_bytes, None
            if nbytes <= self._half_bytes:
                inline, offsets = self._placement(nbytes)
                planned = np.ndarray(shape, dtype, self._arena.mm, offsets[bank][root])
            found = self._root_arrays[key] = (dtype, shape, planned, inline)
        return found

    def _root_row(self, root: int) -> tuple[int, ...]:
        lay = self._arena.layout
        return sig.read(self._arena.buf, lay.sig_offset(self._members[root], self._ctx, self._bank))

    def _stacked(self, offsets: list[int], dtype: np.dtype, shape: tuple) -> np.ndarray | None:
        """One strided view of an array at each of ``offsets`` (one per
        member, in rank order), or None unless they are evenly spaced."""
        stride = offsets[1] - offsets[0] if len(offsets) > 1 else 1
        if stride <= 0 or any(b - a != stride for a, b in zip(offsets, offsets[1:])):
            return None
        item = np.empty(shape, dtype)
        return np.ndarray((len(offsets), *shape), dtype, self._arena.mm, offsets[0], (stride, *item.strides))

    def _flat_views(self, dtype: np.dtype, count: int, offset: int = 0) -> list[np.ndarray]:
        """Per-member views of ``count`` elements at ``offset`` bytes into each slot."""
        key = (dtype, count, offset)
        views = self._views.get(key)
        if views is None:
            if len(self._views) > 64:
                self._views.clear()
            mm = self._arena.mm
            views = [np.ndarray((count,), dtype, mm, off + offset) for off in self._slot_off]
            self._views[key] = views
        return views

    def _chunk(self, dtype: np.dtype, blocks: int = 1) -> int:
        """Elements per block that fit in a slot holding ``blocks`` blocks."""
        per = self._slot_bytes // (dtype.itemsize * blocks)
        if per == 0:
            raise InvalidValue(f"a slot of {self._slot_bytes} bytes cannot hold {blocks} blocks of {dtype}")
        return per

    # -- reductions -----------------------------------------------------------
    def allreduce(self, x, op="sum"):
        if type(x) is np.ndarray and type(op) is str:
            plan = self._plans.get((_ALLREDUCE, x.dtype, x.shape, op))
            if plan is not None:
                return self._exchange(x, plan, self._fold_all)
        x = as_input(x, self._rank, "allreduce")
        check_op(op, x.dtype, self._rank, "allreduce")
        ufunc = fold_ufunc(op, x.dtype)
        if (ufunc is not None and x.nbytes <= min(SMALL_REDUCTION, self._half_bytes) and not self._freed
                and self._order == "fold"):
            divisor = self._size if op == "mean" else None
            plan = self._plan((_ALLREDUCE, x.dtype, x.shape, op), x, OP_CODE[op], -1, ufunc, divisor)
            return self._exchange(x, plan, self._fold_all)
        return self._reduction(_ALLREDUCE, "allreduce", x, op, -1)

    def _fold_all(self, views, rows, plan):
        by_rows, _, ufunc, divisor = plan[3:]
        if by_rows and rows is not None:
            return fold_rows(ufunc, rows, divisor)
        return fold_new(ufunc, views, divisor)

    def reduce(self, x, root=0, op="sum"):
        x = as_input(x, self._rank, "reduce")
        root = check_rank_arg(root, self._size, self._rank, "reduce", "root")
        check_op(op, x.dtype, self._rank, "reduce")
        return self._reduction(_REDUCE, "reduce", x, op, root)

    def _reduction(self, kind, name, x, op, root):
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
        n, cap = flat.size, self._chunk(flat.dtype)
        me = self._rank
        for lo in range(0, max(n, 1), cap):
            hi = min(n, lo + cap)
            views = self._flat_views(flat.dtype, hi - lo)
            if lo:
                self._release()
            views[me][...] = flat[lo:hi]
            self._arrive()
            if not lo:
                self._check(nbytes)
            if out_flat is not None:
                fold(op, views, out_flat[lo:hi], self._size)
            self._done()

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

    def reduce_scatter(self, x, op="sum"):
        if type(x) is np.ndarray and type(op) is str:
            plan = self._plans.get((_REDUCE_SCATTER, x.dtype, x.shape, op))
            if plan is not None:
                return self._exchange(x, plan, self._fold_mine)
        x = as_input(x, self._rank, "reduce_scatter")
        check_blocks(x, self._size, self._rank, "reduce_scatter")
        check_op(op, x.dtype, self._rank, "reduce_scatter")
        ufunc = fold_ufunc(op, x.dtype)
        if ufunc is not None and x.nbytes <= self._half_bytes and not self._freed and self._order == "fold":
            divisor = self._size if op == "mean" else None
            plan = self._plan((_REDUCE_SCATTER, x.dtype, x.shape, op), x, OP_CODE[op], -1, ufunc, divisor)
            return self._exchange(x, plan, self._fold_mine)
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
            self._blockwise(blocks, nbytes, lambda views, lo, hi: fold(op, [v[me] for v in views], out_flat[lo:hi], size))
            return out
        finally:
            self._end()

    # -- data movement ----------------------------------------------------------
    def broadcast(self, x, root=0):
        if type(x) is np.ndarray and type(root) is int:
            plan = self._plans.get((_BROADCAST, x.dtype, x.shape, root))
            if plan is not None:
                return self._small_broadcast(x, plan)
        root = check_rank_arg(root, self._size, self._rank, "broadcast", "root")
        is_root = self._rank == root
        if x is not None or is_root:
            x = as_input(x, self._rank, "broadcast")
        if x is not None and x.nbytes <= self._half_bytes and not self._freed:
            return self._small_broadcast(x, self._plan((_BROADCAST, x.dtype, x.shape, root), x, 0, root))
        # A non-root passing None, or a message larger than a slot. Only the
        # root writes its slot.
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
                        out = np.array(x, order="C", copy=True)
                hi = min(n, lo + cap)
                if not is_root:
                    out_flat[lo:hi] = self._flat_views(dtype, hi - lo)[root]
                self._done()
                lo += cap
                if lo >= n:
                    return out
        finally:
            self._end()

    def allgather(self, x):
        if type(x) is np.ndarray:
            plan = self._plans.get((_ALLGATHER, x.dtype, x.shape, -1))
            if plan is not None:
                return self._exchange(x, plan, self._stack_all)
        x = as_input(x, self._rank, "allgather")
        if x.nbytes <= self._half_bytes and not self._freed:
            return self._exchange(x, self._plan((_ALLGATHER, x.dtype, x.shape, -1), x, 0, -1), self._stack_all)
        return self._gather("allgather", _ALLGATHER, x, -1)

    # -- small one-phase calls ------------------------------------------------
    # An allreduce (up to SMALL_REDUCTION), broadcast, allgather,
    # reduce_scatter or alltoall whose message fits in half a slot is one
    # phase; once its (dtype, shape, op or root) has been seen, its checks
    # and lookups are skipped. A message of at most the layout's
    # inline_bytes travels in the context's banks, which need no ``done``
    # (see _arena); a larger one in the half slots. Every rank decides where
    # from the dtype and shape alone, so all ranks agree. A plan is
    # (signature, views per bank, stacked views per bank, fold by rows,
    # inline, ufunc, divisor).
    def _placement(self, nbytes: int):
        """Where a one-phase call of ``nbytes`` per rank puts each member's
        part: (in the banks?, offsets per bank and member). The caller has
        checked that it fits in half a slot."""
        inline = nbytes <= self._inline_bytes
        return inline, self._inline_off if inline else self._half_off

    def _plan(self, key, x, op, root, ufunc=None, divisor=None):
        if len(self._plans) >= 64:
            self._plans.clear()
        static = (key[0], op, root, DTYPE_CODE[x.dtype], x.ndim, *x.shape)
        inline, offsets = self._placement(x.nbytes)
        mm = self._arena.mm
        banks = tuple([np.ndarray(x.shape, x.dtype, mm, off) for off in offs] for offs in offsets)
        every = tuple(self._stacked(offs, x.dtype, x.shape) for offs in offsets)
        part = x.size // self._size if key[0] == _REDUCE_SCATTER else x.size
        by_rows = self._size >= FOLD_ROWS_FROM and part <= FOLD_ROWS_PER_RANK * self._size
        plan = self._plans[key] = (static, banks, every, by_rows, inline, ufunc, divisor)
        return plan

    def _small_broadcast(self, x, plan):
        static, banks, _, _, inline, _, _ = plan
        root = static[2]
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

    def _stack_all(self, views, rows, plan):
        return rows.copy() if rows is not None else np.stack(views)

    # In reduce_scatter and alltoall rank r reads block r of every member's
    # bank or half slot.
    def _fold_mine(self, views, rows, plan):
        by_rows, _, ufunc, divisor = plan[3:]
        me = self._rank
        if by_rows and rows is not None:
            return fold_rows(ufunc, rows[:, me], divisor)
        return fold_new(ufunc, [v[me, ...] for v in views], divisor)

    def _take_mine(self, views, rows, plan):
        me = self._rank
        return rows[:, me].copy() if rows is not None else np.stack([v[me] for v in views])

    def gather(self, x, root=0):
        x = as_input(x, self._rank, "gather")
        root = check_rank_arg(root, self._size, self._rank, "gather", "root")
        return self._gather("gather", _GATHER, x, root)

    def _gather(self, name, kind, x, root):
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
        n, cap = flat.size, self._chunk(flat.dtype)
        for lo in range(0, max(n, 1), cap):
            hi = min(n, lo + cap)
            views = self._flat_views(flat.dtype, hi - lo)
            if lo:
                self._release()
            views[self._rank][...] = flat[lo:hi]
            self._arrive()
            if not lo:
                self._check(nbytes)
            if out2 is not None:
                for j, v in enumerate(views):
                    out2[j, lo:hi] = v
            self._done()

    def scatter(self, x, root=0):
        root = check_rank_arg(root, self._size, self._rank, "scatter", "root")
        is_root = self._rank == root
        if x is not None or is_root:
            x = as_input(x, self._rank, "scatter")
            if is_root:
                check_blocks(x, self._size, self._rank, "scatter")
        nbytes = self._begin("scatter", _SCATTER, x, 0, root, slot=is_root)  # only the root writes
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
                        row = self._root_row(root)
                        dtype, shape = DTYPES[row[4] - 1], tuple(row[7 : 6 + row[5]])
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

    def alltoall(self, x):
        if type(x) is np.ndarray:
            plan = self._plans.get((_ALLTOALL, x.dtype, x.shape, -1))
            if plan is not None:
                return self._exchange(x, plan, self._take_mine)
        x = as_input(x, self._rank, "alltoall")
        check_blocks(x, self._size, self._rank, "alltoall")
        if x.nbytes <= self._half_bytes and not self._freed:
            return self._exchange(x, self._plan((_ALLTOALL, x.dtype, x.shape, -1), x, 0, -1), self._take_mine)
        nbytes = self._begin("alltoall", _ALLTOALL, x)
        try:
            me, size = self._rank, self._size
            out = np.empty(x.shape, x.dtype)
            out2 = out.reshape(size, -1)
            blocks = np.ascontiguousarray(x).reshape(size, -1)

            def take(views, lo, hi):
                for j, v in enumerate(views):
                    out2[j, lo:hi] = v[me]

            self._blockwise(blocks, nbytes, take)
            return out
        finally:
            self._end()

    def _block_views(self, dtype, count):
        """Per-member views of each slot as ``(size, count)`` blocks."""
        return [v.reshape(self._size, count) for v in self._flat_views(dtype, self._size * count)]

    def _blockwise(self, blocks, nbytes, consume):
        """Chunked exchange of ``(size, n)`` blocks: every member writes its
        blocks, then ``consume(views, lo, hi)`` reads columns ``lo:hi``."""
        n, cap = blocks.shape[1], self._chunk(blocks.dtype, self._size)
        me = self._rank
        for lo in range(0, max(n, 1), cap):
            hi = min(n, lo + cap)
            views = self._block_views(blocks.dtype, hi - lo)
            if lo:
                self._release()
            views[me][...] = blocks[:, lo:hi]
            self._arrive()
            if not lo:
                self._check(nbytes)
            consume(views, lo, hi)
            self._done()

    def barrier(self):
        if self._freed:
            raise SimdistError(f"rank {self._rank}: barrier on a communicator that was freed")
        try:
            self._meet(_BARRIER_CALL)
        finally:  # _end, written out
            q = self._arena.q
            q[self._progress] += 1
            q[self._state] = USER

    # -- point to point ---------------------------------------------------------
    def send(self, x, dest, tag=0):
        x = as_input(x, self._rank, "send")
        dest = check_rank_arg(dest, self._size, self._rank, "send", "dest")
        tag = check_int(tag, self._rank, "send", "tag", minimum=0)
        self._check_open("send")
        self._mail.send(x, self._members[dest], tag, self._ctx)

    def recv(self, source, tag=0):
        source = check_rank_arg(source, self._size, self._rank, "recv", "source")
        tag = check_int(tag, self._rank, "recv", "tag", minimum=0)
        self._check_open("recv")
        return self._mail.recv(self._members[source], tag, self._ctx)

    def _probe(self, source=None, tag=None, block=True):
        """See the class docstring."""
        if source is not None:
            source = check_rank_arg(source, self._size, self._rank, "probe", "source")
        if tag is not None:
            tag = check_int(tag, self._rank, "probe", "tag", minimum=0)
        self._check_open("probe")
        members = self._members
        sources = members if source is None else [members[source]]
        found = self._mail.probe(sources, tag, self._ctx, bool(block), source is None)
        if found is None:
            return None
        world, found_tag = found
        return (source if source is not None else members.index(world)), found_tag

    def _try_send(self, x, dest, tag=0):
        """See the class docstring."""
        x = as_input(x, self._rank, "send")
        dest = check_rank_arg(dest, self._size, self._rank, "send", "dest")
        tag = check_int(tag, self._rank, "send", "tag", minimum=0)
        self._check_open("send")
        if not self._mail.fits(x, self._members[dest]):
            return False
        self._mail.send(x, self._members[dest], tag, self._ctx)
        return True

    def _check_open(self, name):
        if self._freed:
            raise SimdistError(f"rank {self._rank}: {name} on a communicator that was freed")

    # -- communicators ------------------------------------------------------------
    def split(self, color, key=0):
        if color is not None:
            color = check_int(color, self._rank, "split", "color", minimum=0)
        key = check_int(key, self._rank, "split", "key")
        arena = self._arena
        contexts = arena.layout.contexts
        nbytes = self._begin("split", _SPLIT, None)
        try:
            me = self._rank
            words = 3 + contexts
            views = self._flat_views(np.dtype(np.int64), words)
            row = views[me]
            row[0] = -1 if color is None else color
            row[1] = key
            row[2] = arena.free_contexts
            row[3:] = arena.arrive_epochs(arena.rank)
            self._arrive()
            self._check(nbytes)
            table = np.array([v[:3] for v in views])
            arrive = np.array([v[3:] for v in views])
            self._done()
        finally:
            self._end()
        if color is None:
            return None
        free = int(np.bitwise_and.reduce(table[:, 2]))
        if free == 0:
            raise SimdistError(
                f"rank {self._rank}: split: every communicator context is in use "
                f"({bin(arena.initial_free_contexts).count('1')} sub-communicators alive); "
                "call free() on the ones you no longer need"
            )
        ctx = (free & -free).bit_length() - 1
        group = sorted((int(table[j, 1]), j) for j in range(self._size) if table[j, 0] == color)
        ranks = [j for _, j in group]
        epoch = int(arrive[ranks, ctx].max())
        arena.free_contexts &= ~(1 << ctx)
        return SimComm(arena, self._mail, [self._members[j] for j in ranks], ctx, epoch, self._order)

    def free(self):
        if self._ctx == 0:
            raise InvalidValue(f"rank {self._rank}: free: the world communicator cannot be freed")
        if self._freed:
            return
        nbytes = self._begin("free", _FREE, None)
        try:
            self._arrive()
            self._check(nbytes)
            self._done()
            # No member may still read this context when another communicator
            # starts on it: its banks alternate by that communicator's epochs.
            self._release()
        finally:
            self._end()
        self._freed = True
        self._plans.clear()  # the fast path must see the freed check
        self._arena.free_contexts |= 1 << self._ctx

    def __repr__(self):
        return f"<SimComm rank {self._rank} of {self._size} on {self._name}>"

