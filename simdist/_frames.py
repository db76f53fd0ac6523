"""The frame of a traceback that a user should look at first.

An exception raised inside numpy, torch, simdist, the simulated mpi4py or the real
one (whose frames name Cython sources such as ``Comm.pyx``) is the user's
mistake in the frame that called into them. :func:`user_frame` finds that
frame: the innermost one whose file is a real file outside those packages
and outside Python's own library.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import sysconfig
import traceback
from types import TracebackType

__all__ = ["caller_site", "user_frame", "where_raised"]


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return os.path.dirname(os.path.abspath(origin)) + os.sep if origin else None


def _library_dirs() -> tuple[str, ...]:
    dirs = {os.path.dirname(os.path.abspath(__file__)) + os.sep, _package_dir("fake_backends.mpi4py"),
            _package_dir("numpy"), _package_dir("torch")}
    for key in ("stdlib", "platstdlib"):
        dirs.add(os.path.abspath(sysconfig.get_paths()[key]) + os.sep)
    return tuple(d for d in dirs if d)


_LIBRARIES: tuple[str, ...] | None = None


def _is_library(filename: str) -> bool:
    global _LIBRARIES
    if _LIBRARIES is None:
        _LIBRARIES = _library_dirs()
    if not os.path.isfile(filename):  # <string>, Cython sources of compiled modules
        return True
    path = os.path.abspath(filename)
    return path.startswith(_LIBRARIES) or "mpi4py" in path.split(os.sep)


def user_frame(tb: TracebackType | None) -> traceback.FrameSummary | None:
    """The innermost frame of ``tb`` in the user's code (the innermost of
    all when every frame is a library's)."""
    frames = traceback.extract_tb(tb)
    for frame in reversed(frames):
        if not _is_library(frame.filename):
            return frame
    return frames[-1] if frames else None


def where_raised(exc: BaseException) -> str:
    """``file:line in function`` of the user's frame that raised ``exc``."""
    frame = user_frame(exc.__traceback__)
    return "" if frame is None else f"{frame.filename}:{frame.lineno} in {frame.name}"


def caller_site() -> tuple[str, int] | None:
    """``(absolute path, line)`` of the innermost frame of the current stack
    in the user's code, or None when every frame is a library's."""
    frame = sys._getframe(1)
    while frame is not None and _is_library(frame.f_code.co_filename):
        frame = frame.f_back
    return None if frame is None else (os.path.abspath(frame.f_code.co_filename), frame.f_lineno)
