"""Running a program as ``__main__`` in a rank, as ``python`` would run it:
a script's path, a module (``-m``) or source code (``-c``), and what the
interpreter does when it ends.

A rank's process outlives its program (it runs the next one, and leaves
with ``os._exit``), so the interpreter's own exit never comes for the
program. While the program runs, ``atexit.register`` and ``unregister``
keep its handlers aside; when it ends (it returns, calls ``sys.exit`` or
raises) this does what ``python`` does at exit (``_Ending``): waits for
the non-daemon threads the program started (a client thread that runs on
after the main one has finished, as dask-mpi's), then runs the handlers,
last registered first. All before the rank leaves MPI, so that a thread or
a handler may still communicate (rank 0 of a cluster launcher tells the
others to stop from one). A handler that raises is printed as Python
prints it and does not change the exit status. None is carried to the
rank's next program, and none runs after ``end_as_killed`` (MPI_Abort:
the process is gone) nor when the run unwinds the rank for another's
failure (``Aborted``), as ``mpiexec`` kills the other ranks of a job whose
rank failed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import runpy
import sys
import threading
import traceback

from ._errors import Aborted


def run_main(target: str, argv: list[str], module: bool, code: bool = False) -> int:
    """Run ``target`` as ``__main__``: a script's path, a module
    (``module``) or, with ``code``, Python source as ``python -c`` does."""
    old_argv = sys.argv[:]
    sys.argv = ["-c" if code else target, *argv]
    for stream in (sys.stdout, sys.stderr):  # whole lines per write: ranks share the terminal
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True, write_through=False)
    if module and os.getcwd() not in sys.path:  # as `python -m` does
        sys.path.insert(0, os.getcwd())
    if code:  # as `python -c` does: the working directory first
        sys.path.insert(0, "")
    elif not module:  # as `python script.py` does: the script's directory first, __file__ absolute
        target = os.path.abspath(target)
        sys.path.insert(0, os.path.dirname(target))
    try:
        with _exit_handlers():
            if code:
                exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            elif module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    finally:
        sys.argv = old_argv
        if code and sys.path[:1] == [""] or not (module or code) and sys.path[:1] == [os.path.dirname(target)]:
            del sys.path[0]
        sys.stdout.flush()
        sys.stderr.flush()


class _Ending:
    """What the end of one program running in this process does, as the
    interpreter's exit does: the ``threading`` atexit calls the program
    registered (mpi4py.futures stops its pools' threads so), a wait for
    the non-daemon threads it started, then its ``atexit`` handlers, last
    registered first. ``gone``: it ends as a killed process, doing none."""

    def __init__(self):
        self.handlers: list[tuple] = []
        self.threads_before = set(threading.enumerate())
        self.thread_exits = len(_THREAD_EXITS)
        self.gone = False

    def killed(self) -> None:
        """End as a killed process: nothing of the above happens."""
        self.gone = True
        self.handlers.clear()
        del _THREAD_EXITS[self.thread_exits:]

    def wait_for_threads(self) -> None:
        calls = _THREAD_EXITS[self.thread_exits:]
        del _THREAD_EXITS[self.thread_exits:]
        for call in reversed(calls):
            if getattr(call, "func", None) is not _pool_module("_python_exit"):
                call()
        me = threading.current_thread()
        while left := [t for t in threading.enumerate()
                       if not t.daemon and t is not me and t not in self.threads_before and not _pool_worker(t)]:
            for thread in left:
                thread.join()


def _pool_worker(thread: threading.Thread) -> bool:
    """Whether ``thread`` is a worker of a ``concurrent.futures`` thread
    pool (asyncio's executor's too). The interpreter's exit stops those by
    its exit call (``_python_exit``), which sets a flag of that module for
    the whole process: the rank's next program would inherit it. So that
    call is not made, and such workers are not waited for."""
    worker = _pool_module("_worker")
    return worker is not None and getattr(thread, "_target", None) is worker


def _pool_module(name: str):
    """``concurrent.futures.thread``'s ``name``, if that module is loaded."""
    return getattr(sys.modules.get("concurrent.futures.thread"), name, None)


#: CPython's calls before its exit joins the threads (``threading._register_atexit``).
_THREAD_EXITS: list = getattr(threading, "_threading_atexits", [])
_running: list[_Ending] = []  # each program running in this process (run_main inside run_main)


def end_as_killed() -> None:
    """Every program running in this process ends as a killed process:
    no thread is waited for, no handler runs (MPI_Abort)."""
    for ending in _running:
        ending.killed()


@contextlib.contextmanager
def _exit_handlers():
    """Keep the handlers registered with ``atexit`` in the block aside, and
    when it ends, however it ends, wait for the threads and run them (see
    ``_Ending`` and the module docstring)."""
    ending = _Ending()
    handlers = ending.handlers
    _running.append(ending)
    real = atexit.register, atexit.unregister

    def register(func, *args, **kwargs):
        handlers.append((func, args, kwargs))
        return func

    def unregister(func):
        handlers[:] = [h for h in handlers if h[0] != func]

    atexit.register, atexit.unregister = register, unregister
    try:
        yield
    except Aborted:  # the run ends for another rank's failure: mpiexec kills such a rank
        ending.killed()
        raise
    finally:
        atexit.register, atexit.unregister = real
        _running.remove(ending)
        if not ending.gone:
            ending.wait_for_threads()
        while handlers:
            func, args, kwargs = handlers.pop()
            try:
                func(*args, **kwargs)
            except BaseException as exc:  # SystemExit too, as Python ignores it there
                print(f"Exception ignored in atexit callback: {func!r}", file=sys.stderr)
                traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next, file=sys.stderr)
