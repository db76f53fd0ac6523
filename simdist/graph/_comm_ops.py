"""Communication ops: collectives and point-to-point messages as graph nodes.

Each op runs the communicator call of the same name (see
:class:`simdist.Communicator` for the semantics) when the executor reaches
it. Shapes are static, so two ops differ from their communicator calls:

* ``reduce`` gives zeros on every rank but ``root`` (instead of ``None``);
* ``allgather`` takes the world ``size`` it is built for, since its result
  is ``(size, *x.shape)``; the executor checks it against the communicator.

``send`` returns a scalar *token* (always 0) that orders it in the graph:
use it, e.g. add it to the loss or pass it to ``identity(x, after=...)``,
or the executor will never reach it. ``recv`` declares the shape and dtype
it expects, and the executor checks what arrives.

Under autodiff, a graph run on N ranks computes the gradient of the sum of
every rank's loss; the adjoints in ``_autodiff.py`` follow from that.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .._communicator import OPS
from ._node import Node, _fail_value, _node

__all__ = ["allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "send", "recv"]

#: The ops whose nodes talk to other ranks; the executor runs them in graph order.
COMM_OPS = frozenset(__all__)


def _check_op(op, name: str) -> str:
    if op not in OPS:
        _fail_value(name, f"op={op!r} is not one of {', '.join(OPS)}")
    return op


def _check_peer(value, name: str, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        _fail_value(name, f"{arg}={value!r} must be a rank, an int >= 0")
    return int(value)


def allreduce(x, op: str = "sum") -> Node:
    """Every rank gets the reduction of all ranks' ``x`` with ``op``."""
    x = _node(x, "allreduce")
    return Node("allreduce", (x,), x.shape, x.dtype, {"op": _check_op(op, "allreduce")})


def reduce(x, root: int = 0, op: str = "sum") -> Node:
    """``root`` gets the reduction of all ranks' ``x``; the others get zeros."""
    x = _node(x, "reduce")
    return Node("reduce", (x,), x.shape, x.dtype,
                {"op": _check_op(op, "reduce"), "root": _check_peer(root, "reduce", "root")})


def broadcast(x, root: int = 0) -> Node:
    """Every rank gets ``root``'s ``x`` (the others' values are ignored)."""
    x = _node(x, "broadcast")
    return Node("broadcast", (x,), x.shape, x.dtype, {"root": _check_peer(root, "broadcast", "root")})


def allgather(x, size: int) -> Node:
    """Every rank gets the stack of all ranks' ``x``, ``(size, *x.shape)``."""
    x = _node(x, "allgather")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
        _fail_value("allgather", f"size={size!r} must be the world size, an int >= 1")
    return Node("allgather", (x,), (int(size),) + x.shape, x.dtype)


def reduce_scatter(x, op: str = "sum") -> Node:
    """Rank ``r`` gets block ``r`` of the reduction of ``x``, of shape ``(size, ...)``."""
    x = _node(x, "reduce_scatter")
    if x.ndim < 1:
        _fail_value("reduce_scatter", f"x must have a leading (size, ...) axis, got {x!r}")
    return Node("reduce_scatter", (x,), x.shape[1:], x.dtype, {"op": _check_op(op, "reduce_scatter")})


def send(x, dest: int, tag: int = 0) -> Node:
    """Send ``x`` to rank ``dest``; the node's value is a scalar 0 (a token)."""
    x = _node(x, "send")
    return Node("send", (x,), (), x.dtype,
                {"dest": _check_peer(dest, "send", "dest"), "tag": _check_peer(tag, "send", "tag")})


def recv(source: int, shape: Sequence[int], dtype="float32", tag: int = 0) -> Node:
    """The next message from rank ``source`` with ``tag``, of ``shape`` and ``dtype``."""
    shape = tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        _fail_value("recv", f"shape={shape!r} must be non-negative ints")
    return Node("recv", (), shape, dtype,
                {"source": _check_peer(source, "recv", "source"), "tag": _check_peer(tag, "recv", "tag")})
