"""The point-to-point calls of the stand-in's communicators (a mixin of
``Comm``): sends, receives, Sendrecv, persistent requests and probes.

A call that raises leaves nothing behind
----------------------------------------
MPI checks a call's arguments before it does anything, so a call that
raises has posted no receive and sent nothing. Here every call is made of
two steps: *preparing* an operation (checking the rank and tag, reading
the buffer specification, pickling the object) may raise and touches
nothing; *posting* it to the progress engine (``_p2p``) never raises for
the call's own arguments. A composite call (Sendrecv, Sendrecv_replace,
Startall) prepares every part before it posts the first: a Sendrecv whose
send buffer is refused leaves no receive posted that would take the next
matching message. Persistent requests (Send_init, Recv_init) prepare at
init, as mpi4py does, and post at each Start.
"""

from __future__ import annotations

import functools
import operator
import warnings

import numpy as np

from simdist import checks as _checks
from simdist._signature import TORCH_GROUP

from . import _latereads, _misuse
from ._buffered import check_space, need
from ._buffers import parse, receive_into
from ._errors import ERR_RANK, ERR_TAG, Exception as MPIException
from ._p2p import ANY_SOURCE, ANY_TAG, PICKLED, PROC_NULL, PairOp, SendOp
from ._pickle import pickle
from ._messages import MESSAGE_NO_PROC, Message
from ._requests import DONE, Prequest, Request
from ._status import Status

TAG_UB = 2**31 - 1


def c_int(value, what: str) -> int:
    """``value`` converted as mpi4py's compiled calls convert a C ``int``
    argument: an int (a bool too), or a number with ``__int__``, truncated
    (a float rank 1.0 or 0.5 is rank 1 or 0 under mpi4py); anything else
    is mpi4py's TypeError."""
    if not isinstance(value, (str, bytes)):
        try:
            return operator.index(value)
        except TypeError:
            if hasattr(type(value), "__int__"):
                return int(value)
    raise TypeError(f"an integer is required ({what}={value!r})")


def sent() -> SendOp:
    """A send that completed when it was posted (to MPI.PROC_NULL)."""
    op = SendOp(PROC_NULL, None)
    op.done = True
    return op


def _names(source: int, tag: int) -> str:
    return f"source={'ANY_SOURCE' if source == ANY_SOURCE else source}, tag={'ANY_TAG' if tag == ANY_TAG else tag}"


def _described(call: str, st, dest: int | None = None, source: int = 0, tag: int = 0) -> str:
    """``Irecv(source=1, tag=0) on MPI_COMM_WORLD`` (a send: give ``dest``),
    as reports name the call; on a torch group in torch's words, as its
    ``isend``/``irecv`` made it: ``irecv(src=1, tag=0) on torch group 0``."""
    if st.name.startswith(TORCH_GROUP):
        peer = f"dst={dest}" if dest is not None else f"src={None if source == ANY_SOURCE else source}"
        return f"{call.lower()}({peer}, tag={tag}) on {st.name}"
    peer = f"dest={dest}, tag={tag}" if dest is not None else _names(source, tag)
    return f"{call}({peer}) on {st.name}"


def buffer_data(buf, what: str = "buf"):
    """The bytes of a send buffer (a view: read when the message goes)."""
    spec = parse(buf, writable=False, what=what)
    _misuse.sending(spec)
    return spec.raw, 0


def pickled_data(obj):
    """The pickle of an object of the lowercase API."""
    return np.frombuffer(pickle.dumps(obj), np.uint8), PICKLED


def _warn_buf(buf) -> None:
    """mpi4py's warning for a receive buffer given to recv or sendrecv
    (not needed here: an object of any size is received)."""
    if buf is not None:
        warnings.warn("the 'buf' argument is deprecated", UserWarning, stacklevel=3)


class PointToPoint:
    """Point-to-point calls of ``Comm`` (see the module docstring); the
    class provides ``_st()``, the checked state of the communicator."""

    # -- argument checks ------------------------------------------------------------------
    @staticmethod
    def _peer(st, rank, call: str, what: str, any_ok: bool) -> int:
        peers = len(st.members)  # the remote group's on an intercommunicator
        rank = c_int(rank, what)
        if not (0 <= rank < peers or (any_ok and rank == ANY_SOURCE)):
            raise MPIException(ERR_RANK, f"{call}: {what}={rank!r} on {st.name} of {peers} ranks")
        return rank

    @staticmethod
    def _tag(tag, call: str, any_ok: bool) -> int:
        tag = c_int(tag, "tag")
        if not (0 <= tag <= TAG_UB or (any_ok and tag == ANY_TAG)):
            raise MPIException(ERR_TAG, f"{call}: tag={tag!r}; tags are ints from 0 to MPI.TAG_UB ({TAG_UB})"
                               + (" or MPI.ANY_TAG" if any_ok else ""))
        return tag

    # -- preparing (may raise) and posting (does not) ---------------------------------------
    def _checked_send(self, data_of, dest, tag, call: str):
        """The state, world rank of ``dest``, tag, bytes, flags and
        description of a send (None for ``dest`` MPI.PROC_NULL)."""
        st = self._st()
        tag = self._tag(tag, call, False)
        if dest == PROC_NULL:
            return None
        dest = self._peer(st, dest, call, "dest", False)
        data, flags = data_of()
        desc = _described(call, st, dest=dest, tag=tag)
        return st, st.members[dest], tag, data, flags, desc, _misuse.note(desc, data.size)

    def _prepare_send(self, data_of, dest, tag, sync: bool, call: str, ctx_bit: int = 0):
        """Check a send and build its bytes; return ``post()``, which starts
        it and returns its request. ``ctx_bit`` flipped on the context keeps
        a kind of message apart (partitioned ones)."""
        checked = self._checked_send(data_of, dest, tag, call)
        if checked is None:
            engine = self._st().engine
            return lambda: Request._of(engine, sent())
        st, world_dest, tag, data, flags, desc, note = checked
        checked = not sync and _checks.enabled("buffering")  # a standard send may not rely on MPI buffering it

        def post():
            op = st.engine.send(world_dest, st.ctx ^ ctx_bit, st.rank, tag, data, flags, sync or checked, desc, checked,
                                note)
            _misuse.send_posted(op, data, call, desc)
            return _misuse.made(Request._of(st.engine, op), call, desc)

        return post

    def _prepare_bsend(self, data_of, dest, tag, call: str):
        """The same for a buffered send (``_buffered``), and the bytes of
        the attached buffer it takes. Its ``post()`` checks that they are
        free before it posts (ERR_BUFFER), copies the message and
        returns a completed request."""
        checked = self._checked_send(data_of, dest, tag, call)
        engine = self._st().engine
        if checked is None:
            return (lambda: Request._of(engine, sent())), 0
        st, world_dest, tag, data, flags, desc, note = checked
        nbytes = need(data.size)

        def post():
            attached = check_space(engine, nbytes, call)
            attached.hold(engine.send(world_dest, st.ctx, st.rank, tag, data.copy(), flags, False, desc, note=note), nbytes)
            done = sent()
            _misuse.send_posted(done, data, call, desc)
            return _misuse.made(Request._of(engine, done), call, desc)

        return post, nbytes

    def _prepare_recv(self, sink_of, source, tag, call: str, ctx_bit: int = 0):
        """Check a receive and read its buffer; return ``post()``."""
        st = self._st()
        tag = self._tag(tag, call, True)
        if source == PROC_NULL:
            return lambda: Request._of(st.engine, DONE)
        source = self._peer(st, source, call, "source", True)
        spec = sink_of()
        sink, unpack = receive_into(spec)
        desc = _described(call, st, source=source, tag=tag)
        peer = None if source == ANY_SOURCE else st.members[source]
        check = _misuse.recv_check(spec, desc)

        def post():
            op = st.engine.recv(st.ctx ^ ctx_bit, source, tag, _latereads.staged(sink, unpack, call), desc, unpack, peer,
                                check)
            return _misuse.made(Request._of(st.engine, _latereads.posted(op, sink, call, desc)), call, desc)

        return post

    @staticmethod
    def _sink(buf, what: str = "buf"):
        return lambda: parse(buf, writable=True, what=what)

    # -- buffers ------------------------------------------------------------------------------
    def Isend(self, buf, dest: int, tag: int = 0) -> Request:
        return self._prepare_send(lambda: buffer_data(buf), dest, tag, False, "Isend")()

    Irsend = Isend

    def Issend(self, buf, dest: int, tag: int = 0) -> Request:
        """A synchronous send: completes once the receive has matched it."""
        return self._prepare_send(lambda: buffer_data(buf), dest, tag, True, "Issend")()

    def Send(self, buf, dest: int, tag: int = 0) -> None:
        self._prepare_send(lambda: buffer_data(buf), dest, tag, False, "Send")().Wait()

    Rsend = Send

    def Ssend(self, buf, dest: int, tag: int = 0) -> None:
        self._prepare_send(lambda: buffer_data(buf), dest, tag, True, "Ssend")().Wait()

    def Irecv(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        return self._prepare_recv(self._sink(buf), source, tag, "Irecv")()

    def Recv(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> None:
        self._prepare_recv(self._sink(buf), source, tag, "Recv")().Wait(status)

    @staticmethod
    def _pair(post_send, post_recv) -> Request:
        """Post both halves of a Sendrecv (prepared: neither raises); one
        request for both."""
        recv = post_recv()
        send = post_send()
        return _misuse.paired(Request._of(recv._engine or send._engine, PairOp(send._op, recv._op)), send, recv)

    def _sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag, call: str) -> Request:
        post_recv = self._prepare_recv(self._sink(recvbuf, "recvbuf"), source, recvtag, call)
        post_send = self._prepare_send(lambda: buffer_data(sendbuf, "sendbuf"), dest, sendtag, False, call)
        return self._pair(post_send, post_recv)

    def _sendrecv_replace(self, buf, dest, sendtag, source, recvtag, call: str) -> Request:
        """The message sent is a copy of ``buf`` as it is now."""
        spec = functools.cache(lambda: parse(buf, writable=True, what="buf"))  # not read for PROC_NULL
        post_recv = self._prepare_recv(spec, source, recvtag, call)
        post_send = self._prepare_send(lambda: (spec().raw.copy(), 0), dest, sendtag, False, call)
        return self._pair(post_send, post_recv)

    def Isendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                  recvtag: int = ANY_TAG) -> Request:
        return self._sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, "Isendrecv")

    def Sendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Status | None = None) -> None:
        self._sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, "Sendrecv").Wait(status)

    def Isendrecv_replace(self, buf, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                          recvtag: int = ANY_TAG) -> Request:
        return self._sendrecv_replace(buf, dest, sendtag, source, recvtag, "Isendrecv_replace")

    def Sendrecv_replace(self, buf, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                         recvtag: int = ANY_TAG, status: Status | None = None) -> None:
        self._sendrecv_replace(buf, dest, sendtag, source, recvtag, "Sendrecv_replace").Wait(status)

    # -- persistent requests ----------------------------------------------------------------------
    def Send_init(self, buf, dest: int, tag: int = 0) -> Prequest:
        """A persistent send: checked now, sent (the buffer's contents at
        that time) at each ``Start``."""
        return _misuse.persistent_made(Prequest(_start=self._persistent_send(buf, dest, tag, False, "Send_init")),
                                       f"Send_init(dest={dest}, tag={tag})")

    Rsend_init = Send_init

    def Ssend_init(self, buf, dest: int, tag: int = 0) -> Prequest:
        return _misuse.persistent_made(Prequest(_start=self._persistent_send(buf, dest, tag, True, "Ssend_init")),
                                       f"Ssend_init(dest={dest}, tag={tag})")

    def _persistent_send(self, buf, dest, tag, sync: bool, call: str, ctx_bit: int = 0):
        """The ``post()`` of a persistent send, checked now. A derived
        datatype's bytes are packed anew at each Start (a copy, unlike a
        view of a contiguous buffer, would send the contents at init)."""
        def prepare():
            return self._prepare_send(lambda: buffer_data(buf), dest, tag, sync, call, ctx_bit)

        post = prepare()
        if dest == PROC_NULL or parse(buf, writable=False, what="buf").target is None:
            return post
        return lambda: prepare()()

    def Recv_init(self, buf, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Prequest:
        return _misuse.persistent_made(Prequest(_start=self._prepare_recv(self._sink(buf), source, tag, "Recv_init")),
                                       f"Recv_init({_names(source, tag)})")

    # -- buffered mode ----------------------------------------------------------------------------
    def Bsend(self, buf, dest: int, tag: int = 0) -> None:
        """Copy the message into the attached buffer (MPI.Attach_buffer) and return."""
        self._prepare_bsend(lambda: buffer_data(buf), dest, tag, "Bsend")[0]()

    def Ibsend(self, buf, dest: int, tag: int = 0) -> Request:
        return self._prepare_bsend(lambda: buffer_data(buf), dest, tag, "Ibsend")[0]()

    def Bsend_init(self, buf, dest: int, tag: int = 0) -> Prequest:
        def prepare():
            return self._prepare_bsend(lambda: buffer_data(buf), dest, tag, "Bsend_init")

        post, nbytes = prepare()
        if dest != PROC_NULL and parse(buf, writable=False, what="buf").target is not None:
            post = lambda: prepare()[0]()  # noqa: E731 - a derived datatype packs anew at each Start
        return _misuse.persistent_made(Prequest(_start=post, _buffered=(self._st().engine, nbytes)),
                                       f"Bsend_init(dest={dest}, tag={tag})")

    def bsend(self, obj, dest: int, tag: int = 0) -> None:
        self._prepare_bsend(lambda: pickled_data(obj), dest, tag, "bsend")[0]()

    def ibsend(self, obj, dest: int, tag: int = 0) -> Request:
        return self._prepare_bsend(lambda: pickled_data(obj), dest, tag, "ibsend")[0]()

    # -- objects ----------------------------------------------------------------------------------
    def isend(self, obj, dest: int, tag: int = 0) -> Request:
        return self._prepare_send(lambda: pickled_data(obj), dest, tag, False, "isend")()

    def issend(self, obj, dest: int, tag: int = 0) -> Request:
        return self._prepare_send(lambda: pickled_data(obj), dest, tag, True, "issend")()

    def send(self, obj, dest: int, tag: int = 0) -> None:
        self._prepare_send(lambda: pickled_data(obj), dest, tag, False, "send")().Wait()

    def ssend(self, obj, dest: int, tag: int = 0) -> None:
        self._prepare_send(lambda: pickled_data(obj), dest, tag, True, "ssend")().Wait()

    def irecv(self, buf=None, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        """Receive an object; ``buf`` is accepted and not needed (there is no
        size limit, unlike mpi4py's default 32 KiB buffer)."""
        return self._prepare_recv(lambda: None, source, tag, "irecv")()

    def recv(self, buf=None, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        _warn_buf(buf)
        return self._prepare_recv(lambda: None, source, tag, "recv")().wait(status)

    def sendrecv(self, sendobj, dest: int, sendtag: int = 0, recvbuf=None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Status | None = None):
        _warn_buf(recvbuf)
        post_recv = self._prepare_recv(lambda: None, source, recvtag, "sendrecv")
        post_send = self._prepare_send(lambda: pickled_data(sendobj), dest, sendtag, False, "sendrecv")
        return self._pair(post_send, post_recv).wait(status)

    # -- probing ----------------------------------------------------------------------------------
    def _find(self, source, tag, call: str, block: bool, take: bool):
        """The envelope a receive would match (None: none yet; PROC_NULL: a
        probe of MPI.PROC_NULL)."""
        st = self._st()
        tag = self._tag(tag, call, True)
        if source == PROC_NULL:
            return PROC_NULL
        source = self._peer(st, source, call, "source", True)
        engine = st.engine
        if not block:
            engine.progress()
            return engine.find(st.ctx, source, tag, take)
        desc = _described(call, st, source=source, tag=tag)
        peer = None if source == ANY_SOURCE else st.members[source]
        return engine.wait_until(lambda: engine.find(st.ctx, source, tag, take), desc, peer=peer)

    @staticmethod
    def _status(env, status) -> None:
        if status is not None:
            if env is PROC_NULL:
                status._set(PROC_NULL, ANY_TAG, 0)
            else:
                status._set(env.source, env.tag, env.nbytes)

    def Probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        """Wait for a message a receive would match; do not receive it."""
        self._status(self._find(source, tag, "Probe", True, False), status)
        return True

    def Iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        env = self._find(source, tag, "Iprobe", False, False)
        if env is None:
            return False
        self._status(env, status)
        return True

    probe = Probe
    iprobe = Iprobe

    def _message(self, env) -> Message:
        if env is PROC_NULL:  # a new handle equal to MPI.MESSAGE_NO_PROC, as mpi4py's: receiving it nulls it
            return Message(MESSAGE_NO_PROC)
        return Message(_engine=self._st().engine, _env=env)

    def Mprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Message:
        """Probe and take the message: only the returned Message receives it."""
        env = self._find(source, tag, "Mprobe", True, True)
        self._status(env, status)
        return self._message(env)

    def Improbe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None):
        env = self._find(source, tag, "Improbe", False, True)
        if env is None:
            return None
        self._status(env, status)
        return self._message(env)

    mprobe = Mprobe
    improbe = Improbe
