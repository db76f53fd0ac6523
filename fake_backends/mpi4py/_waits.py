"""What a wait of the progress engine (``_p2p.Engine.wait_until``) tells
the simulator, and how a wait the driver released ends.

While the engine waits in the transport's ``probe`` for a record from any
rank, it states the MPI call the user is in and the world rank whose record
would end the wait (``Transport.waiting_in``), so a deadlock is reported as
``rank 0 in Recv(source=1, tag=0) at prog.py:11 <- rank 1 in ...``. The
peer is a Recv's source, a send's destination (a rendezvous or synchronous
send waits for its receiver), the first pending request of a Wait or
Waitall (of a Sendrecv: its receive, then its send); None stands for any
rank (ANY_SOURCE).

With the ``buffering`` check, standard-mode sends run synchronous; such a
wait is *releasable*: at a deadlock the driver releases it, and
``release_sends`` completes those sends as MPI would have buffered them,
recording a ``buffering`` finding for each (once per line of the user's code).
"""

from __future__ import annotations

from simdist import checks as _checks

#: ``Engine.wait_until``'s ``peer`` when none is given.
NO_PEER = object()
#: Calls that block until their operation completes: waiting in one, the
#: user is in that call, not in a Wait of its request.
_BLOCKING = ("Send(", "Ssend(", "Recv(", "Sendrecv(", "Sendrecv_replace(", "send(", "ssend(", "recv(", "sendrecv(")


def mpi_call_text(what: str) -> str:
    """The MPI call of a wait's description, as the user wrote it: the
    blocking call itself (``Recv(source=1, tag=0)``, not ``Wait for
    Recv(...)``), without naming MPI_COMM_WORLD."""
    text = str(what).replace(" on MPI_COMM_WORLD", "")  # str(): a description may be made when read
    inner = text.removeprefix("Wait for ")
    return inner if inner.startswith(_BLOCKING) else text


def _is_pair(op) -> bool:
    """A Sendrecv's operation (``_p2p.PairOp``): a send and a receive."""
    return hasattr(op, "recv") and hasattr(op, "send")


def _pending(ops):
    """The first operation of ``ops`` not done (of a Sendrecv: its half
    not done), or None."""
    op = next((op for op in ops if not op.done), None)
    if op is not None and _is_pair(op):
        return op.recv if not op.recv.done else op.send
    return op


def _sends(ops):
    """The send operations (``_p2p.SendOp``) of ``ops`` and of their Sendrecvs."""
    for op in ops:
        if _is_pair(op):
            op = op.send
        if hasattr(op, "dest"):
            yield op


def _peer_of(op):
    """The world rank whose record ends ``op``'s wait (None: any)."""
    return op.dest if hasattr(op, "dest") else getattr(op, "peer", None)


def _call_of(what: str, op) -> str:
    """The call a wait for ``op`` is in: ``Send(dest=1, tag=0)``, ``Wait for Irecv(...)``."""
    if not getattr(op, "desc", None):
        return mpi_call_text(what)
    return mpi_call_text(f"{str(what).split(' for ')[0]} for {op.desc}")


def state_wait(transport, what: str, ops, peer, stated):
    """Tell ``transport`` the MPI call (``what``, or of the first pending of
    ``ops``) and the peer a wait is for, when they changed since ``stated``;
    return what is stated now (None: nothing to state)."""
    if peer is NO_PEER:
        pending = _pending(ops)
        if pending is None:
            return stated
        peer = _peer_of(pending)
        what = _call_of(what, pending)
    else:
        what = mpi_call_text(what)
    releasable = any(op.checked and not op.done for op in _sends(ops))
    now = (what, peer, releasable)
    if now != stated:
        transport.waiting_in(*now)
    return now


def release_sends(rank: int, what: str, ops, reported: set) -> None:
    """Complete the pending sends of ``ops`` that run synchronous only for
    the buffering check as MPI would have buffered them (their data is
    copied, and goes when the receiver matches them), recording each as a
    ``buffering`` finding; ``reported`` holds the user's lines already
    reported (a loop's send is reported once)."""
    for op in _sends(ops):
        if not op.checked or op.done:
            continue
        op.data = op.data.copy()
        op.done = True
        call = _checks.here(rank, _call_of(what, op))
        if (call.path, call.line) in reported:
            continue
        reported.add((call.path, call.line))
        _checks.record(_checks.Finding(
            "buffering", "this standard-mode send completes only because MPI buffers it: run as Ssend, every "
                         "rank waits (a deadlock); it hangs where MPI does not buffer it (large messages, another MPI)",
            "post the receive first (Irecv, then Send, then Wait), or use Sendrecv", (call,)))
