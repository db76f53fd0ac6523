"""The handles ``--check`` follows: handle-leak and handle-at-finalize.

The stand-in's modules call ``handle_made`` where a handle is made,
``handle_given`` when the user's object for it exists and ``handle_freed``
where Free releases it; each returns at once unless one of the two checks
is on (``ON``, set by ``start``). Only handles the user's own line made count (see
``_usercode``): predefined handles, and those
the stand-in or mpi4py's own modules make, are not the program's.

* handle-leak: the user's last reference to a handle goes (a weak
  reference's callback) while the user's code runs, unfreed, for the second
  time from one line: a leak that grows with the run.
* handle-at-finalize: every handle still unfreed when the program ends
  (MPI.Finalize, or the end of its script, where mpi4py finalizes), held or
  dropped, one finding per line that made them, with their count, as MPI
  correctness tools report the resources not freed before MPI_Finalize.
"""

from __future__ import annotations

import functools
import sys
import weakref

from simdist import checks

from . import _usercode

_handles: dict[int, list] = {}  # id(what Free releases) -> [kind, Call, weak reference to the user's handle]
_dropped: dict = {}  # Call -> [kind, how many of its handles the user's code dropped unfreed]
_KINDS = ("handle-leak", "handle-at-finalize")
#: Whether either is on in this installation (``start``): every hook returns at once when not.
ON = False


def start() -> None:
    global ON
    ON = any(checks.enabled(kind) for kind in _KINDS)

#: The calls that make each kind of handle: a handle counts only when the
#: user called one of these (not when the stand-in made it for another call,
#: as the private duplicate of a communicator that File.Open makes).
MAKERS = {
    "communicator": {"Dup", "Dup_with_info", "Idup", "Idup_with_info", "Split", "Split_type", "Create",
                     "Create_group", "Create_intercomm", "Merge", "Create_cart", "Create_graph", "Create_dist_graph",
                     "Create_dist_graph_adjacent", "Sub", "Clone", "Create_from_group", "Accept", "Connect",
                     "Spawn", "Spawn_multiple", "Join"},
    "group": {"Get_group", "Get_remote_group", "Incl", "Excl", "Range_incl", "Range_excl", "Union", "Intersection",
              "Intersect", "Difference", "Dup", "Create_from_session_pset", "Get_group_of"},
    "datatype": {"Dup", "Create_dup", "Create_contiguous", "Create_vector", "Create_hvector", "Create_indexed",
                 "Create_hindexed", "Create_indexed_block", "Create_hindexed_block", "Create_struct",
                 "Create_subarray", "Create_darray", "Create_resized"},  # not Create_f90_*: predefined
    "window": {"Create", "Allocate", "Allocate_shared", "Create_dynamic"},
    "op": {"Create"},
    "file": {"Open"},
}


def handle_made(key, kind: str, handle=None) -> None:
    """A handle of ``kind`` (a key of ``MAKERS``) the user made; ``key`` is
    what its Free releases, ``handle`` the object the user holds (or later
    ``handle_given``)."""
    if not ON:
        return
    found = _usercode.entry()
    if found is not None and _makes(found[2], found[3], kind):
        path, line, name, _ = found
        article = "an" if kind[0] in "aeiou" else "a"
        _handles[id(key)] = [kind, _usercode.call_at(f"{name} ({article} {kind})", (path, line)), None]
        if handle is not None:
            handle_given(handle, key)


#: The classes (by name) whose calls make each kind, for a call name several kinds share (Dup, Create).
_CLASSES = {"communicator": "Comm", "group": "Group", "datatype": "Datatype", "window": "Win", "op": "Op",
            "file": "File"}
_SHARED = {name for kind in MAKERS for name in MAKERS[kind]
           if sum(name in names for names in MAKERS.values()) > 1}


def _makes(name: str, receiver, kind: str) -> bool:
    """Whether the user's call ``name`` on ``receiver`` makes a handle of ``kind``."""
    if name not in MAKERS[kind]:
        return False
    if name not in _SHARED:
        return True
    cls = receiver if isinstance(receiver, type) else type(receiver)
    return any(c.__name__ == _CLASSES[kind] for c in cls.__mro__)


def handle_given(handle, key) -> None:
    """``handle`` is the user's object for ``key``: losing it unfreed is a
    leak. The stand-in may wrap a new communicator more than once in the
    call that makes it (Sub: a Split, then a Cartcomm); the last object
    made in that call is the user's."""
    entry = _handles.get(id(key)) if _handles else None
    if entry is None:
        return
    if entry[2] is not None and _usercode.user_site() != (entry[1].path, entry[1].line):
        return
    entry[2] = weakref.ref(handle, functools.partial(_lost, id(key)))


def handle_freed(key) -> None:
    if _handles:
        _handles.pop(id(key), None)


def _lost(key_id: int, ref) -> None:
    """The user's last reference to a handle not freed went away. While the
    user's code runs (a user frame on the stack) it can never be freed: a
    leak, reported when the same line has leaked twice (a leak that grows:
    a handle made in a loop or in a function called again and again). At
    the program's end (its globals going) it is a handle held to the end:
    not a growing leak, but still one for handle-at-finalize."""
    entry = _handles.get(key_id)
    if entry is None or entry[2] is not ref:  # freed, or an object the stand-in replaced
        return
    if not _user_running():
        return  # still in ``_handles``: held at the end
    del _handles[key_id]
    kind, call, _ = entry
    dropped = _dropped.setdefault(call, [kind, 0])
    dropped[1] += 1
    if dropped[1] < 2:  # once: a bounded leak, which MPI.Finalize frees
        return
    checks.record(checks.Finding(
        "handle-leak", f"the {kind}s made by {call.call.split(' (')[0]} are dropped without being freed, one after "
                       "another: the leak grows with the run",
        "Free each one when done (or make one, keep it and reuse it)", (call,)))


def _user_running() -> bool:
    """Whether the program's own code runs: a user frame inside the
    stand-in's caller, before any frame of simdist (which runs the program:
    frames further out, a driver script or a test, are not the program's)."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(_usercode.INSIDE[1]):
            return False
        if not path.startswith(_usercode.INSIDE[0]) and _usercode.users_path(path) is not None:
            return True
        frame = frame.f_back
    return False




def report_held() -> None:
    """The program ends: one handle-at-finalize finding per line whose
    handles are not freed (held, or dropped earlier), with their count."""
    if not checks.enabled("handle-at-finalize"):
        return
    counts = {call: list(entry) for call, entry in _dropped.items()}
    for kind, call, _ in _handles.values():
        counts.setdefault(call, [kind, 0])[1] += 1
    for call, (kind, count) in counts.items():
        what = f"a {kind}" if count == 1 else f"{count} {kind}s"
        checks.record(checks.Finding(
            "handle-at-finalize", f"{what} made by {call.call.split(' (')[0]} at this line "
                                  f"{'is' if count == 1 else 'are'} never freed before MPI.Finalize (or the "
                                  "program's end)",
            f"call Free on each {kind} when done with it", (call,), {"count": count, "handle": kind}))


def forget() -> None:
    global ON
    ON = False
    _handles.clear()
    _dropped.clear()
