"""The backend's calls as events of torch's profiler, as Gloo records them.

While torch's profiler runs, each call records an event named
``<backend>:<call>`` (``simdist:all_reduce`` in a group the program asked
``simdist`` for, ``gloo:all_reduce`` in one that stands in for Gloo) with the call's tensors as its inputs
(complex ones as their real view, as Gloo sees them). The event starts when
the call does and ends when its work completes, on another thread: the
profiler then calls it asynchronous, as Gloo's, whose work runs on threads
of its own. Outside the profiler a call costs one check.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch

_enabled = torch._C._autograd._profiler_enabled
_ender: ThreadPoolExecutor | None = None


def start(group, call: str, tensors) -> list | None:
    """The event of ``call`` on ``group``, started, in a holder for ``end``
    (None when the profiler is off)."""
    if not _enabled():
        return None
    inputs = [torch.view_as_real(t) if t.is_complex() else t for t in tensors]
    event = torch._C._profiler._RecordFunctionFast(f"{group.backend_name}:{call}", inputs)
    event.__enter__()
    return [event]


def end(holder: list | None) -> None:
    """End the event ``start`` gave on the profiler's thread, and wait for it.

    The thread holds the event's last reference: an event freed on the
    thread that started it is recorded as ending there (not asynchronous)."""
    global _ender
    if holder is None:
        return
    if _ender is None:
        _ender = ThreadPoolExecutor(1, thread_name_prefix="simdist-profiler")
    _ender.submit(_finish, holder).result()


def _finish(holder: list) -> None:
    event = holder.pop()
    event.__exit__(None, None, None)
    del event


def profiled(call: str, inputs):
    """Decorate a collective of the group: its event, whose inputs are
    ``inputs(*arguments)``, spans the call."""

    def decorate(method):
        def recorded(self, *args, **kwargs):
            event = start(self, call, inputs(*args)) if _enabled() else None
            try:
                return method(self, *args, **kwargs)
            finally:
                end(event)

        recorded.__name__, recorded.__doc__ = method.__name__, method.__doc__
        return recorded

    return decorate
