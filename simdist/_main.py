"""Running a program as ``__main__`` in a rank, as ``python`` would run it:
a script's path, a module (``-m``) or source code (``-c``)."""

from __future__ import annotations

import os
import runpy
import sys


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
