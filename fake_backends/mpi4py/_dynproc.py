"""Ports and joins between the processes of one run: ``MPI.Open_port``,
``MPI.Close_port``, ``Intracomm.Accept``, ``Intracomm.Connect`` and
``Comm.Join``.

Every process is started by ``simdist run -n N``, so none is ever spawned,
but two groups of the run's processes can meet as MPI lets running
processes meet: at a port, or over a connected socket. A port name is
``simdist-port:<world rank>:<serial>``; the process that opened it is the
root of the Accept on it. The connecting root sends its group to that
world rank over the world's context with bits 59-61 flipped, the serial as
the tag; the accepting root answers with its own group and both roots
broadcast what they learnt, as Create_intercomm's leaders do. A process
that never comes to the meeting is a hang the engine reports, naming the
call. A port name can also be found by a service name the process that
opened it publishes (``MPI.Publish_name``, ``MPI.Lookup_name``: the name
service of the run, in ``_nameservice``).
"""

from __future__ import annotations

import itertools
import os

import numpy as np

from . import _runtime
from ._errors import ERR_ARG, ERR_PORT, Exception as MPIException
from ._comm import COMM_SELF
from ._groupcomm import COLLECTIVE_BIT, HANDSHAKE_BIT, new_context
from ._intercomm import from_leader
from ._p2p import ANY_SOURCE
from ._pickle import pickle
from ._pointtopoint import c_int

_MEETING = COLLECTIVE_BIT | HANDSHAKE_BIT | 1 << 61  # flipped on the world's context
_JOIN_TAG = 0
_serials = itertools.count(1)
_open: set[str] = set()  # the ports this process opened and has not closed


def Open_port(info=None) -> str:
    """A new port name of this process."""
    port = f"simdist-port:{_runtime.get().me}:{next(_serials)}"
    _open.add(port)
    return port


def Close_port(port_name: str) -> None:
    try:
        _open.remove(port_name)
    except KeyError:
        raise MPIException(ERR_PORT, f"Close_port: {port_name!r} is not a port this process opened") from None


def _owner_and_serial(port_name, call: str) -> tuple[int, int]:
    try:
        prefix, owner, serial = str(port_name).split(":")
        if prefix == "simdist-port":
            return int(owner), int(serial)
    except ValueError:
        pass
    raise MPIException(ERR_PORT, f"{call}: {port_name!r} is not a port name of this run (MPI.Open_port gives them)")


def _meet(engine, call: str, me: int, local: list, *, peer: int | None, tag: int, starts: bool):
    """(remote group, context, whether the local group comes first), as this
    root learns them from ``peer`` (a world rank; None: whoever comes). The
    side that ``starts`` sends its group first; the other answers the sender."""
    ctx = _runtime.get().universe.context ^ _MEETING
    proposal = new_context(me)
    mine = np.frombuffer(pickle.dumps((tuple(local), proposal, me)), np.uint8)
    if starts:
        engine.send(peer, ctx, me, tag, mine, 0, False, call)
    recv = engine.recv(ctx, ANY_SOURCE if peer is None else peer, tag, None, call, peer=peer)
    engine.wait_until(lambda: recv.done, call, (recv,))
    remote, their_proposal, them = pickle.loads(memoryview(recv.data))
    if not starts:
        send = engine.send(them, ctx, me, tag, mine, 0, False, call)
        engine.wait_until(lambda: send.done, call)
    first = local[0] < remote[0]
    return list(remote), proposal if first else their_proposal, first


def accept(self, port_name: str, info=None, root: int = 0):
    """MPI_Comm_accept (collective): an intercommunicator to the group whose
    root connects to ``port_name`` (significant at ``root``, which opened it)."""
    st = self._st()
    root = self._root(st, root, "Accept")
    found = None
    if st.rank == root:
        owner, serial = _owner_and_serial(port_name, "Accept")
        if port_name not in _open:
            raise MPIException(ERR_PORT, f"Accept: {port_name!r} is not open in this process (world rank "
                               f"{st.rt.me}); the process that opened it accepts on it")
        found = _meet(st.engine, f"Accept({port_name!r}) on {st.name}", owner, list(st.members), peer=None,
                      tag=serial, starts=False)
    return from_leader(self, found, root, "Accept")


def connect(self, port_name: str, info=None, root: int = 0):
    """MPI_Comm_connect (collective): an intercommunicator to the group that
    accepts on ``port_name`` (significant at ``root``)."""
    st = self._st()
    root = self._root(st, root, "Connect")
    found = None
    if st.rank == root:
        owner, serial = _owner_and_serial(port_name, "Connect")
        found = _meet(st.engine, f"Connect({port_name!r}) on {st.name}", st.rt.me, list(st.members),
                      peer=owner, tag=serial, starts=True)
    return from_leader(self, found, root, "Connect")


def join(cls, fd: int):
    """MPI_Comm_join: an intercommunicator between this process and the one
    at the other end of the connected socket ``fd``, which calls Join too."""
    fd = c_int(fd, "fd")
    if fd < 0:
        raise MPIException(ERR_ARG, f"Join: fd={fd!r} is not a file descriptor")
    st = COMM_SELF._st()
    me = st.rt.me
    os.write(fd, me.to_bytes(8, "little"))
    got = b""
    while len(got) < 8:
        chunk = os.read(fd, 8 - len(got))
        if not chunk:
            raise MPIException(ERR_ARG, "Join: the socket closed before the other process joined")
        got += chunk
    peer = int.from_bytes(got, "little")
    found = _meet(st.engine, f"Join(fd={fd})", me, [me], peer=peer, tag=_JOIN_TAG, starts=me < peer)
    return from_leader(COMM_SELF, found, 0, "Join")
