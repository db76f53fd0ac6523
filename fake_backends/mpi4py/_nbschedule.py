"""The schedule of a nonblocking collective: one message from every rank of
the communicator to every other rank, over the point-to-point engine.

A nonblocking (``Iallreduce``) or persistent (``Allreduce_init``)
collective starts by posting, to each other rank, one receive and one send
in a context of its own: the communicator's with bit 60 flipped, so that no
user receive and no neighbour collective (bit 61) matches them. Each
message carries the sender's *signature* of the call (its sequence number
among the communicator's collectives, the collective, the root, the op,
the datatype and counts MPI requires to agree) and the payload the
receiver needs (a block, the whole buffer, or nothing); a large payload
follows in a message of its own, sent from the buffer without a copy. Since messages
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
from ._p2p import SendOp

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
    passed): a call that raises before has changed nothing.

    When a message is in flight as the collective starts (a receive
    pending, say), the engine takes what has arrived once its first step
    returns: what the peers sent before they entered the collective has then
    landed, however soon they entered it, so a buffer of a pending receive
    read after a Barrier holds the same bytes in every run (the simulator
    moves messages only while the rank waits). With nothing in flight there
    is nowhere for a message to land, and the call is the SimComm's own."""

    __slots__ = ("_st", "_sc")

    def __init__(self, st):
        self._st, self._sc = st, st.sc

    def __getattr__(self, name):
        st = self._st
        if st is None:
            return getattr(self._sc, name)
        next_sequence(st)
        self._st = None
        method, engine = getattr(self._sc, name), st.engine
        if not callable(method) or not engine.in_flight():
            return method

        def then_progress(*args, **kwargs):
            out = method(*args, **kwargs)
            if engine.in_flight():
                engine.progress()
            return out

        return then_progress


def _counted_call(name: str):
    def call(self, *args, **kwargs):
        st = self._st
        if st is None or st.engine.in_flight():
            return self.__getattr__(name)(*args, **kwargs)
        st.coll_seq += 1  # next_sequence and __getattr__, written out: every blocking collective passes here
        self._st = None
        return getattr(self._sc, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


# The collectives' own names, found without the failed lookup (an AttributeError
# raised and caught) that precedes every __getattr__: a microsecond a call.
for _name in ("barrier", "broadcast", "gather", "scatter", "allgather", "alltoall", "alltoall_sized", "allreduce",
              "reduce", "reduce_scatter"):
    setattr(Counted, _name, _counted_call(_name))


#: A payload of more bytes, in a call whose receivers know the size of
#: what each peer sends them (``start``'s ``incoming``: the reductions),
#: travels in a message of its own (tag 1) after the signature's (tag 0),
#: sent from the buffer itself: joining the two would copy the whole
#: payload once more. Its receive is posted at the start, so the message
#: moves while the rank waits in any call, as MPI's progress rule wants.
SEPARATE = 256 << 10


def _message(seq: int, signature: bytes, payload: np.ndarray, separate: bool) -> np.ndarray:
    """The signature's message; the payload in it unless it is sent ``separate``ly."""
    head = np.array([seq, len(signature), separate], np.int64).view(np.uint8)
    inline = EMPTY if separate else payload.reshape(-1).view(np.uint8)
    return np.concatenate([head, np.frombuffer(signature, np.uint8), inline])


def _unpack(data: np.ndarray) -> tuple[int, str, bool, np.ndarray]:
    seq, length, separate = (int(v) for v in data[:24].view(np.int64))
    return seq, bytes(data[24:24 + length]).decode(), bool(separate), data[24 + length:]


class CollectiveOp(SendOp):
    """One nonblocking collective in progress, as a request's operation."""

    __slots__ = ("recvs", "sends", "parts", "finish", "finished", "mismatch", "call", "where", "seq",
                 "signature", "me", "members", "payloads")
    collective = True

    def __init__(self, call: str, where: str, seq: int, signature: str, me: int, finish):  # noqa: D107
        self.call, self.where, self.seq, self.signature, self.me = call, where, seq, signature, me
        self.finish, self.finished, self.mismatch, self.error = finish, False, None, None
        self.recvs, self.sends, self.parts = [], [], []
        self.payloads: dict = {}  # rank -> the receive of its separate payload

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
        if (not all(op.done for op in self.sends) or not all(op is None or op.done for op in self.recvs)
                or not all(op.done for op in self.payloads.values())):
            if self.payloads:  # a peer that called another collective sends no separate payload: say so now
                for rank, op in enumerate(self.recvs):
                    if op is not None and op.done:
                        self._payload(rank, op.data)
            return False
        self._finish()
        return True

    def _payload(self, rank: int, data: np.ndarray) -> np.ndarray | None:
        """``rank``'s payload, from its message (None: in a message of its own);
        raises ``CollectiveMismatch`` if its call is not this one."""
        seq, signature, separate, payload = _unpack(data)
        if (seq, signature, separate) != (self.seq, self.signature, rank in self.payloads):
            mine = f"{self.signature} (collective #{self.seq})"
            theirs = f"{signature} (collective #{seq})"
            self.mismatch = CollectiveMismatch(
                f"{self.call} on {self.where}: rank {self.me} called {mine} but rank {rank} called {theirs} "
                f"at the same position in the communicator's order of collectives",
                {self.me: mine, rank: theirs})
            raise self.mismatch
        return None if separate else payload

    def _finish(self) -> None:
        parts = list(self.parts)
        for rank, op in enumerate(self.recvs):
            if op is not None:
                payload = self._payload(rank, op.data)
                parts[rank] = self.payloads[rank].data if payload is None else payload
        self.finished = True
        self.parts, self.payloads = [], {}
        try:
            self.finish(parts)
        except MPIException as exc:
            self.error = exc


def start(st, call: str, signature: str, payloads: list, finish, incoming: list[int] | None = None):
    """Post the schedule of one collective of ``st``'s communicator:
    ``payloads[j]`` (uint8) goes to rank ``j`` (the rank's own entry is kept
    as its part); ``finish(parts)`` runs once all have arrived. Returns the
    request. Posting never raises for the call's arguments. ``incoming[j]``:
    the bytes rank ``j`` sends this rank, where the call's signature fixes
    them (None: unknown); large payloads then travel ``SEPARATE``ly."""
    from ._requests import Request

    engine, me = st.engine, st.rank
    seq = next_sequence(st)
    ctx = st.ctx ^ NBC_CONTEXT_BIT
    op = CollectiveOp(call, st.name, seq, signature, me, finish)
    op.parts = [None] * st.size
    own = payloads[me].reshape(-1).view(np.uint8)
    # where the call fixes the sizes (the reductions), the rank's own part is
    # read from its buffer at the end: MPI forbids changing it before
    op.parts[me] = own if incoming is not None else own.copy()
    sig = signature.encode()
    desc = f"{call} on {st.name}"
    op.recvs = [None if rank == me else engine.recv(ctx, rank, 0, None, desc) for rank in range(st.size)]
    if incoming is not None:
        op.payloads = {rank: engine.recv(ctx, rank, 1, None, desc)
                       for rank, nbytes in enumerate(incoming) if rank != me and nbytes > SEPARATE}
    for rank in range(st.size):
        if rank != me:
            payload = payloads[rank]
            separate = incoming is not None and payload.nbytes > SEPARATE
            op.sends.append(engine.send(st.members[rank], ctx, me, 0, _message(seq, sig, payload, separate), 0,
                                        False, desc))
            if separate:
                op.sends.append(engine.send(st.members[rank], ctx, me, 1, payload.reshape(-1).view(np.uint8), 0,
                                            False, desc))
    engine.progress()
    return Request._of(engine, op)
