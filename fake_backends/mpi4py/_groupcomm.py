"""Communicators made collectively over a group only (``Comm.Create_group``).

The simulator makes a communicator by splitting one that all its members
call; ``MPI_Comm_create_group`` is called by the group's members only. So
such a communicator is a ``GroupComm``: the collectives the stand-in asks of
a communicator (``allgather``, ``allreduce``, ``split``, ...: the SimComm
calls) made of the stand-in's point-to-point messages (``_p2p``) among the
members. They stay deterministic: every reduction is the fold in rank
order (``simdist._reduction.fold``), as the simulator's; every message
names its call, so members that call different collectives raise
``simdist.CollectiveMismatch`` instead of exchanging garbage, and a member
that never calls is a hang the engine's wait reports.

Contexts. Each ``GroupComm`` has a message context of its own: bit 58, the
world rank of the member that picked it (the group's first) and a counter
of that process; its collectives travel in that context with bit 60
flipped, so its point-to-point receives never see them. ``Create_group``'s
leader sends the context to the other members in the parent's context with
bit 59 flipped and the user's tag, so that concurrent ``Create_group``
calls with different tags do not mix. (Neighbour collectives flip bit 61:
``_neighbors``.)
"""

from __future__ import annotations

import itertools

import numpy as np

from simdist._arguments import check_op
from simdist._errors import CollectiveMismatch
from simdist._reduction import fold
from simdist._signature import call_name

from ._p2p import PICKLED
from ._pickle import pickle

COLLECTIVE_BIT, HANDSHAKE_BIT, GROUP_CONTEXT_BIT = 1 << 60, 1 << 59, 1 << 58
_counter = itertools.count()  # this process's contexts picked so far


def new_context(world_rank: int) -> int:
    """A context no other communicator of the run has: picked by ``world_rank``."""
    return GROUP_CONTEXT_BIT | world_rank << 24 | next(_counter)


class _Endpoint:
    """What the stand-in reads of a communicator's transport."""

    def __init__(self, context: int, members):
        self.context, self.members = context, tuple(members)


class GroupComm:
    """A communicator's collectives on point-to-point (see the module docstring)."""

    def __init__(self, engine, members, rank: int, context: int):
        self.engine = engine
        self.rank, self.size = rank, len(members)
        self.transport = _Endpoint(context, members)
        self._ctx = context ^ COLLECTIVE_BIT
        self.origin = "a communicator of Create_group"  # what its reports name it

    def set_name(self, name: str) -> None:
        """Name this communicator in reports (``MPI_Comm_set_name``)."""
        self.origin = name

    # -- the exchange every collective is made of ---------------------------------------
    def _exchange(self, kind: str, outgoing: dict, sources, signature: str = "") -> dict:
        """Send ``outgoing[dest]`` to each dest, then receive from each of
        ``sources``; the objects received, by source. Every object is
        pickled before the first send: one that cannot be leaves nothing sent.
        ``signature`` (dtype, shape, op, root) must be every member's."""
        engine, members, where = self.engine, self.transport.members, self.origin
        kind = call_name(kind, where)
        if signature:
            kind = f"{kind} ({signature})"
        payloads = {dest: np.frombuffer(pickle.dumps((kind, obj)), np.uint8) for dest, obj in outgoing.items()}
        sends = [engine.send(members[dest], self._ctx, self.rank, 0, payload, PICKLED, False, kind)
                 for dest, payload in payloads.items()]
        got = {}
        for source in sources:
            op = engine.recv(self._ctx, source, 0, None, f"{kind} (from rank {source})")
            engine.wait_until(lambda op=op: op.done, f"{kind} on {where}", peer=members[source])
            their_kind, obj = pickle.loads(memoryview(op.data))
            if their_kind != kind:
                raise CollectiveMismatch(f"rank {self.rank}: {kind} met rank {source}'s {their_kind} on {where}",
                                         {self.rank: kind, source: their_kind})
            got[source] = obj
        pending = next((op.dest for op in sends if not op.done), None)
        if pending is not None:  # a large payload waits for its receiver
            engine.wait_until(lambda: all(op.done for op in sends), f"{kind} on {where}", peer=pending)
        return got

    def _everyone(self):
        return range(self.size)

    # -- the calls of a simulator communicator ------------------------------------------
    def allgather(self, x, kind: str = "allgather", op: str = ""):
        x = np.asarray(x)
        got = self._exchange(kind, {j: x for j in self._everyone()}, self._everyone(), _signature(x, op))
        return np.stack([got[j] for j in self._everyone()])

    def gather(self, x, root=0, kind: str = "gather", op: str = ""):
        x = np.asarray(x)
        got = self._exchange(kind, {root: x}, self._everyone() if self.rank == root else (),
                             _signature(x, op, root))
        return np.stack([got[j] for j in self._everyone()]) if self.rank == root else None

    def broadcast(self, x, root=0):
        outgoing = {j: np.asarray(x) for j in self._everyone()} if self.rank == root else {}
        return self._exchange("broadcast", outgoing, (root,), f"root={root}")[root]

    def scatter(self, x, root=0):
        outgoing = {j: np.asarray(x)[j] for j in self._everyone()} if self.rank == root else {}
        return self._exchange("scatter", outgoing, (root,), f"root={root}")[root]

    def alltoall(self, x):
        x = np.asarray(x)
        got = self._exchange("alltoall", {j: x[j] for j in self._everyone()}, self._everyone(), _signature(x))
        return np.stack([got[j] for j in self._everyone()])

    def allreduce(self, x, op="sum"):
        x = np.asarray(x)
        check_op(op, x.dtype, self.rank, "allreduce")
        parts = list(self.allgather(x, "allreduce", op))
        return fold(op, parts, np.empty_like(x))

    def reduce(self, x, root=0, op="sum"):
        x = np.asarray(x)
        check_op(op, x.dtype, self.rank, "reduce")
        parts = self.gather(x, root, "reduce", op)
        return None if parts is None else fold(op, list(parts), np.empty_like(x))

    def reduce_scatter(self, x, op="sum"):
        return self.allreduce(x, op)[self.rank]

    def barrier(self):
        self._exchange("barrier", {j: None for j in self._everyone()}, self._everyone())

    def split(self, color, key=0):
        """As ``SimComm.split``; the new communicator's context is picked by its first member."""
        mine = (color, key, self.transport.members[self.rank])
        table = self._exchange("split", {j: mine for j in self._everyone()}, self._everyone())
        if color is None:
            return None
        group = sorted((table[j][1], j) for j in self._everyone() if table[j][0] == color)
        ranks = [j for _, j in group]
        members = [table[j][2] for j in ranks]
        first = ranks[0]
        if self.rank == first:
            context = new_context(members[0])
            self._exchange("split context", {j: context for j in ranks[1:]}, ())
        else:
            context = self._exchange("split context", {}, (first,))[first]
        return GroupComm(self.engine, members, ranks.index(self.rank), context)

    def free(self):
        self.barrier()


def _signature(x: np.ndarray, op: str = "", root: int = -1) -> str:
    """What every member of a collective must pass alike: dtype, shape, op, root."""
    return ", ".join([f"{x.dtype} {x.shape}"] + ([f"op={op}"] if op else []) + ([f"root={root}"] if root >= 0 else []))


def create_group(st, ranks, tag: int) -> GroupComm:
    """The ``GroupComm`` of ``ranks`` (world ranks, this process among them)
    for the members of ``st``'s communicator that call ``Create_group`` with
    ``tag``: the first member picks the context and sends it to the others."""
    engine, me = st.engine, st.members[st.rank]
    leader = st.members.index(ranks[0])
    ctx = st.ctx ^ HANDSHAKE_BIT
    desc = f"Create_group(tag={tag}) on {st.name}"
    if me == ranks[0]:
        context = new_context(me)
        payload = np.array([context], np.int64).view(np.uint8)
        sends = [engine.send(w, ctx, st.rank, tag, payload, 0, False, desc) for w in ranks[1:]]
        engine.wait_until(lambda: all(op.done for op in sends), desc)
    else:
        sink = np.zeros(8, np.uint8)
        op = engine.recv(ctx, leader, tag, sink, desc)
        engine.wait_until(lambda: op.done, desc)
        context = int(sink.view(np.int64)[0])
    return GroupComm(engine, ranks, ranks.index(me), context)
