"""Buffered mode of the stand-in: the attached buffer of MPI.Attach_buffer,
MPI.Detach_buffer and MPI.Flush_buffer, which the buffered sends (Bsend,
Ibsend, Bsend_init, bsend, ibsend; in ``_pointtopoint``) draw on.

MPI's rules, as the stand-in keeps them: a buffered send copies its message
and completes at once, whatever the receiver does; the copy takes its size
plus MPI.BSEND_OVERHEAD bytes of the attached buffer until the message has
left (been handed to the transport, or matched, for a large one). A
buffered send that does not fit in the free space, or finds no buffer
attached, raises MPI.Exception(MPI.ERR_BUFFER) and sends nothing.
``MPI.BUFFER_AUTOMATIC`` attaches a buffer without limit (MPI 4.1).
Detach_buffer waits until every buffered message has left, then returns
the object that was attached. The stand-in keeps the copies in its own
memory: the attached object sets the capacity, its bytes are not used.

One buffer per rank and run (it lives on the rank's progress engine).
"""

from __future__ import annotations

from . import _runtime
from ._buffers import BUFFER_AUTOMATIC, parse
from ._errors import ERR_BUFFER, Exception as MPIException
from ._mpibuffer import buffer

BSEND_OVERHEAD = 128


class AttachedBuffer:
    """The attached buffer of a rank: its capacity and the buffered sends
    that still hold a part of it."""

    def __init__(self, obj, capacity: int | None):
        self.obj = obj
        self.capacity = capacity  # None: MPI.BUFFER_AUTOMATIC
        self._held: list[tuple[object, int]] = []  # (SendOp, bytes)

    def pending(self) -> bool:
        """Whether a buffered message has not left yet."""
        self._held = [(op, n) for op, n in self._held if not op.done]
        return bool(self._held)

    def free(self) -> int | None:
        """Free bytes (None: no limit)."""
        self.pending()
        if self.capacity is None:
            return None
        return self.capacity - sum(n for _, n in self._held)

    def hold(self, op, nbytes: int) -> None:
        if not op.done:
            self._held.append((op, nbytes))


def need(nbytes: int) -> int:
    """Bytes of the attached buffer a message of ``nbytes`` takes."""
    return nbytes + BSEND_OVERHEAD


def check_space(engine, nbytes: int, call: str) -> AttachedBuffer:
    """The attached buffer, if ``nbytes`` more fit in it; else ERR_BUFFER."""
    attached = engine.attached
    if attached is None:
        raise MPIException(ERR_BUFFER, f"{call}: no buffer is attached; call MPI.Attach_buffer first")
    engine.progress()  # messages that have left give their space back
    free = attached.free()
    if free is not None and nbytes > free:
        raise MPIException(ERR_BUFFER, f"{call}: {nbytes} bytes (message and MPI.BSEND_OVERHEAD) do not fit in "
                           f"the {free} free bytes of the attached buffer of {attached.capacity} bytes")
    return attached


def Attach_buffer(buf) -> None:
    """Attach ``buf`` (any writable buffer, or MPI.BUFFER_AUTOMATIC) for buffered sends."""
    engine = _runtime.get().engine
    if engine.attached is not None:
        raise MPIException(ERR_BUFFER, "Attach_buffer: a buffer is already attached; Detach_buffer it first")
    if buf is BUFFER_AUTOMATIC:
        engine.attached = AttachedBuffer(buf, None)
        return
    engine.attached = AttachedBuffer(buf, parse(buf, writable=True, what="Attach_buffer's buf").raw.size)


def Flush_buffer() -> None:
    """Wait until every buffered message has left."""
    engine = _runtime.get().engine
    if engine.attached is not None:
        _drain(engine, "Flush_buffer")


def Detach_buffer():
    """Wait until every buffered message has left; return the attached buffer."""
    engine = _runtime.get().engine
    attached = engine.attached
    if attached is None:
        raise MPIException(ERR_BUFFER, "Detach_buffer: no buffer is attached")
    _drain(engine, "Detach_buffer")
    engine.attached = None
    return attached.obj


def _drain(engine, call: str) -> None:
    attached = engine.attached
    if attached.pending():
        engine.wait_until(lambda: not attached.pending(), f"{call} (buffered messages not yet received)")


def Alloc_mem(size: int, info=None) -> buffer:
    """Memory for Attach_buffer (or anything else): an ``MPI.buffer`` of ``size`` bytes."""
    return buffer.allocate(size)


def Free_mem(mem) -> None:
    """Release an ``MPI.buffer`` of Alloc_mem (its address becomes 0); the memory is Python's."""
    if isinstance(mem, buffer):
        mem.release()
