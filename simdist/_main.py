"""Running a program as ``__main__`` in a rank, as ``python`` would run it:
a script's path, a module (``-m``) or source code (``-c``), and its
``atexit`` handlers when it ends.

A rank's process outlives its program (it runs the next one, and leaves
with ``os._exit``), so the interpreter's own exit never runs the handlers
the program registers. While the program runs, ``atexit.register`` and
``unregister`` keep its handlers aside; when it ends (it returns, calls
``sys.exit`` or raises) they run, last registered first, as ``python``
runs them at exit: before the rank leaves MPI, so that a handler may still
communicate (rank 0 of a cluster launcher tells the others to stop from
one). A handler that raises is printed as Python prints it and does not
change the exit status. None is carried to the rank's next program, and
none runs after ``forget_exit_handlers`` (MPI_Abort: the process is gone)
nor when the run unwinds the rank for another's failure (``Aborted``), as
``mpiexec`` kills the other ranks of a job whose rank failed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import runpy
import sys
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


_kept_aside: list[list[tuple]] = []  # the handlers of each program running (run_main inside run_main)


def forget_exit_handlers() -> None:
    """Drop the handlers of every program running in this process: none
    runs when they end (the process is gone, for all they can tell)."""
    for handlers in _kept_aside:
        handlers.clear()


@contextlib.contextmanager
def _exit_handlers():
    """Keep the handlers registered with ``atexit`` in the block aside, and
    run them when it ends, however it ends (see the module docstring)."""
    handlers: list[tuple] = []
    _kept_aside.append(handlers)
    real = atexit.register, atexit.unregister

    def register(func, *args, **kwargs):
        handlers.append((func, args, kwargs))
        return func

    def unregister(func):
        handlers[:] = [h for h in handlers if h[0] != func]

    atexit.register, atexit.unregister = register, unregister
    try:
        yield
    except Aborted:  # the run ends for another rank's failure: mpiexec kills such a rank, which runs none
        handlers.clear()
        raise
    finally:
        atexit.register, atexit.unregister = real
        _kept_aside.remove(handlers)
        while handlers:
            func, args, kwargs = handlers.pop()
            try:
                func(*args, **kwargs)
            except BaseException as exc:  # SystemExit too, as Python ignores it there
                print(f"Exception ignored in atexit callback: {func!r}", file=sys.stderr)
                traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next, file=sys.stderr)
