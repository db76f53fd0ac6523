"""Ctrl-C in a driver: never dropped, and held back while a process starts.

Python runs a SIGINT handler at whatever bytecode is next, and when that is
a finalizer (a ``__del__``, a weak reference's callback) the
KeyboardInterrupt it raises is printed as "Exception ignored" and dropped.
A driver frees many objects with finalizers -- processes, pipes, weak sets
-- as its worlds start and close, so a Ctrl-C landing there was lost and
the program went on. :func:`keep_interrupts` makes such an interrupt come
again (:func:`_thread.interrupt_main`, called from another thread so that
it is not handled inside the hook itself) at a bytecode past the finalizer.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading


def keep_interrupts() -> None:
    """From now on, a KeyboardInterrupt that Python would drop in a
    finalizer of the main thread is delivered again (idempotent; other
    unraisable exceptions go to the hook that was installed)."""
    if getattr(sys.unraisablehook, "_keeps_interrupts", False):
        return
    previous = sys.unraisablehook

    def hook(unraisable):
        if issubclass(unraisable.exc_type, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            try:  # from another thread, so that the handler runs past this hook (not in it)
                _thread.start_new_thread(_thread.interrupt_main, ())
                return
            except RuntimeError:  # the interpreter is shutting down
                pass
        previous(unraisable)

    hook._keeps_interrupts = True
    sys.unraisablehook = hook


@contextlib.contextmanager
def interrupts_deferred(block: bool = True):
    """Hold Ctrl-C back while a process is being started, and deliver it after.

    A SIGINT that arrives while ``os.fork`` runs is handled by the next
    Python code that runs, which in the parent can be an at-fork hook (the
    logging module's), where the KeyboardInterrupt is printed and dropped:
    the driver went on starting its world. And the child, until it ignores
    SIGINT, is in the driver's process group, so the terminal's Ctrl-C
    killed it ("RankDied ... while the world was starting").

    Within, SIGINT only gets noted (in the main thread, where Python runs
    its handlers), and with ``block`` it is also blocked in this thread, so
    children are born with it blocked (a worker unblocks it once it ignores
    it). On the way out the handler is restored and a noted or pending
    SIGINT reaches it.
    """
    noted = []
    handler = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if callable(handler):
        signal.signal(signal.SIGINT, lambda signum, frame: noted.append(frame))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if block else None
    try:
        yield
    finally:
        if callable(handler):
            signal.signal(signal.SIGINT, handler)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if noted:
            handler(signal.SIGINT, noted[0])
