"""Fault tolerance (MPI 5.0's ULFM calls) of the stand-in's communicators.

In a simulated run no process fails alone: a rank that fails (raises,
exits, is killed) fails the whole run, with its traceback. So every
process of a communicator is alive, and each call has MPI's failure-free
meaning:

- ``Get_failed``: the empty group; ``Ack_failed(num_to_ack)``: 0 failures
  acknowledged (local calls);
- ``Agree(flag)``: the bitwise AND of the flags of all processes (on an
  intercommunicator, of the REMOTE group's, as MPI defines it): a
  collective in the communicator's order, covered by the mismatch and hang
  checks as the others are; ``Iagree(flag)``: its nonblocking form, ``flag``
  a writable buffer of one C int that holds the result once the request
  completes;
- ``Shrink``: a new communicator of the same processes in the same order
  (collective, as ``Dup``, without the attributes and the topology);
  ``Ishrink``: its nonblocking form, ``(comm, request)``: ``comm`` refers
  to the new communicator once ``request`` has completed. Its communicator
  is made without the simulator's split (which every rank would enter at
  once): the ranks exchange the context the first one picked in the
  messages of a nonblocking collective, and the communicator runs its
  collectives on point-to-point messages (``_groupcomm``), as those of
  ``Create_group`` do;
- ``Is_revoked``: False, as ``Revoke`` is refused (``_names`` says why).

The nonblocking forms are schedules of ``_nbschedule``; on an
intercommunicator they run over the union of both groups, in the union's
context with bit 61 flipped (no other message of an intercommunicator
travels there).
"""

from __future__ import annotations

import operator

import numpy as np

from . import _handleleaks
from ._errors import ERR_ARG, Exception as MPIException
from ._groupcomm import GroupComm, new_context
from ._groups import Group
from ._handles import new_handle
from ._nbschedule import start

#: Flipped in an intercommunicator's context for its nonblocking ULFM schedules.
UNION_SCHEDULE_BIT = 1 << 61
_C_INT = np.dtype(np.intc)
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


class _Union:
    """An intercommunicator's state seen as the intracommunicator of both
    groups (union ranks), as ``_nbschedule.start`` reads a state."""

    __slots__ = ("_st", "engine", "ctx", "rank", "size", "members", "name")

    def __init__(self, st):
        union = st.sc
        self._st, self.engine, self.name = st, st.engine, st.name
        self.ctx = st.ctx ^ UNION_SCHEDULE_BIT
        self.rank, self.size, self.members = union.rank, union.size, list(union.transport.members)

    @property
    def coll_seq(self) -> int:
        return self._st.coll_seq

    @coll_seq.setter
    def coll_seq(self, value: int) -> None:
        self._st.coll_seq = value


def _flag_int(flag, call: str) -> int:
    """``flag`` as mpi4py's C int: TypeError for a non-integer, OverflowError out of range."""
    value = operator.index(flag)
    if not _INT_MIN <= value <= _INT_MAX:
        raise OverflowError(f"{call}: flag={value} does not fit a C int")
    return value


def _flag_buffer(flag) -> np.ndarray:
    """The one C int of Iagree's ``flag`` buffer, writable, as mpi4py reads it."""
    view = memoryview(flag)  # TypeError for an object without the buffer interface
    if view.readonly:
        raise BufferError("Iagree: flag is a read-only buffer; the call writes the result into it")
    if not view.contiguous:
        raise BufferError("Iagree: flag is not a contiguous buffer")
    if view.format != "i":
        raise ValueError(f"expecting buffer with format 'i', got {view.format!r}")
    if view.nbytes != _C_INT.itemsize:
        raise ValueError("flag: expecting int buffer of length one")
    return np.asarray(view).reshape(-1).view(_C_INT)


def _and(values) -> int:
    out = -1
    for value in values:
        out &= int(value)
    return out


class FaultTolerance:
    """Mixin of Comm (see the module docstring). The class provides
    ``_st``, ``_coll``, ``_new``, ``_derived``, Intercomm's ``_exchange``
    and ``_same_groups``, and ``_shrunk_class`` (the class of Shrink's
    result: Intracomm or Intercomm, as mpi4py's)."""

    _shrunk_class = None

    # -- local calls ----------------------------------------------------------------------
    def Is_revoked(self) -> bool:
        """False: Revoke is not simulated."""
        self._st()
        return False

    def Get_failed(self) -> Group:
        """A new handle on the group of failed processes: empty."""
        self._st()
        return Group._from_ranks(())

    def Ack_failed(self, num_to_ack: int | None = None) -> int:
        """Acknowledge up to ``num_to_ack`` failures (all, when None): 0, none has failed."""
        st = self._st()
        if num_to_ack is not None:
            value = _flag_int(num_to_ack, "Ack_failed")
            if value < 0:
                raise MPIException(ERR_ARG, f"Ack_failed: num_to_ack={value} on {st.name} must be >= 0")
        return 0

    # -- agreement ----------------------------------------------------------------------
    def Agree(self, flag: int) -> int:
        """The bitwise AND of every process's ``flag`` (the remote group's
        on an intercommunicator); collective."""
        value = _flag_int(flag, "Agree")
        st = self._st()
        if st.inter:
            remote = range(len(st.members))
            return _and(self._exchange("Agree", dict.fromkeys(remote, value), remote).values())
        _, sc = self._coll()
        return int(sc.allreduce(np.array([value], _C_INT), "band")[0])

    def Iagree(self, flag):
        """Nonblocking Agree: ``flag`` (a buffer of one C int) holds the
        agreed value once the request completes."""
        st = self._st()
        cell = _flag_buffer(flag)
        view = _Union(st) if st.inter else st
        contributors = range(st.remote_offset, st.remote_offset + len(st.members)) if st.inter else range(st.size)

        def finish(parts):
            cell[0] = _and(parts[j].view(_C_INT)[0] for j in contributors)

        payload = np.array(cell, copy=True).view(np.uint8)
        return start(view, "Iagree", "Agree()", [payload] * view.size, finish)

    # -- shrinking ----------------------------------------------------------------------
    def Shrink(self):
        """A new communicator of every process that has not failed: all
        of them, in the same order (collective)."""
        st = self._st()
        st.engine.progress()
        if st.inter:
            new = self._same_groups(st, st.sc.split(0, st.sc.rank), "Shrink")
        else:
            new = self._derived(st, st.sc.split(0, st.rank), "Shrink")
        return self._new(new, self._shrunk_class)

    def Ishrink(self):
        """Nonblocking Shrink: ``(comm, request)``; ``comm`` is the new
        communicator once ``request`` has completed."""
        st = self._st()
        view = _Union(st) if st.inter else st
        comm = new_handle(self._shrunk_class)
        comm._state = None
        proposal = np.array([new_context(view.members[view.rank])], np.int64).view(np.uint8)

        def finish(parts):
            context = int(parts[0].view(np.int64)[0])  # the first process's pick
            group = GroupComm(st.engine, view.members, view.rank, context)
            if st.inter:
                new = self._same_groups(st, group, "Ishrink")
            else:
                group.origin = f"the communicator Ishrink of {st.name}"
                new = self._derived(st, group, "Ishrink")
            comm._state = new
            _handleleaks.handle_given(comm, new)

        return comm, start(view, "Ishrink", "Shrink()", [proposal] * view.size, finish)
