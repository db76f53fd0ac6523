"""Point-to-point messages: one byte ring per ordered pair of ranks.

The sender of a pair writes records into its ring and advances ``head``; the
receiver copies them out and advances ``tail`` (both in the arena's p2p
index, each with one writer). A record is a header of int64 words
``ctx, tag, dtype code, ndim, nbytes, shape...`` and the payload, padded to
8 bytes. ``ctx`` is the communicator's message key (``Transport.context``),
which no other communicator of the rank's run has, freed ones included;
the driver empties the rings between runs. So a message matches only a
receive on the communicator, and in the run, it was sent in. A message that does not fit in the ring's free space is streamed:
the sender waits for the receiver to make room, so ``send`` returns at once
for small messages and waits for the matching ``recv`` for large ones, as a
standard-mode MPI send may.

Synchronous sends
-----------------
In a world with ``sync_sends`` (the header's ``H_SYNC_SENDS``), ``send``
marks its record synchronous (a bit of the header's dtype word) and, once
the record is written, waits until the receiver has *taken* it: the
receiver counts, per pair, the synchronous messages its ``recv`` returned
(``R_MATCHED``, one writer: the receiver), and a sender's k-th synchronous
message to a peer is taken when that count reaches k (a sender has one
synchronous message in flight at a time, and a pair's messages of one tag
are taken in order). A message that a ``recv`` for another tag, or a
probe, only moves to the stash is not taken. ``try_send`` never waits.

The receiver reads its ring in order; a message with another (ctx, tag)
than the one asked for is copied into a private queue (the stash), where a
later ``recv`` finds it. So messages between a pair with one tag arrive in
order. Each stashed message keeps its arrival number, so the earliest
message from one source is known across tags too.

Probing
-------
``probe`` finds the first message that a ``recv`` for a source (or any) and
a tag (or any) would take, without taking it. Per source it looks in the
stash first (the earliest stashed message that matches), then at the
record at the ring's tail: two header words (``ctx, tag``) are enough to
decide, so a large message still being streamed is reported as soon as its
header is in the ring, and stays there for ``recv``. A record that does not
match is moved to the stash (as ``recv`` would do) to look past it; that
reads its whole payload, which waits only for its sender to finish writing
it (a sender that has written a header is inside ``send`` until the record
is complete, and needs nothing from the receiver but room, which reading
makes). With several sources, the first in the order given that has a
match at the time of its check wins. A blocking probe that finds nothing
waits on the heads of all the rings it looked at (``Arena.wait_any``) and
looks again. A non-blocking probe that finds nothing and moves nothing
writes nothing to the status table, so polling does not count as progress
for the driver's hang watch; it raises ``Aborted`` when the run is being
aborted, so a rank that polls unwinds like a waiting one.
"""

from __future__ import annotations

import collections
import struct

import numpy as np

from .._arguments import DTYPE_CODE, DTYPES
from ._layout import (
    CALL, FAILED, H_SYNC_SENDS, R_HEAD, R_MATCHED, R_TAIL, S_CTX, S_P2P_KIND, S_P2P_NBYTES, S_P2P_PEER, S_P2P_SEQ, S_P2P_TAG,
    MPI_ANY_PEER, MPI_CALL_BYTES, S_MPI_PEER, S_MPI_RELEASABLE, S_POLLS, S_PROGRESS, S_RELEASE, S_STATE, USER,
)
from ._report import P2P_ANY_SOURCE, P2P_CTX, SSEND

_HEAD = struct.Struct("5q")
SEND, RECV, PROBE = 1, 2, 3
#: In a record's dtype word: the sender waits until a ``recv`` takes it.
_SYNC = 1 << 8
#: A non-blocking probe of more sources first finds those with mail at all.
FEW_SOURCES = 4


def record_bytes(nbytes: int, ndim: int) -> int:
    """Ring bytes of the record of a message of ``nbytes`` with ``ndim``
    dimensions: its header (40 + 8 * ndim bytes) and payload, padded to 8."""
    return _HEAD.size + 8 * ndim + ((nbytes + 7) & ~7)


class Mailboxes:
    """The p2p state of one rank for one run."""

    def __init__(self, arena):
        self._arena = arena
        self._me = arena.rank
        lay = arena.layout
        self._ring_bytes = lay.ring_bytes
        # (ctx, source) -> tag -> messages in arrival order, as (arrival, array);
        # no empty entries, so a falsy lookup means nothing is stashed.
        self._stash: dict[tuple[int, int], dict[int, collections.deque]] = {}
        self._arrivals = 0
        self._rings_by_pair: dict[tuple[int, int], _Ring] = {}
        self._probe_words: dict[tuple, tuple] = {}  # sources -> their rings' head and tail words (_ring_words)
        self._seq = 0
        self._status = lay.status_word(self._me, 0)
        self.sync_sends = bool(arena.q[H_SYNC_SENDS])
        self._synchronous_sent: dict[int, int] = {}  # dest -> synchronous messages sent to it
        ring = np.ndarray((lay.size * lay.size * lay.ring_bytes,), np.uint8, arena.mm, lay.rings)
        self._rings = ring.reshape(lay.size * lay.size, lay.ring_bytes)

    def failed(self, rank: int) -> bool:
        """Whether ``rank`` has failed in this run (its state word)."""
        return self._arena.q[self._arena.layout.status_word(rank, S_STATE)] == FAILED

    def _enter(self, kind: int, peer: int, tag: int, nbytes: int) -> None:
        self._seq += 1
        q, s = self._arena.q, self._status
        q[s + S_P2P_KIND] = kind
        q[s + S_P2P_PEER] = peer
        q[s + S_P2P_TAG] = tag
        q[s + S_P2P_NBYTES] = nbytes
        q[s + S_P2P_SEQ] = self._seq
        q[s + S_CTX] = P2P_CTX
        q[s + S_STATE] = CALL

    def _leave(self) -> None:
        q, s = self._arena.q, self._status
        q[s + S_PROGRESS] += 1
        q[s + S_STATE] = USER

    def state_mpi_call(self, call: str | None, peer: int | None, releasable: bool = False) -> None:
        """Show ``call`` (MPI call text) waiting for world rank ``peer`` (None:
        any rank) in the status entry; ``call=None`` clears it. The text is
        written before the peer word, which tells readers it is valid."""
        q, lay = self._arena.q, self._arena.layout
        word = self._status + S_MPI_PEER
        q[word] = 0
        q[self._status + S_MPI_RELEASABLE] = 0
        if call is None:
            return
        at = lay.mpi_call_offset(self._me)
        text = call.encode("utf-8", "replace")[: MPI_CALL_BYTES - 1]
        self._arena.buf[at : at + MPI_CALL_BYTES] = text.ljust(MPI_CALL_BYTES, b"\0")
        q[self._status + S_MPI_RELEASABLE] = int(releasable)
        q[word] = MPI_ANY_PEER if peer is None else peer + 1

    # -- sending ------------------------------------------------------------
    def send(self, x: np.ndarray, dest: int, tag: int, ctx: int, sync: bool = False) -> None:
        """Write the message into the ring to ``dest``; with ``sync``, then
        wait until ``dest``'s ``recv`` takes it (see the module docstring)."""
        self._enter(SSEND if sync else SEND, dest, tag, x.nbytes)
        try:
            code = DTYPE_CODE[x.dtype] | (_SYNC if sync else 0)
            header = _HEAD.pack(ctx, tag, code, x.ndim, x.nbytes) + struct.pack(f"{x.ndim}q", *x.shape)
            payload = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
            pad = -x.nbytes % 8
            ring = self._ring(self._me, dest)
            ring.put(np.frombuffer(header, np.uint8))
            ring.put(payload)
            if pad:
                ring.put(np.zeros(pad, np.uint8))
            if sync:
                sent = self._synchronous_sent[dest] = self._synchronous_sent.get(dest, 0) + 1
                self._arena.wait_word(ring.head - R_HEAD + R_MATCHED, sent, dest)
        finally:
            self._leave()

    # -- receiving ------------------------------------------------------------
    def recv(self, source: int, tag: int, ctx: int) -> np.ndarray:
        box = self._stash.get((ctx, source))
        if box:
            waiting = box.get(tag)
            if waiting:
                return self._unstash(box, ctx, source, tag, waiting)
        self._enter(RECV, source, tag, 0)
        try:
            ring = self._ring(source, self._me)
            while True:
                m_ctx, m_tag, out, sync = self._read(ring)
                if m_ctx == ctx and m_tag == tag:
                    if sync:
                        self._taken(ring)
                    return out
                self._set_aside(m_ctx, source, m_tag, out, sync)
        finally:
            self._leave()

    def _taken(self, ring: "_Ring") -> None:
        """A synchronous message of ``ring``'s sender is received: release it."""
        word = ring.head - R_HEAD + R_MATCHED
        self._arena.publish(word, self._arena.q[word] + 1, (ring.src,))

    def _ring(self, src: int, dst: int) -> "_Ring":
        ring = self._rings_by_pair.get((src, dst))
        if ring is None:
            ring = self._rings_by_pair[(src, dst)] = _Ring(self, src, dst)
        return ring

    @staticmethod
    def _read(ring: "_Ring") -> tuple[int, int, np.ndarray, bool]:
        """Take the record at ``ring``'s tail: ``(ctx, tag, array, synchronous)``."""
        head = np.empty(5, np.int64)
        ring.get(head.view(np.uint8))
        m_ctx, m_tag, code, ndim, nbytes = (int(v) for v in head)
        shape = np.empty(ndim, np.int64)
        ring.get(shape.view(np.uint8))
        out = np.empty(tuple(int(d) for d in shape), DTYPES[(code & ~_SYNC) - 1])
        ring.get(out.reshape(-1).view(np.uint8))
        if nbytes % 8:
            ring.get(np.empty(-nbytes % 8, np.uint8))
        return m_ctx, m_tag, out, bool(code & _SYNC)

    def _set_aside(self, ctx: int, source: int, tag: int, out: np.ndarray, sync: bool) -> None:
        self._arrivals += 1
        box = self._stash.setdefault((ctx, source), {})
        waiting = box.get(tag)
        if waiting is None:
            waiting = box[tag] = collections.deque()
        waiting.append((self._arrivals, out, sync))

    def _unstash(self, box: dict, ctx: int, source: int, tag: int, waiting: collections.deque) -> np.ndarray:
        _, out, sync = waiting.popleft()
        if not waiting:
            del box[tag]
            if not box:
                del self._stash[(ctx, source)]
        if sync:
            self._taken(self._ring(source, self._me))
        return out

    # -- probing --------------------------------------------------------------
    def probe(
        self, sources: list[int], tag: int | None, ctx: int, block: bool, any_source: bool
    ) -> tuple[int, int] | None:
        """The first message on ``ctx`` from one of ``sources`` (world ranks,
        scanned in this order) with ``tag`` (None: any), as ``(source, tag)``;
        it stays for ``recv``. None at once if there is none and not ``block``,
        or when the driver releases the wait (``S_RELEASE``).
        See the module docstring."""
        me = self._me
        if not block:
            self._arena.q[self._status + S_POLLS] += 1
            if len(sources) > FEW_SOURCES:
                sources = self._with_mail(sources, ctx)
        rings = [self._ring(src, me) for src in sources]
        release = self._status + S_RELEASE
        released = self._arena.q[release] + 1
        entered = False
        try:
            while True:
                heads = []
                for src, ring in zip(sources, rings):
                    box = self._stash.get((ctx, src))
                    if box:
                        if tag is None:  # the earliest arrival over all tags
                            return src, min(box.items(), key=lambda item: item[1][0][0])[0]
                        if tag in box:
                            return src, tag
                    while True:
                        m_ctx, m_tag, head = ring.peek()
                        if m_ctx is None:
                            heads.append(head)
                            break
                        if m_ctx == ctx and (tag is None or m_tag == tag):
                            return src, m_tag
                        if not entered:
                            self._enter_probe(sources, tag, any_source)
                            entered = True
                        m_ctx, m_tag, out, sync = self._read(ring)
                        self._set_aside(m_ctx, src, m_tag, out, sync)
                if not block:  # a rank that polls still unwinds on an abort
                    self._arena.check_abort()
                    return None
                if not entered:
                    self._enter_probe(sources, tag, any_source)
                    entered = True
                got = self._arena.wait_any([*(ring.head for ring in rings), release], [*(h + 1 for h in heads), released],
                                           [*sources, me], None if any_source else sources[0])
                if got == len(rings) or self._arena.q[release] >= released:  # released, if also woken by a record
                    return None
        finally:
            if entered:
                self._leave()

    def _with_mail(self, sources, ctx: int) -> list[int]:
        """Those of ``sources`` with a record in their ring or a message set
        aside on ``ctx``, in order: where the sources are consecutive ranks
        (a world's, or the universe's with its spare slots), one look at all
        their rings' head and tail words instead of a peek at each."""
        words = self._ring_words(tuple(sources))
        if not words:
            return sources
        heads, tails = words
        if not self._stash and heads == tails:  # memoryviews: compared word by word in C
            return []
        found = [i for i, (head, tail) in enumerate(zip(heads, tails)) if head != tail]
        if self._stash:
            found = sorted({*found, *(i for i, src in enumerate(sources) if (ctx, src) in self._stash)})
        return [sources[i] for i in found]

    def may_have_mail(self, sources: tuple) -> bool:
        """False only if the rings from ``sources`` (world ranks) to this
        rank are empty and no message is set aside. A poll (``S_POLLS``)."""
        self._arena.q[self._status + S_POLLS] += 1
        if self._stash:
            return True
        words = self._ring_words(sources)
        return not words or words[0] != words[1]  # memoryviews: compared word by word in C

    def _ring_words(self, sources: tuple) -> tuple:
        """Views of the head and the tail words of the rings from
        ``sources`` to this rank, if consecutive ranks (else empty); found
        once per tuple of sources."""
        words = self._probe_words.get(sources)
        if words is None:
            words = self._probe_words[sources] = self._find_ring_words(sources)
        return words

    def _find_ring_words(self, sources: tuple) -> tuple:
        span = self.ring_span(sources)
        if span is None:
            return ()
        head, tail, stride, n = span
        q = self._arena.q
        return q[head:head + n * stride:stride], q[tail:tail + n * stride:stride]

    def ring_span(self, sources: tuple) -> tuple | None:
        """The head and the tail word of the ring from ``sources[0]`` to
        this rank, the step to the next source's, and how many: None unless
        ``sources`` are consecutive world ranks."""
        first, n = sources[0], len(sources)
        if sources != tuple(range(first, first + n)):
            return None
        lay, me = self._arena.layout, self._me
        line = lay.pair_word(first, me)
        stride = lay.pair_word(first + 1, me) - line
        return line + R_HEAD, line + R_TAIL, stride, n

    @property
    def polls_word(self) -> int:
        """The word of this rank's status that counts its polls (``S_POLLS``)."""
        return self._status + S_POLLS

    def _enter_probe(self, sources: list[int], tag: int | None, any_source: bool) -> None:
        self._enter(PROBE, self._me if any_source else sources[0], -1 if tag is None else tag,
                    P2P_ANY_SOURCE if any_source else 0)

    # -- sending without waiting -------------------------------------------------
    def fits(self, x: np.ndarray, dest: int) -> bool:
        """True if a send of ``x`` to ``dest`` would not wait: its whole record
        fits in the ring's free space now (only the receiver frees space)."""
        ring = self._ring(self._me, dest)
        q = self._arena.q
        return ring.cap - (q[ring.head] - q[ring.tail]) >= record_bytes(x.nbytes, x.ndim)


class _Ring:
    """The (src -> dst) ring, seen from one end."""

    def __init__(self, boxes: Mailboxes, src: int, dst: int):
        arena = boxes._arena
        lay = arena.layout
        self.arena = arena
        self.head = lay.pair_word(src, dst) + R_HEAD
        self.tail = lay.pair_word(src, dst) + R_TAIL
        self.src, self.dst = src, dst
        self.cap = lay.ring_bytes
        self.bytes = boxes._rings[src * lay.size + dst]
        self.first_word = lay.ring_offset(src, dst) // 8

    def peek(self) -> tuple[int | None, int | None, int]:
        """``(ctx, tag, head)`` of the record at the tail, without taking it;
        ``(None, None, head)`` while fewer than its first two words are in
        the ring. The tail sits at a record boundary (records are padded to
        8 bytes and the ring is a multiple of 8), so each word is whole."""
        q = self.arena.q
        tail = q[self.tail]
        head = q[self.head]  # loaded before the words it publishes
        if head - tail < 16:
            return None, None, head
        at = self.first_word + tail % self.cap // 8
        nxt = self.first_word + (tail + 8) % self.cap // 8
        return q[at], q[nxt], head

    def put(self, data: np.ndarray) -> None:
        q, cap = self.arena.q, self.cap
        head = q[self.head]
        pos, n = 0, data.size
        while pos < n:
            free = cap - (head - q[self.tail])
            if free == 0:
                self.arena.wait_words([self.tail], head - cap + 1, [self.dst])
                continue
            at = head % cap
            k = min(free, n - pos, cap - at)
            self.bytes[at : at + k] = data[pos : pos + k]
            head += k
            pos += k
            self.arena.publish(self.head, head, (self.dst,))

    def get(self, out: np.ndarray) -> None:
        q, cap = self.arena.q, self.cap
        tail = q[self.tail]
        pos, n = 0, out.size
        while pos < n:
            avail = q[self.head] - tail
            if avail == 0:
                self.arena.wait_words([self.head], tail + 1, [self.src])
                continue
            at = tail % cap
            k = min(avail, n - pos, cap - at)
            out[pos : pos + k] = self.bytes[at : at + k]
            tail += k
            pos += k
            self.arena.publish(self.tail, tail, (self.src,))
