"""Admitting ranks to an MPI world: the handshakes on the driver's listener.

A connection to the world's loopback listener is a rank only once it has
proved that it knows the world's secret: ``multiprocessing``'s HMAC
challenge runs both ways, and only then is its hello (rank, pid, size, MPI
library, host name) unpickled. Anything else is refused.

Any local process can connect to a loopback port, so the handshakes must
not wait on one another: each runs in a thread of its own, and a peer that
has not finished its handshake ``HANDSHAKE`` seconds after it was accepted
is dropped (its socket is shut down, which wakes the thread). A silent or
slow peer, or one with a wrong secret, thus costs a thread for a few
seconds and delays no rank. At most ``MOST_PENDING`` handshakes run at
once; later connections wait in the listener's backlog.

Ownership, which keeps the threads simple: the thread talks over its own
duplicate of the socket's descriptor (a ``Connection``); the accepted
socket stays with the caller's thread, which alone shuts it down (at the
deadline) and closes it (once the handshake's thread has finished).
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import select
import socket
import struct
import threading
import time
from multiprocessing.connection import AuthenticationError, Connection, answer_challenge, deliver_challenge

_log = logging.getLogger("simdist")

HANDSHAKE = 3.0  # seconds a connecting peer gets to prove it has the secret and say hello
MOST_PENDING = 64  # handshakes at once


class Refused(Exception):
    """A connection that is not a rank of this world."""


def _timeouts(sock: socket.socket, seconds: float) -> None:
    """Bound each blocking send and receive on ``sock`` (0: no bound); the
    options live on the socket, so they hold for every duplicate of it."""
    tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


def authenticate(sock: socket.socket, key: bytes) -> tuple[tuple, Connection]:
    """The handshake with the peer on ``sock``: the challenge both ways,
    then its hello ``("hello", rank, pid, size, library, host)``. Returns the
    hello and a Connection over a duplicate of ``sock``'s descriptor (the
    caller closes ``sock``); raises :class:`Refused` for anything else.
    Each send and receive is bounded by ``HANDSHAKE`` seconds."""
    sock.setblocking(True)
    _timeouts(sock, HANDSHAKE)
    conn = Connection(os.dup(sock.fileno()))
    try:
        deliver_challenge(conn, key)  # the peer proves it has the key before we answer or unpickle
        answer_challenge(conn, key)
        hello = pickle.loads(conn.recv_bytes(1024))
        if not (isinstance(hello, tuple) and len(hello) == 6 and hello[0] == "hello"
                and all(isinstance(v, int) for v in hello[1:4]) and all(isinstance(v, str) for v in hello[4:])):
            raise Refused(f"unexpected greeting {hello!r}")
        _timeouts(sock, 0)  # no bounds once it is a rank
    except Refused:
        conn.close()
        raise
    except (BlockingIOError, TimeoutError):  # a send or receive ran past its bound: the same as the driver's drop
        conn.close()
        raise Refused(f"no handshake within {HANDSHAKE:g} s") from None
    except (AuthenticationError, OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError,
            AssertionError) as exc:  # answer_challenge asserts the challenge's form
        conn.close()
        raise Refused(str(exc) or type(exc).__name__) from None
    return hello, conn


def refused(exc: Refused) -> None:
    _log.warning("backend 'mpi': refused a connection to the world's listener: %s", exc)


class _Pending:
    """One handshake in progress; ``outcome`` is set by its thread."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.deadline = time.monotonic() + HANDSHAKE
        self.dropped = False
        self.outcome: tuple | None = None  # ("ok", hello, conn) or ("refused", Refused)
        self.thread: threading.Thread | None = None


class Handshakes:
    """The handshakes in progress on ``listener``, each in its own thread.

    :meth:`take` accepts new connections, drops overdue ones, and returns
    the next peer that has proved itself; :meth:`close` ends the handshakes
    still running. Used from one thread (the driver's).
    """

    def __init__(self, listener: socket.socket, key: bytes):
        self._listener = listener
        listener.setblocking(False)  # accept only what select reports
        self._key = key
        self._pending: list[_Pending] = []
        self._finished: queue.SimpleQueue = queue.SimpleQueue()
        self._wake_here, self._wake_there = socket.socketpair()  # a finished thread says so

    def take(self, timeout: float) -> tuple[tuple, Connection] | None:
        """The hello and connection of the next peer that passed its
        handshake, waiting up to ``timeout`` seconds; None if none did."""
        until = time.monotonic() + timeout
        while True:
            admitted = self._collect()
            if admitted is not None:
                return admitted
            now = time.monotonic()
            if now >= until:
                return None
            self._drop_overdue(now)
            wait = min([until] + [p.deadline for p in self._pending]) - now
            watched = [self._wake_here] + ([self._listener] if len(self._pending) < MOST_PENDING else [])
            ready, _, _ = select.select(watched, [], [], max(wait, 0.0))
            if self._wake_here in ready:
                self._wake_here.recv(4096)
            if self._listener in ready:
                self._accept()

    def close(self) -> None:
        """End every handshake still running and close what they leave."""
        for pending in self._pending:
            self._drop(pending)
        for pending in self._pending:
            pending.thread.join()
            pending.sock.close()
            if pending.outcome[0] == "ok":
                pending.outcome[2].close()
        self._pending.clear()
        self._wake_here.close()
        self._wake_there.close()

    # -- inside ----------------------------------------------------------------
    def _accept(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):  # gone before we took it
            return
        pending = _Pending(sock)
        pending.thread = threading.Thread(target=self._shake, args=(pending,), name="simdist-handshake", daemon=True)
        self._pending.append(pending)
        pending.thread.start()

    def _shake(self, pending: _Pending) -> None:  # in the handshake's thread
        try:
            pending.outcome = ("ok", *authenticate(pending.sock, self._key))
        except Refused as exc:
            pending.outcome = ("refused", exc)
        except BaseException as exc:  # never lose a thread's end: the driver waits for it
            pending.outcome = ("refused", Refused(f"{type(exc).__name__}: {exc}"))
        self._finished.put(pending)
        self._wake_there.send(b"!")  # open until close() has joined this thread

    def _collect(self) -> tuple[tuple, Connection] | None:
        """The first finished handshake that admits a peer; refusals are logged."""
        while True:
            try:
                pending = self._finished.get_nowait()
            except queue.Empty:
                return None
            pending.thread.join()
            self._pending.remove(pending)
            pending.sock.close()
            outcome = pending.outcome
            if pending.dropped:  # out of time, even if it passed as time ran out
                if outcome[0] == "ok":
                    outcome[2].close()
                refused(Refused(f"no handshake within {HANDSHAKE:g} s"))
            elif outcome[0] == "ok":
                return outcome[1], outcome[2]
            else:
                refused(outcome[1])

    def _drop_overdue(self, now: float) -> None:
        for pending in self._pending:
            if now >= pending.deadline and not pending.dropped:
                self._drop(pending)

    @staticmethod
    def _drop(pending: _Pending) -> None:
        pending.dropped = True
        try:
            pending.sock.shutdown(socket.SHUT_RDWR)  # wakes its thread's receive
        except OSError:
            pass
