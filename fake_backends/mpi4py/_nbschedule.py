"""The schedule of a nonblocking collective: one message from every rank of
the communicator to every other rank, over the point-to-point engine.

A nonblocking (``Iallreduce``) or persistent (``Allreduce_init``)
collective starts by posting, to each other rank, one receive and one send
in a context of its own: the communicator's with bit 60 flipped, so that no
user receive and no neighbour collective (bit 61) matches them. Each
message carries the sender's *signature* of the call (its sequence number
among the communicator's collectives, the collective, the root, the op,
the datatype and counts MPI requires to agree) and the payload the
receiver needs (a block, the whole buffer, or nothing). Since messages
from one sender arrive in order, the k-th collective message a rank takes
from a peer is that peer's k-th collective: collectives match in call
order per communicator, whatever the order of the Waits.

The request is done once every receive and send is; then the receiver
compares every peer's signature with its own (a difference raises
``simdist.CollectiveMismatch``, never wrong data) and the call's
``finish`` builds the result from the payloads, indexed by rank (the
rank's own part is kept at start). Reductions fold the parts in rank
order, as the blocking forms do, so the bits are theirs. Blocking
collectives count in the same sequence, so a program that calls them in
a different order around a nonblocking one on two ranks is told so.

A rank that never starts the collective leaves its peers waiting in the
engine's probe, which the simulator's hang watch reports; the request's
description (in that report) names the ranks not heard from.
"""

from __future__ import annotations

import numpy as np

from simdist._errors import CollectiveMismatch

from ._errors import Exception as MPIException
from ._p2p import ANY_TAG, SendOp

#: Flipped in a communicator's context to give that of its nonblocking collectives.
NBC_CONTEXT_BIT = 1 << 60
EMPTY = np.empty(0, np.uint8)


def next_sequence(st) -> int:
    """Count one more collective on the communicator of ``st`` (blocking
    ones too): its number in the call order every rank must follow."""
    st.coll_seq += 1
    return st.coll_seq


class Counted:
    """The SimComm of a blocking collective, counting the call in the
    communicator's sequence when the collective is entered (its checks
    passed): a call that raises before has changed nothing."""

    __slots__ = ("_st", "_sc")

    def __init__(self, st):
        self._st, self._sc = st, st.sc

    def __getattr__(self, name):
        if self._st is not None:
            next_sequence(self._st)
            self._st = None
        return getattr(self._sc, name)


def _message(seq: int, signature: bytes, payload: np.ndarray) -> np.ndarray:
    head = np.array([seq, len(signature)], np.int64).view(np.uint8)
    return np.concatenate([head, np.frombuffer(signature, np.uint8), payload.reshape(-1).view(np.uint8)])


def _unpack(data: np.ndarray) -> tuple[int, str, np.ndarray]:
    seq, length = (int(v) for v in data[:16].view(np.int64))
    return seq, bytes(data[16:16 + length]).decode(), data[16 + length:]


class CollectiveOp(SendOp):
    """One nonblocking collective in progress, as a request's operation."""

    __slots__ = ("recvs", "sends", "parts", "finish", "finished", "mismatch", "call", "where", "seq",
                 "signature", "me", "members")
    collective = True

    def __init__(self, call: str, where: str, seq: int, signature: str, me: int, finish):  # noqa: D107
        self.call, self.where, self.seq, self.signature, self.me = call, where, seq, signature, me
        self.finish, self.finished, self.mismatch, self.error = finish, False, None, None
        self.recvs, self.sends, self.parts = [], [], []

    @property
    def desc(self) -> str:
        missing = [rank for rank, op in enumerate(self.recvs) if op is not None and not op.done]
        text = f"{self.call} #{self.seq} on {self.where}"
        if missing:
            text += f": rank {', '.join(map(str, missing))} never called {self.call}"
        return text

    @property
    def done(self) -> bool:
        if self.mismatch is not None:
            raise self.mismatch
        if self.finished:
            return True
        if not all(op.done for op in self.sends) or not all(op is None or op.done for op in self.recvs):
            return False
        self._finish()
        return True

    def _finish(self) -> None:
        parts = list(self.parts)
        for rank, op in enumerate(self.recvs):
            if op is None:
                continue
            seq, signature, payload = _unpack(op.data)
            if (seq, signature) != (self.seq, self.signature):
                mine = f"{self.signature} (collective #{self.seq})"
                theirs = f"{signature} (collective #{seq})"
                self.mismatch = CollectiveMismatch(
                    f"{self.call} on {self.where}: rank {self.me} called {mine} but rank {rank} called {theirs} "
                    f"at the same position in the communicator's order of collectives",
                    {self.me: mine, rank: theirs})
                raise self.mismatch
            parts[rank] = payload
        self.finished = True
        self.parts = []
        try:
            self.finish(parts)
        except MPIException as exc:
            self.error = exc


def start(st, call: str, signature: str, payloads: list, finish):
    """Post the schedule of one collective of ``st``'s communicator:
    ``payloads[j]`` (uint8) goes to rank ``j`` (the rank's own entry is kept
    as its part); ``finish(parts)`` runs once all have arrived. Returns the
    request. Posting never raises for the call's arguments."""
    from ._requests import Request

    engine, me = st.engine, st.rank
    seq = next_sequence(st)
    ctx = st.ctx ^ NBC_CONTEXT_BIT
    op = CollectiveOp(call, st.name, seq, signature, me, finish)
    op.parts = [None] * st.size
    op.parts[me] = np.array(payloads[me], copy=True).reshape(-1).view(np.uint8)
    sig = signature.encode()
    op.recvs = [None if rank == me else engine.recv(ctx, rank, ANY_TAG, None, f"{call} on {st.name}")
                for rank in range(st.size)]
    op.sends = [engine.send(st.members[rank], ctx, me, 0, _message(seq, sig, payloads[rank]), 0, False,
                            f"{call} on {st.name}")
                for rank in range(st.size) if rank != me]
    engine.progress()
    return Request._of(engine, op)
