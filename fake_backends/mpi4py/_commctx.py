"""mpi4py's communicator contexts: ``MPI._commctx_intra`` and ``MPI._commctx_inter``.

mpi4py's own Python modules (``mpi4py.util.pkl5``) build collectives of
their own out of point-to-point messages. So that those messages never meet
the program's, they travel on a private duplicate of the communicator, made
at the first such call (collectively: every member makes the call), kept
with the communicator and freed with it, and each call takes the next tag
of a counter kept with it, wrapping at ``MPI.TAG_UB`` -- as mpi4py's C
helpers do (``PyMPI_Commctx_intra``/``_inter``). An intercommunicator's
context also holds the local group's intracommunicator and whether this
side is the "low" group of the merge order.
"""

from __future__ import annotations

from ._pointtopoint import TAG_UB


class _Context:
    """A communicator's private duplicate, its next tag, and for an
    intercommunicator its local communicator and low-group flag."""

    __slots__ = ("dupcomm", "tag", "localcomm", "low_group")

    def __init__(self, dupcomm):
        self.dupcomm, self.tag = dupcomm, 0
        self.localcomm = self.low_group = None

    def next_tag(self) -> int:
        if self.tag >= TAG_UB:
            self.tag = 0
        tag, self.tag = self.tag, self.tag + 1
        return tag


def _context(comm) -> _Context:
    st = comm._st()
    if st.commctx is None:
        st.commctx = _Context(comm.Dup())
    return st.commctx


def _commctx_intra(comm):
    """(the communicator's private duplicate, a fresh tag)."""
    context = _context(comm)
    return context.dupcomm, context.next_tag()


def _commctx_inter(comm):
    """(the intercommunicator's private duplicate, a fresh tag, the local
    group's intracommunicator, whether this side is the low group)."""
    context = _context(comm)
    if context.localcomm is None:
        local, remote = comm.Get_size(), comm.Get_remote_size()
        merged = comm.Merge(local > remote)
        if local != remote:
            context.low_group = local < remote
        else:
            context.low_group = merged.Get_rank() < local
        merged.Free()
        context.localcomm = comm._local_comm()
    return context.dupcomm, context.next_tag(), context.localcomm, context.low_group


def free(st) -> None:
    """Free the private duplicate with its communicator (``Comm.Free``)."""
    context, st.commctx = st.commctx, None
    if context is not None:
        context.dupcomm.Free()
        if context.localcomm is not None:
            context.localcomm.Free()
