"""A failed Spawn made in another thread than the main one fails the main thread too.

mpi4py's ``MPIPoolExecutor`` spawns its workers from a thread of its own; a
``Spawn`` that fails there (too few spare slots) ends only that thread, and
the program then waits for its futures for ever, in its own code, where no
hang report reaches. So while the stand-in is installed, such an error is
raised in that thread as usual and is then raised in the main thread as
well, through a signal (SIGUSR2) that interrupts whatever the main thread
waits for. The handler is installed only where SIGUSR2 has none of its own.
"""

from __future__ import annotations

import copy
import signal
import threading

_pending: list[tuple[BaseException, str]] = []  # each error, and the thread it was raised in
_saved = None  # the SIGUSR2 handler to put back; None while not armed


def arm() -> None:
    """Install the handler (main thread only, and only over the default one)."""
    global _saved
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGUSR2) != signal.SIG_DFL:
        return
    _saved = signal.signal(signal.SIGUSR2, _raise_pending)


def disarm() -> None:
    global _saved
    if _saved is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR2, _saved)
        _saved = None
    _pending.clear()


def failed_in_a_thread(error: BaseException) -> None:
    """Raise ``error`` in the main thread too, if this is another thread."""
    if _saved is None or threading.current_thread() is threading.main_thread():
        return
    _pending.append((error, threading.current_thread().name))
    signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR2)


def _raise_pending(signum, frame) -> None:
    if _pending:
        error, thread = _pending.pop(0)
        where = f"called in thread {thread!r} of this rank; a failed call there would leave the program waiting for it"
        again = copy.copy(error)  # an MPI.Exception keeps its code; its detail says where
        again.__notes__ = [*getattr(error, "__notes__", []), where]
        raise again
