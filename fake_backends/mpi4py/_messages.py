"""Message: a message taken by a matched probe (``Mprobe``/``mprobe``),
received once with ``Recv``/``recv`` or their nonblocking forms."""

from __future__ import annotations

from . import _errhandlers, _latereads
from ._errors import ERR_REQUEST, Exception as MPIException
from ._handles import Handle, IntegerHandles, check_handle, is_constant
from ._p2p import ANY_SOURCE, ANY_TAG
from ._requests import DONE, Request
from ._status import Status

class Message(Handle, IntegerHandles):
    """A message taken by a matched probe (``Mprobe``/``mprobe``); receive
    it with ``Recv``/``recv`` (or ``Irecv``/``irecv``)."""

    def _init(self, message: "Message | None" = None, *, _engine=None, _env=None, _noproc=False) -> None:
        self._engine, self._env, self._noproc = _engine, _env, _noproc
        self._comm = _errhandlers.current_owner()  # of Mprobe: its receive's errors go to that handler
        if message is not None:
            check_handle(message, Message, type(self))
            self._engine, self._env, self._noproc, self._comm = (message._engine, message._env, message._noproc,
                                                                 message._comm)

    def __bool__(self):
        return self._env is not None or self._noproc

    def __eq__(self, other):
        if not isinstance(other, Message):
            return NotImplemented
        return self._env is other._env and self._noproc == other._noproc

    def _take(self, sink, unpack=None):
        if self._noproc:
            if self is not MESSAGE_NO_PROC:  # a received copy becomes MESSAGE_NULL; the constant stays
                self._noproc = False
            return DONE
        if self._env is None:
            raise MPIException(ERR_REQUEST, "receive of MPI.MESSAGE_NULL (a matched message is received once)")
        env, self._env = self._env, None
        return self._engine.recv_matched(env, sink, "Mrecv", unpack)

    def _irecv(self, buf, call: str = "Mrecv"):
        from ._buffers import parse, receive_into

        sink, unpack = receive_into(None if buf is None else parse(buf, writable=True, what="buf"))
        engine = self._engine
        op = _latereads.posted(self._take(_latereads.staged(sink, unpack, call), unpack), sink, call, f"{call}()")
        return Request._of(engine, op, self._comm)

    def Recv(self, buf, status: Status | None = None) -> None:
        self._irecv(buf).Wait(status)

    def Irecv(self, buf) -> Request:
        return self._irecv(buf, "Imrecv")

    def recv(self, status: Status | None = None):
        return self._irecv(None).wait(status)

    def irecv(self) -> Request:
        return self._irecv(None)

    def free(self) -> None:
        """Make this handle null (a message has no MPI_Message_free); a
        predefined message itself stays."""
        if not is_constant(self):
            self._engine, self._env, self._noproc = None, None, False

    @classmethod
    def Probe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None) -> "Message":
        return comm.Mprobe(source, tag, status)

    @classmethod
    def Iprobe(cls, comm, source=ANY_SOURCE, tag=ANY_TAG, status=None) -> "Message | None":
        return comm.Improbe(source, tag, status)

    probe = Probe
    iprobe = Iprobe


MESSAGE_NULL = Message()
MESSAGE_NO_PROC = Message(_noproc=True)
