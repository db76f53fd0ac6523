"""Intercommunicators: ``Intracomm.Create_intercomm`` and ``MPI.Intercomm``.

An intercommunicator joins two disjoint groups, the local one (this
process's) and the remote one: ``Get_size``/``Get_rank`` are the local
group's, point-to-point ranks name processes of the remote group, and
collectives move data between the groups (``_intercoll``).

Its state is a ``_State`` whose ``members`` are the REMOTE group's world
ranks (so that the point-to-point calls of ``_pointtopoint``, which map a
destination rank through ``members``, reach the remote group) and whose
``rank``/``size`` are the local group's; a message's source is the
sender's rank in its own group, which is the remote rank the receiver
names. Its ``sc`` is a ``GroupComm`` (``_groupcomm``) of the union of both
groups -- first the group whose first process has the lower world rank --
whose messages carry the collectives, ``Merge`` and ``Dup``.

``Create_intercomm`` (collective over the local communicator): the two
leaders exchange their groups' world ranks and a fresh context over the
peer communicator (in its context with bits 59 and 60 flipped, with the
user's tag, so that the handshake never meets the program's messages),
take the context the leader of the union's first group picked, and each
broadcasts the remote group and the context over its local communicator.
"""

from __future__ import annotations

import numpy as np

from . import _errhandlers, _runtime
from ._comm import INTERCOMM_CLASS, Comm, Intracomm, _State
from ._errors import ERR_ARG, ERR_COMM, ERR_GROUP, ERR_RANK, Exception as MPIException, unsupported
from ._groupcomm import COLLECTIVE_BIT, HANDSHAKE_BIT, GroupComm, new_context
from ._handles import new_handle
from ._groups import Group, _Members
from ._intercoll import InterCollectives
from ._pickle import pickle
from ._pointtopoint import c_int

_HANDSHAKE = HANDSHAKE_BIT | COLLECTIVE_BIT
_FROM_GROUPS = COLLECTIVE_BIT | 1 << 61


class _InterState(_State):
    """An intercommunicator's state (see the module docstring)."""

    __slots__ = ("local_members", "local_offset", "remote_offset")
    inter = True


def _inter_state(parent, union: GroupComm, local: list, remote: list, first: bool, name: str) -> _InterState:
    union.origin = f"the intercommunicator {name}"
    st = _InterState(parent.rt, union, union.transport.context, list(remote), name, parent=parent)
    st.local_members = list(local)
    st.local_offset, st.remote_offset = (0, len(local)) if first else (len(remote), 0)
    st.rank, st.size = union.rank - st.local_offset, len(local)
    return st


def _leaders_exchange(engine, ctx: int, rank: int, remote: tuple, tag: int, local: list, desc: str):
    """(remote group, context, whether the local group comes first), as the
    local leader (``rank`` in the context ``ctx``) learns them from the
    remote leader (``remote``: its rank in ``ctx`` and its world rank). The
    group whose first process has the lower world rank comes first, and its
    leader's context is taken."""
    remote_leader, remote_world = remote
    proposal = new_context(_runtime.get().me)
    payload = np.frombuffer(pickle.dumps((tuple(local), proposal, local[0])), np.uint8)
    send = engine.send(remote_world, ctx, rank, tag, payload, 0, False, desc)
    recv = engine.recv(ctx, remote_leader, tag, None, desc)
    engine.wait_until(lambda: recv.done and send.done, desc)
    remote, their_proposal, their_first = pickle.loads(memoryview(recv.data))
    first = local[0] < their_first
    return list(remote), proposal if first else their_proposal, first


def _peer_exchange(peer, remote_leader: int, tag: int, local: list):
    """``_leaders_exchange`` over the peer communicator of Create_intercomm."""
    pst = peer._st()
    remote_leader = c_int(remote_leader, "remote_leader")
    if not 0 <= remote_leader < pst.size:
        raise MPIException(ERR_RANK, f"Create_intercomm: remote_leader={remote_leader!r} on {pst.name} of "
                           f"{pst.size} ranks")
    desc = f"Create_intercomm(remote_leader={remote_leader}, tag={tag}) on {pst.name}"
    return _leaders_exchange(pst.engine, pst.ctx ^ _HANDSHAKE, pst.rank, (remote_leader, pst.members[remote_leader]),
                             tag, local, desc)


def create_intercomm(self, local_leader: int, peer_comm, remote_leader: int, tag: int = 0) -> "Intercomm":
    """MPI_Intercomm_create (collective over this communicator): an
    intercommunicator to the group of ``remote_leader`` (a rank of
    ``peer_comm``, which only the local leader reads)."""
    st = self._st()
    local_leader, tag = c_int(local_leader, "local_leader"), c_int(tag, "tag")
    if not 0 <= local_leader < st.size:
        raise MPIException(ERR_RANK, f"Create_intercomm: local_leader={local_leader!r} on {st.name} of "
                           f"{st.size} ranks")
    if tag < 0:
        raise MPIException(ERR_ARG, f"Create_intercomm: tag={tag!r} must be an int >= 0")
    if st.rank == local_leader:
        if not isinstance(peer_comm, Comm):
            raise TypeError(f"Create_intercomm: peer_comm must be an MPI.Comm, got {type(peer_comm).__name__}")
        found = _peer_exchange(peer_comm, remote_leader, tag, list(st.members))
    else:
        found = None
    return from_leader(self, found, local_leader, "Create_intercomm")


def from_leader(comm, found, leader: int, call: str) -> "Intercomm":
    """The intercommunicator of ``comm``'s group and the remote group whose
    ``found`` (``_leaders_exchange``'s answer) ``comm``'s rank ``leader``
    learnt; collective over ``comm``, which it broadcasts over."""
    st = comm._st()
    local = list(st.members)
    remote, context, first = comm.bcast(found, leader)
    if set(remote) & set(local):
        raise MPIException(ERR_COMM, f"{call}: the groups overlap (world ranks {sorted(set(remote) & set(local))})")
    union = local + remote if first else remote + local
    gc = GroupComm(st.engine, union, union.index(st.members[st.rank]), context)
    return _new_intercomm(_inter_state(st, gc, local, remote, first, f"{call} of {st.name}"))


def create_from_groups(cls, local_group, local_leader: int, remote_group, remote_leader: int,
                       stringtag: str = "org.mpi4py", info=None, errhandler=None) -> "Intercomm":
    """MPI_Intercomm_create_from_groups (collective over both groups, no
    parent communicator): the local group's processes make a communicator
    of their own (``Intracomm.Create_from_group``), the leaders exchange
    over the world's context with bits 60 and 61 flipped and a tag of the
    string tag, then each leader broadcasts what it learnt."""
    from ._sessions import create_from_group, stringtag_tag

    local, remote = list(local_group._ranks("Create_from_groups")), list(remote_group._ranks("Create_from_groups"))
    local_leader, remote_leader = c_int(local_leader, "local_leader"), c_int(remote_leader, "remote_leader")
    for leader, group, which in ((local_leader, local, "local"), (remote_leader, remote, "remote")):
        if not 0 <= leader < len(group):
            raise MPIException(ERR_RANK, f"Create_from_groups: {which}_leader={leader!r} in a group of {len(group)}")
    local_comm = create_from_group(Intracomm, local_group, stringtag, info, errhandler)
    lst = local_comm._st()
    if lst.rank == local_leader:
        desc = f"Intercomm.Create_from_groups(stringtag={stringtag!r})"
        found = _leaders_exchange(lst.engine, lst.rt.universe.context ^ _FROM_GROUPS, lst.rt.me,
                                  (remote[remote_leader], remote[remote_leader]), stringtag_tag(stringtag),
                                  local, desc)
    else:
        found = None
    got, context, first = local_comm.bcast(found, local_leader)
    local_comm.Free()
    if got != remote:
        raise MPIException(ERR_GROUP, f"Create_from_groups: the remote leader's group is {got}, not {remote}")
    union = local + remote if first else remote + local
    gc = GroupComm(lst.engine, union, union.index(local[lst.rank]), context)
    st = _inter_state(lst, gc, local, remote, first, f"Create_from_groups(stringtag={stringtag!r})")
    if errhandler is not None:
        st.errhandler = errhandler
    return _new_intercomm(st)


def _new_intercomm(st) -> "Intercomm":
    comm = new_handle(Intercomm)
    comm._state = st
    return comm


class Intercomm(InterCollectives, Comm):
    """An intercommunicator (see the module docstring); the calls are mpi4py's."""

    def _init(self, comm: "Comm | None" = None) -> None:
        super()._init(comm)
        if self._state is not None and not self._state.inter:
            raise TypeError("expecting an intercommunicator")

    def _st(self) -> _InterState:
        st = super()._st()
        if not isinstance(st, _InterState):
            raise TypeError("expecting an intercommunicator")
        return st

    Create_from_groups = classmethod(create_from_groups)

    def Is_inter(self) -> bool:
        self._st()
        return True

    def Is_intra(self) -> bool:
        self._st()
        return False

    is_inter = property(Is_inter)
    is_intra = property(Is_intra)

    def Get_remote_size(self) -> int:
        return len(self._st().members)

    remote_size = property(Get_remote_size)

    def Get_group(self) -> Group:
        """The local group."""
        st = self._st()
        if st.group is None:
            st.group = _Members(st.local_members)
        return Group._of(st.group)

    group = property(Get_group)

    def Get_remote_group(self) -> Group:
        return Group._from_ranks(self._st().members)

    remote_group = property(Get_remote_group)

    def Compare(self, comm) -> int:
        from ._comm import CONGRUENT, IDENT, UNEQUAL

        a, b = self._st(), comm._st()
        if a is b:
            return IDENT
        same = isinstance(b, _InterState) and (a.local_members, a.members) == (b.local_members, b.members)
        return CONGRUENT if same else UNEQUAL

    def Merge(self, high: bool = False) -> Intracomm:
        """MPI_Intercomm_merge (collective over both groups): an
        intracommunicator of both, the group that passes ``high=False``
        first (the first group of the union when both pass the same)."""
        st = self._st()
        st.engine.progress()
        union = st.sc
        sc = union.split(0, (bool(high), _side(st), st.rank))
        merged = _State(st.rt, sc, sc.transport.context, list(sc.transport.members), f"Merge of {st.name}",
                        parent=st)
        return self._new(merged)

    def Dup(self, info=None) -> "Intercomm":
        """A new intercommunicator between the same groups (collective over both)."""
        st = self._st()
        st.engine.progress()
        return _new_intercomm(self._same_groups(st, st.sc.split(0, st.sc.rank), "Dup"))

    @staticmethod
    def _same_groups(st, union, how: str) -> _InterState:
        """The state of a new intercommunicator between the groups of ``st``'s, over ``union``."""
        return _inter_state(st, union, st.local_members, st.members, st.local_offset == 0, f"{how} of {st.name}")

    Clone = Dup

    def Dup_with_info(self, info) -> "Intercomm":
        return self.Dup(info)

    def Split(self, color: int = 0, key: int = 0):
        """MPI_Comm_split on an intercommunicator (collective over both
        groups): the processes of one color on each side, ordered by
        ``key``, form an intercommunicator; MPI.COMM_NULL where a color has
        no process on the other side (or is MPI.UNDEFINED)."""
        from ._comm import COMM_NULL, UNDEFINED

        st = self._st()
        color, key = c_int(color, "color"), c_int(key, "key")
        if color < 0 and color != UNDEFINED:
            raise MPIException(ERR_ARG, f"Split: color={color!r}, key={key!r} on {st.name}")
        st.engine.progress()
        sc = st.sc.split(None if color == UNDEFINED else color, (_side(st), key))
        if sc is None:
            return COMM_NULL
        members = sc.transport.members
        local = [w for w in members if w in st.local_members]
        remote = [w for w in members if w in st.members]
        if not remote:
            return COMM_NULL
        first = members[0] in local
        return _new_intercomm(_inter_state(st, sc, local, remote, first, f"Split(color={color}) of {st.name}"))

    def _local_comm(self) -> Intracomm:
        """A new intracommunicator of the local group (collective over both
        groups: the union split in two)."""
        st = self._st()
        st.engine.progress()
        sc = st.sc.split(_side(st), st.rank)
        local = _State(st.rt, sc, sc.transport.context, list(sc.transport.members), f"local group of {st.name}",
                       parent=st)
        return self._new(local)


def _side(st) -> int:
    """0 for the union's first group, 1 for its second."""
    return 0 if st.local_offset == 0 else 1


_COLLECTIVES = ("Barrier", "Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Allgather", "Allgatherv", "Alltoall",
                "Alltoallv", "Alltoallw", "Reduce", "Allreduce", "Reduce_scatter_block", "Reduce_scatter")


def refuse_intracomm_calls() -> None:  # called once, below
    """The calls of an intracommunicator only (topologies, Scan, ...) are
    not an intercommunicator's: AttributeError, as mpi4py's Intercomm has
    none of them. The calls mpi4py's Intercomm has and this one does not
    simulate (nonblocking and persistent collectives, Create) raise
    NotImplementedError,
    never the intracommunicator's form run on both groups at once."""
    for name in ("Create_group", "Create_intercomm", "Create_cart", "Create_graph", "Create_dist_graph",
                 "Create_dist_graph_adjacent", "Scan", "Exscan", "scan", "exscan"):
        setattr(Intercomm, name, property(_no_such(name)))
    refused = ["Create"]
    refused += [f"I{name[0].lower()}{name[1:]}" for name in _COLLECTIVES] + [f"{name}_init" for name in _COLLECTIVES]
    for name in refused:
        setattr(Intercomm, name, _refused(name))


def _no_such(name: str):
    def missing(self):
        raise AttributeError(f"'Intercomm' object has no attribute {name!r}")

    return missing


def _refused(name: str):
    def refused(self, *args, **kwargs):
        self._st()  # a null handle raises MPI.ERR_COMM first, as MPI checks it first
        raise unsupported(f"Intercomm.{name}", "nonblocking and persistent collectives and Create are "
                          "not simulated on intercommunicators; use the "
                          "blocking collectives, or Merge it into an intracommunicator")

    refused.__name__ = name
    return refused


class _Constructors(Intracomm):
    """Only to wrap Create_intercomm in the communicator's error handler."""

    Create_intercomm = create_intercomm


refuse_intracomm_calls()
Intercomm._shrunk_class = Intercomm
INTERCOMM_CLASS.append(Intercomm)
_errhandlers.guard_calls(Intercomm)
_errhandlers.guard_calls(_Constructors)
#: The method ``MPI`` attaches to ``Intracomm``.
CREATE_INTERCOMM = vars(_Constructors)["Create_intercomm"]
