"""Rounding-error bounds for graph values, from the summation bound.

A sum of ``k`` floating-point terms computed in any order is within
``gamma(k) * sum(|terms|)`` of the exact sum (``gamma(k) = k u / (1 - k u)``,
``u`` the unit roundoff). Two computations of the same value that differ
only in how their sums are split (one device against N, or one MPI
algorithm against another) are therefore within ``2 gamma(K) M`` of each
other, where:

* ``M = magnitude(node)`` re-evaluates the node's linear part on absolute
  values (``|a| @ |b|`` for ``a @ b``, ``|a| + |b|`` for ``a ± b``, ...), the
  ``sum(|terms|)`` of every sum inside it; nonlinear ops (exp, log, softmax,
  relu, ...) enter with the magnitude of their value;
* ``K = summands(node)`` counts the terms of every sum on the way, plus the
  ranks of each reduction, so each rounding step is paid for once.

This is a first-order bound: it ignores how errors are amplified through
nonlinear ops, which for the well-scaled values of training is far below
the slack of counting every sum's terms.
"""

from __future__ import annotations

import numpy as np

from . import _node as n
from ._node import Node

__all__ = ["magnitude", "summands", "gamma"]

_LINEAR = ("identity", "cast", "reshape", "transpose", "broadcast_to", "negative")


def gamma(k: int, dtype) -> float:
    """``k u / (1 - k u)`` for ``dtype``'s unit roundoff ``u``."""
    u = float(np.finfo(dtype).eps) / 2
    return k * u / (1 - k * u) if k * u < 1 else float("inf")


def _data_order(node: Node) -> list[Node]:
    """``node`` and every node its value is computed from, inputs first.

    Unlike :func:`schedule`, ``after`` dependencies do not count: they order
    the run (backprop puts the whole forward pass before its gradients) but
    no sum of theirs reaches the value.
    """
    order: list[Node] = []
    done: set[int] = set()
    stack = [(node, False)]
    while stack:
        x, expanded = stack.pop()
        if id(x) in done:
            continue
        if expanded:
            done.add(id(x))
            order.append(x)
            continue
        stack.append((x, True))
        stack.extend((i, False) for i in reversed(x.inputs) if id(i) not in done)
    return order


def magnitude(node: Node, size: int = 1) -> Node:
    """A node computing the ``sum(|terms|)`` magnitude of ``node`` (see above).

    Communication reduces magnitudes with ``sum``; ``size`` is the world size,
    to undo a ``mean``.
    """
    memo: dict[int, Node] = {}
    for x in _data_order(node):
        memo[id(x)] = _magnitude(x, [memo[id(i)] for i in x.inputs], size)
    return memo[id(node)]


def _abs(x: Node) -> Node:
    return n.maximum(x, -x)


def _magnitude(x: Node, m: list[Node], size: int) -> Node:
    op = x.op
    if op in _LINEAR:
        return Node(op if op != "negative" else "identity", m, x.shape, x.dtype, x.attrs, None)
    if op in ("add", "subtract"):
        return m[0] + m[1]
    if op == "multiply":
        return m[0] * m[1]
    if op == "divide":
        return m[0] / _abs(x.inputs[1])
    if op == "dot":
        return n.dot(m[0], m[1])
    if op == "sum":
        return Node("sum", m, x.shape, x.dtype, x.attrs)
    if op == "relu_grad":
        return Node("relu_grad", (x.inputs[0], m[1]), x.shape, x.dtype)
    if op in ("allreduce", "reduce", "reduce_scatter") and x.attrs["op"] in ("sum", "mean"):
        total = Node(op, m, x.shape, x.dtype, {**x.attrs, "op": "sum"})
        return total / float(size) if x.attrs["op"] == "mean" else total
    if op in ("allgather", "broadcast"):
        return Node(op, m, x.shape, x.dtype, x.attrs)
    return _abs(x)


def summands(node: Node, size: int = 1) -> int:
    """``K``: the terms of every sum ``node``'s value goes through (see above)."""
    total = 0
    for x in _data_order(node):
        if x.op == "dot":
            total += x.inputs[0].shape[-1]
        elif x.op == "sum":
            total += int(np.prod([x.inputs[0].shape[a] for a in x.attrs["axes"]], dtype=np.int64))
        elif x.op == "softmax":
            total += x.shape[x.attrs["axis"]]
        elif x.op in ("allreduce", "reduce", "reduce_scatter"):
            total += size
    return max(total, 1)
