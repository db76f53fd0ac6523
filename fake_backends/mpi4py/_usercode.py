"""Which calls into the stand-in are the user's (for ``--check``).

What counts as the user's
-------------------------
A request, handle or receive counts only when the call that made it came
straight from the user's code: the frame just outside the stand-in is a
file of the program, not Python's library, numpy, simdist, mpi4py's own
Python modules (``mpi4py.util``, ``mpi4py.futures``) or an installed
package (site-packages). A communicator kept in a library's module globals
is that library's business, as under MPI, where it is freed at Finalize.
"""

from __future__ import annotations

import functools
import os
import sys

from simdist import checks
from simdist._frames import _is_library

INSIDE = (os.path.dirname(os.path.abspath(__file__)) + os.sep,  # the stand-in and simdist
           os.path.dirname(os.path.dirname(os.path.abspath(checks.__file__))) + os.sep)
_WRAPPERS = "_errhandlers.py"  # the error handlers' wrapper of every call (not the call's name)
_NOT_USER = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def rank() -> int:
    runtime = sys.modules[__package__ + "._runtime"]  # imported by then (it imports this module's users)
    rt = runtime.current
    return rt.me if rt is not None and rt.world is not None else -1


def user_site() -> tuple[str, int] | None:
    """``(path, line)`` of the user's call into the stand-in, or None when
    the stand-in was called by a library (see the module docstring)."""
    found = entry()
    return None if found is None else found[:2]


def entry() -> tuple[str, int, str, object] | None:
    """``(path, line, name, receiver)``: the user's line, and the stand-in
    function it called with its ``self`` (or ``cls``)."""
    frame, called = sys._getframe(2), None
    while frame is not None and frame.f_code.co_filename.startswith(INSIDE):
        if not frame.f_code.co_filename.endswith(_WRAPPERS):
            called = frame
        frame = frame.f_back
    if frame is None or called is None:
        return None
    path = users_path(frame.f_code.co_filename)
    if path is None:
        return None
    receiver = called.f_locals.get("self", called.f_locals.get("cls"))
    return path, frame.f_lineno, called.f_code.co_name, receiver


@functools.lru_cache(maxsize=1024)
def users_path(path: str) -> str | None:
    """The absolute path of ``path`` if its code is the user's (a file of the
    program, not a library's), else None."""
    if _is_library(path) or any(part in path for part in _NOT_USER):
        return None
    return os.path.abspath(path)


def call_at(what: str, site) -> checks.Call:
    return checks.Call(rank(), what, *site)
