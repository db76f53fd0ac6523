"""Point-to-point messages: one byte ring per ordered pair of ranks.

The sender of a pair writes records into its ring and advances ``head``; the
receiver copies them out and advances ``tail`` (both in the arena's p2p
index, each with one writer). A record is a header of int64 words
``ctx, tag, dtype code, ndim, nbytes, shape...`` and the payload, padded to
8 bytes. A message that does not fit in the ring's free space is streamed:
the sender waits for the receiver to make room, so ``send`` returns at once
for small messages and waits for the matching ``recv`` for large ones, as a
standard-mode MPI send may.

The receiver reads its ring in order; a message with another (ctx, tag)
than the one asked for is copied into a private queue, where a later
``recv`` finds it. So messages between a pair with one tag arrive in order.
"""

from __future__ import annotations

import collections
import struct

import numpy as np

from .._checks import DTYPE_CODE, DTYPES
from ._arena import CALL, S_CTX, S_P2P_KIND, S_P2P_NBYTES, S_P2P_PEER, S_P2P_SEQ, S_P2P_TAG, S_PROGRESS, S_STATE, USER
from ._report import P2P_CTX

_HEAD = struct.Struct("5q")
SEND, RECV = 1, 2


class Mailboxes:
    """The p2p state of one rank for one run."""

    def __init__(self, arena):
        self._arena = arena
        self._me = arena.rank
        lay = arena.layout
        self._ring_bytes = lay.ring_bytes
        self._stash: dict[tuple[int, int, int], collections.deque] = collections.defaultdict(collections.deque)
        self._seq = 0
        self._status = lay.status_word(self._me, 0)
        ring = np.ndarray((lay.size * lay.size * lay.ring_bytes,), np.uint8, arena.mm, lay.rings)
        self._rings = ring.reshape(lay.size * lay.size, lay.ring_bytes)

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

    # -- sending ------------------------------------------------------------
    def send(self, x: np.ndarray, dest: int, tag: int, ctx: int) -> None:
        self._enter(SEND, dest, tag, x.nbytes)
        try:
            header = _HEAD.pack(ctx, tag, DTYPE_CODE[x.dtype], x.ndim, x.nbytes) + struct.pack(f"{x.ndim}q", *x.shape)
            payload = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
            pad = -x.nbytes % 8
            ring = _Ring(self, self._me, dest)
            ring.put(np.frombuffer(header, np.uint8))
            ring.put(payload)
            if pad:
                ring.put(np.zeros(pad, np.uint8))
        finally:
            self._leave()

    # -- receiving ------------------------------------------------------------
    def recv(self, source: int, tag: int, ctx: int) -> np.ndarray:
        waiting = self._stash.get((ctx, source, tag))
        if waiting:
            return waiting.popleft()
        self._enter(RECV, source, tag, 0)
        try:
            ring = _Ring(self, source, self._me)
            while True:
                head = np.empty(5, np.int64)
                ring.get(head.view(np.uint8))
                m_ctx, m_tag, code, ndim, nbytes = (int(v) for v in head)
                shape = np.empty(ndim, np.int64)
                ring.get(shape.view(np.uint8))
                out = np.empty(tuple(int(d) for d in shape), DTYPES[code - 1])
                ring.get(out.reshape(-1).view(np.uint8))
                if nbytes % 8:
                    ring.get(np.empty(-nbytes % 8, np.uint8))
                if (m_ctx, m_tag) == (ctx, tag):
                    return out
                self._stash[(m_ctx, source, m_tag)].append(out)
        finally:
            self._leave()


class _Ring:
    """The (src -> dst) ring, seen from one end."""

    def __init__(self, boxes: Mailboxes, src: int, dst: int):
        arena = boxes._arena
        lay = arena.layout
        self.arena = arena
        self.head = lay.pair_word(src, dst)
        self.tail = self.head + 1
        self.src, self.dst = src, dst
        self.cap = lay.ring_bytes
        self.bytes = boxes._rings[src * lay.size + dst]

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
