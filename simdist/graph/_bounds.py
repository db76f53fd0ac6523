"""Rounding-error bounds for graph values, from the summation bound.

A sum of ``k`` floating-point terms computed in any order is within
``gamma(k) * sum(|terms|)`` of the exact sum (``gamma(k) = k u / (1 - k u)``,
``u`` the unit roundoff). Two computations of the same value that differ
only in how their sums are split (one device against N, or one MPI
algorithm against another) are therefore within ``2 gamma(K) M`` of each
other, where:

* ``M = magnitude(node)`` re-evaluates the node on absolute values
  (``|a| @ |b|`` for ``a @ b``, ``|a| + |b|`` for ``a ± b``, ...), the
  ``sum(|terms|)`` of every sum inside it. A nonlinear op ``f`` passes its
  input's magnitude on through its slope, ``|f(z)| + |f'(z)| M(z)``, so an
  error made before it (a row of logits rounded differently, say) is paid
  for after it;
* ``K = summands(node)`` counts the terms of every sum on the way, plus the
  ranks of each reduction and one for every other rounding op, so each
  rounding step is paid for once.

This is a first-order bound: it linearises the nonlinear ops and assumes that
no comparison (relu's, maximum's) flips between the two computations, which
holds unless a value lies within rounding of the kink.
"""

from __future__ import annotations

import numpy as np

from .._communicator import REDUCTIONS
from . import _node as n
from ._executor import schedule
from ._node import Node

__all__ = ["magnitude", "summands", "gamma"]

_LINEAR = ("identity", "cast", "reshape", "transpose", "broadcast_to", "negative")


def gamma(k: int, dtype) -> float:
    """``k u / (1 - k u)`` for ``dtype``'s unit roundoff ``u``."""
    u = float(np.finfo(dtype).eps) / 2
    return k * u / (1 - k * u) if k * u < 1 else float("inf")


def magnitude(node: Node, size: int = 1) -> Node:
    """A node computing the ``sum(|terms|)`` magnitude of ``node`` (see above).

    Communication reduces magnitudes with ``sum``; ``size`` is the world size,
    to undo a ``mean``.
    """
    memo: dict[int, Node] = {}
    # Input edges only: ``after`` dependencies order a run (backprop puts the
    # whole forward pass before its gradients) but put no term into the value.
    for x in schedule([node], after=False):
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
    if op == "divide":                   # |a|/|b| and the slope in b, |a| M(b) / b^2
        a, b = x.inputs
        return m[0] / _abs(b) + _abs(a) * m[1] / (b * b)
    if op == "dot":
        return n.dot(m[0], m[1])
    if op == "sum":
        return Node("sum", m, x.shape, x.dtype, x.attrs)
    if op == "exp":                      # e^z (1 + M(z))
        return x * (1.0 + m[0])
    if op == "log":                      # |log z| + M(z) / |z|
        return _abs(x) + m[0] / _abs(x.inputs[0])
    if op == "softmax":                  # |dp_i| <= p_i (|dz_i| + sum_j p_j |dz_j|)
        spread = n.sum(x * m[0], x.attrs["axis"], keepdims=True)
        return x * (1.0 + m[0] + spread)
    if op == "relu":                     # 1-Lipschitz
        return m[0]
    if op == "maximum":
        return n.maximum(m[0], m[1])
    if op == "relu_grad":
        return Node("relu_grad", (x.inputs[0], m[1]), x.shape, x.dtype)
    if op in REDUCTIONS and x.attrs["op"] in ("sum", "mean"):
        total = Node(op, m, x.shape, x.dtype, {**x.attrs, "op": "sum"})
        return total / float(size) if x.attrs["op"] == "mean" else total
    if op in ("allgather", "broadcast"):
        return Node(op, m, x.shape, x.dtype, x.attrs)
    return _abs(x)                       # sources and exact ops (one_hot, masks): their own size


_ROUNDING = frozenset(("add", "subtract", "multiply", "divide", "exp", "log", "cast"))


def summands(node: Node, size: int = 1) -> int:
    """``K``: the terms of every sum ``node``'s value goes through (see above)."""
    total = 0
    for x in schedule([node], after=False):
        if x.op == "dot":
            total += x.inputs[0].shape[-1]
        elif x.op == "sum":
            total += int(np.prod([x.inputs[0].shape[a] for a in x.attrs["axes"]], dtype=np.int64))
        elif x.op == "softmax":
            total += x.shape[x.attrs["axis"]] + 3      # exp, the subtraction and the division
        elif x.op in REDUCTIONS:
            total += size
        elif x.op in _ROUNDING:
            total += 1
    return max(total, 1)
