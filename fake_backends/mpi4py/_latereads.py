"""Late landing of nonblocking receives (``--check=read-before-wait``).

MPI writes a nonblocking receive's message into its buffer at some time
between the post and the completion (Wait, a true Test); a program that
reads the buffer before the completion reads the old contents or the
message depending on the MPI, its transport and timing. The
check runs the program again with every such receive landing as late as
MPI allows and compares the result (``simdist.checks._latereads``).

On a rank, ``deferring(mode, directory, rank)`` sets how receives land:

* ``mode`` None (the original run): receives land as usual; the user's
  nonblocking receives into plain buffers (Irecv, Isendrecv, each Start of
  Recv_init, Imrecv) are only listed, so the run's side knows whether to re-run.
* ``mode`` "all", or ``[path, line]`` (one post site): at the post the
  receive's buffer is filled with ``PATTERN`` and the message goes to a
  private copy; at the completion the buffer gets its old contents back
  and the message on top, as a receive that lands at the last moment.

Each rank writes what it saw to ``late-R.json`` in ``directory``: per
post site, the call, and the line of the first completion. A derived
datatype's receive (unpacked at its arrival) and the receive buffers of
nonblocking collectives are not deferred.
"""

from __future__ import annotations

import contextlib
import json
import os

import numpy as np

from . import _usercode

#: The byte a deferred receive's buffer holds until it completes (a NaN as
#: a float, -1 as a signed integer: values the message rarely holds).
PATTERN = 0xFF

_mode = None  # None: not looked for; "list", "all" or (path, line)
_sites: dict = {}  # (path, line) -> {"call": desc, "completed": [path, line] or None}
_deferred: dict = {}  # id(op) -> (op, user's view, its contents at the post, site)


@contextlib.contextmanager
def deferring(mode, directory: str, rank: int):
    """Defer (or list) the user's nonblocking receives in the block; see the module docstring."""
    global _mode
    saved, _mode = _mode, ("list" if mode is None else "all" if mode == "all" else tuple(mode))
    try:
        yield
    finally:
        _mode = saved
        sites = [{"site": list(site), **entry} for site, entry in _sites.items()]
        with open(os.path.join(directory, f"late-{rank}.json"), "w", encoding="utf-8") as f:
            json.dump(sites, f)
        _sites.clear()
        _deferred.clear()


def _nonblocking(call: str) -> bool:
    """Whether the receive of ``call`` is deferred: a nonblocking one, but
    not Isendrecv_replace, whose buffer is its send's too."""
    return (call[:1] == "I" or call.endswith("_init")) and not call.endswith("_replace")


def staged(sink, unpack, call: str):
    """The buffer the receive ``call`` into ``sink`` is to be given: a
    private copy when it is deferred, else ``sink`` itself."""
    if _mode in (None, "list") or sink is None or unpack is not None or not sink.size or not _nonblocking(call):
        return sink
    site = _usercode.user_site()
    if site is None or (_mode != "all" and site != _mode):
        return sink
    return np.empty_like(sink)


def posted(op, sink, call: str, desc: str):
    """``op``, of the receive ``call``, was posted into ``sink``: list its
    site; when it was given a private copy (``staged``), fill ``sink`` with
    the pattern until it completes."""
    if _mode is None or sink is None or not sink.size or not _nonblocking(call) or unpack_of(op) is not None:
        return op
    site = _usercode.user_site()
    if site is None:
        return op
    _sites.setdefault(site, {"call": desc, "completed": None})
    if getattr(op, "sink", None) is not None and op.sink is not sink:
        _deferred[id(op)] = (op, sink, sink.copy(), site)
        sink[:] = PATTERN
    return op


def unpack_of(op):
    return getattr(op, "unpack", None)


def completed(op) -> None:
    """The request of ``op`` completed (or was freed): its message lands now.
    An Isendrecv's operation is a pair; its receive is the one deferred."""
    op = getattr(op, "recv", op)
    entry = _deferred.pop(id(op), None) if _deferred else None
    if entry is None:
        return
    _, sink, before, site = entry
    sink[:] = before
    if not op.cancelled and op.status is not None:
        n = min(op.status[2], sink.size)
        sink[:n] = op.sink[:n]
    where = _usercode.user_site()
    if where is not None and _sites[site]["completed"] is None:
        _sites[site]["completed"] = list(where)
