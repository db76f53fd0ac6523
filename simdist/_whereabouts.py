"""Where is each rank: the sentences of the report that ends a hung run.

Both backends describe a rank in the same words, whatever they read its
state from (the simulator's arena, the MPI ranks' answers to "where are
you?"). A backend gives a rank's state as one of the names below, with the
number of calls it has completed and, while it waits, the text of its call.
"""

from __future__ import annotations

__all__ = ["USER", "CALL", "RETURNED", "FAILED", "IDLE", "describe"]

#: The states a rank reports: running user code, waiting in a call, back
#: from the function, raised an exception, or not running a function.
USER, CALL, RETURNED, FAILED, IDLE = "user", "call", "returned", "failed", "idle"


def describe(state, calls: int | None, call: str = "", waited: float | None = None, peer: int | None = None) -> str:
    """One line saying what a rank is doing.

    ``calls`` counts the calls the rank has completed (None: not known, as
    for an MPI rank that returned since it last answered); ``call`` is the text
    of the call it waits in (``allreduce #3 (float32 (4,), op=sum)``),
    ``waited`` how long it has waited there in seconds, ``peer`` the rank it
    waits for, where known. A state that is none of the names is shown as is.
    """
    if state == CALL:
        line = f"waiting in {call}"
        if waited is not None:
            line += f" for {waited:.1f} s"
        if peer is not None:
            line += f", on rank {peer}"
        return line
    if state == USER:
        return f"running user code ({calls} calls completed)"
    if state == RETURNED:
        return "returned from the function" + ("" if calls is None else f" ({calls} calls completed)")
    if state == FAILED:
        return "raised an exception"
    if state == IDLE:
        return "idle"
    return f"unknown state {state}"
