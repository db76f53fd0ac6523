"""The phase protocol: how the members of a simulator communicator meet.

Every collective is a sequence of phases (see ``_arena``): each member
writes its part into its own slot, arrives, waits for all members, reads
what it needs from the others' slots, and stores ``done``. The first phase
also compares the members' call signatures (``simdist._signature``), so
mismatched calls raise CollectiveMismatch on every rank instead of hanging
or mixing data.

``PhaseProtocol`` holds one rank's words of that protocol -- its arrive and
done epochs, the two signature banks of its context entry, the peers' words
it waits on -- and the steps: ``_begin``/``_enter`` sign a call, ``_meet``
is the whole of a one-phase call's meeting, ``_arrive``/``_done``/
``_release`` are a multi-phase call's steps, ``_check`` compares the
signatures and ``_end`` leaves the call. It is a mixin of ``SimComm``.

A *static signature* is a call's signature row without its sequence
number: ``(kind, op, root, dtype code, ndim, *shape)``, with
``(kind, op, root, 0, -1)`` for a call without an array.
"""

from __future__ import annotations

import functools

from .._arguments import DTYPE_CODE
from .. import _signature as sig
from ._arena import _acquire as _fence_in, _release as _fence_out  # fence(), spelled out
from ._layout import CALL, S_CTX, S_PROGRESS, S_STATE, USER
from ._report import comm_name
from ._transport import closed_error

#: Indexes of a static signature's fields (the row's, less the sequence number).
STATIC_KIND, STATIC_OP, STATIC_ROOT, STATIC_DTYPE, STATIC_NDIM = range(5)
#: How many cached views of each kind a communicator keeps before starting over.
CACHE_LIMIT = 64
#: The (members, context) pairs whose views a worker keeps (``kept_views``).
KEPT_CONTEXTS = 256


class KeptViews:
    """A communicator's caches of views of the arena and of plans, which
    depend only on its context and members (and this rank): a communicator
    made again on them, as a library that splits and frees per transform
    makes it, starts with those of the last one instead of building each
    again at its first call. ``sized`` is ``_one_phase``'s plan of
    ``alltoall_sized``; the dicts are named after the attributes that
    share them."""

    __slots__ = ("sig_views", "root_views", "plans", "root_arrays", "row_views", "views", "sized")

    def __init__(self):
        self.sig_views, self.root_views, self.plans, self.root_arrays, self.row_views, self.views = (
            {}, {}, {}, {}, {}, {})
        self.sized = None


def kept_views(arena, members: tuple, ctx: int) -> KeptViews:
    """The caches of communicators on ``ctx`` with ``members`` in ``arena``
    (kept for at most ``KEPT_CONTEXTS`` pairs, all dropped when full)."""
    kept = arena.kept_views.get((members, ctx))
    if kept is None:
        if len(arena.kept_views) >= KEPT_CONTEXTS:
            arena.kept_views.clear()
        kept = arena.kept_views[members, ctx] = KeptViews()
    return kept


@functools.lru_cache(maxsize=256)
def _entry_words(lay, members: tuple, ctx: int, me: int) -> tuple:
    """The words of the context's entries and status that member ``me``
    writes and waits on (see ``PhaseProtocol._init_phases``), and the span
    of the members' sleeping flags: the same for every communicator a
    context and its members make again (a library that splits per
    transform), so kept. Nothing here is ever changed in place."""
    peers = [m for m in members if m != me]
    my_sig = [lay.sig_offset(me, ctx, bank) for bank in (0, 1)]
    return (peers,
            [lay.arrive_word(m, ctx) for m in peers],
            [lay.done_word(m, ctx) for m in peers],
            lay.arrive_word(me, ctx),
            lay.done_word(me, ctx),
            my_sig,
            [off // 8 + sig.SEQ_WORD for off in my_sig],
            [lay.call_epoch_word(me, ctx, bank) for bank in (0, 1)],
            [[lay.call_epoch_word(m, ctx, bank) for m in peers] for bank in (0, 1)],
            [[lay.sig_offset(m, ctx, bank) for m in peers] for bank in (0, 1)],
            [[lay.sig_offset(m, ctx, bank) for m in members] for bank in (0, 1)],
            lay.status_word(me, S_STATE),
            lay.status_word(me, S_CTX),
            lay.status_word(me, S_PROGRESS),
            [(lay.sleeping_word(m), m) for m in peers],
            (lay.sleeping_word(min(members)), lay.sleeping_word(max(members)) + 1))


class PhaseProtocol:
    """One rank's side of the phase protocol on one communicator context."""

    @property
    def name(self) -> str:
        """How reports name this communicator: the name its program gave it
        (``set_name``), else ``the world`` or its context."""
        return comm_name(self._ctx, self._arena.names)

    def set_name(self, name: str) -> None:
        """Name this communicator in reports (``MPI_Comm_set_name``; a torch group)."""
        self._arena.names[self._ctx] = name

    def _init_phases(self, arena, members: list[int], ctx: int, epoch: int, kept: KeptViews) -> None:
        """The words this rank writes and waits on, as int64 indexes into
        ``arena.q``; ``epoch`` is the last epoch of this context's entries;
        ``kept`` the caches of views of the context and members."""
        me = arena.rank
        lay = arena.layout
        self._arena = arena
        self._members = members
        self._rank = members.index(me)
        self._size = len(members)
        self._ctx = ctx
        self._epoch = epoch
        self._seq = 0
        self._closed = None  # why every call raises once closed: FREED, EARLIER_RUN (_transport)
        # Signatures alternate between two banks by the parity of the
        # call's first epoch (see _arena): index [bank] below.
        self._bank = 0
        (self._peers, self._peer_arrive, self._peer_done, self._my_arrive, self._my_done, self._my_sig,
         self._seq_word, self._my_call_epoch, self._peer_call_epoch, self._peer_sig, self._member_sig,
         self._state, self._ctx_word, self._progress, self._peer_sleeping,
         sleepers) = _entry_words(lay, tuple(members), ctx, me)
        self._sig_views, self._root_views = kept.sig_views, kept.root_views
        # What this rank last signed in each bank: a call with the same static
        # signature only rewrites the sequence number.
        self._last_static = [None, None]
        self._sig_bytes = [0, 0]
        self._last_views = [None, None]  # _meet's signature views of _last_static
        # The members' sleeping flags lie between those of the first and last
        # member, all zero while nobody sleeps: one comparison per publish.
        self._sleepers = arena.q[sleepers[0]:sleepers[1]]
        self._sleeper_words = sleepers
        self._nobody = memoryview(bytes((sleepers[1] - sleepers[0]) * 8)).cast("q")

    # The hot path of every call: small calls spend most of their time here,
    # so the phase steps are written out rather than layered.
    def _begin(self, name: str, kind: int, x, op: int = 0, root: int = -1, slot: bool = True) -> int:
        """Enter a call that reads the slots, and writes this rank's unless
        ``slot`` is False (see ``_enter``). Returns the signature's length
        in bytes."""
        if self._closed:
            raise closed_error(self._rank, name, self._closed)
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
            self._sign(static, bank, seq)
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
                self._arena.wait_word(word, epoch, peer, True)
            if other != mine:
                self._arena.wait_words(self._peer_arrive, epoch, self._peers, True)
                self._check(self._sig_bytes[bank])
                return

    def _sign(self, static: tuple, bank: int, seq: int) -> None:
        """Write the signature of ``static`` with sequence number ``seq`` in
        ``bank`` (not yet complete: its call epoch comes after)."""
        packer = sig.packer(max(static[STATIC_NDIM], 0))
        packer.pack_into(self._arena.mm, self._my_sig[bank], static[STATIC_KIND], seq, *static[STATIC_OP:])
        self._last_static[bank] = static
        self._sig_bytes[bank] = packer.size
        self._last_views[bank] = None

    def _end(self) -> None:
        # done: this rank reads nothing more of the call (what a rank that
        # freed this context waits for before another communicator takes it).
        q = self._arena.q
        q[self._my_done] = self._epoch
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
                        arena.wait_words(*readers, True)
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
                self._arena.wait_words(self._peer_arrive, epoch, self._peers, True)
                break

    def _done(self, half: int | None = None) -> None:
        """After reading the members' slots (or one half of each): let them
        write there again."""
        self._publish(self._my_done, self._epoch)
        readers = (self._peer_done, self._epoch, self._peers)
        pending = self._arena.pending_release
        if half is None:
            pending[0] = pending[1] = readers
        else:
            pending[half] = readers

    # -- signatures -------------------------------------------------------------
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
        if static[STATIC_KIND] in sig.ROOT_ONLY_ARRAY and self._root_only_match(bank, static[STATIC_ROOT]):
            return
        buf, lay = self._arena.buf, self._arena.layout
        rows = {m: sig.read(buf, lay.sig_offset(m, self._ctx, bank)) for m in self._members}
        try:
            sig.check_match(self.name, {self._members.index(m): row for m, row in rows.items()})
        except BaseException:
            # Every member detects it and abandons the call; release any
            # member that would wait for us to be done with its slot.
            self._publish(self._my_done, self._epoch)
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
            if len(self._root_views) > CACHE_LIMIT:
                self._root_views.clear()
            n, key = sig.HEAD_WORDS + ndim, sig.KEY_WORDS
            views = self._root_views[bank, root, ndim] = (
                [q[off // 8 : off // 8 + key] for off in offsets],
                [q[off // 8 : off // 8 + n] for off in offsets],
                [(off // 8 + sig.NDIM_WORD, off // 8 + sig.DTYPE_WORD) for off in offsets],
            )
        keys, rows, words = views
        key, row = keys[root], rows[root]
        for i, (ndim_word, dtype_word) in enumerate(words):
            if q[ndim_word] == -1:  # None: its dtype code is 0 (see _begin)
                if keys[i] != key or q[dtype_word] != 0:
                    return False
            elif rows[i] != row:
                return False
        return True

    def _root_words(self, root: int):
        """Member ``root``'s dtype code, ndim and shape in this call's bank,
        as int64 words (a view; read after ``_check`` passed)."""
        q = self._arena.q
        row = self._member_sig[self._bank][root] // 8
        return q[row + sig.DTYPE_WORD : row + sig.HEAD_WORDS + max(q[row + sig.NDIM_WORD], 0)]
