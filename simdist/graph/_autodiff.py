"""Reverse-mode automatic differentiation: gradient nodes for a loss.

``backprop(loss, wrt)`` walks the graph from ``loss`` back to its sources
and builds, for each node, the nodes of its inputs' gradients (its
*adjoint*). The result is more graph: it runs on the executor like any
other node, communication included.

**What the gradient is of, on N ranks.** Every rank holds its own copy of
the graph and its own ``loss``; the gradient on rank ``r`` is that of the
sum of all ranks' losses, ``L = loss_0 + ... + loss_{N-1}``, with respect
to rank ``r``'s ``wrt``. On one rank it is the ordinary gradient. The
adjoints of the communication ops follow from that sum:

* ``allreduce`` (sum) ↔ ``allreduce`` (sum); ``allreduce`` (mean) ↔ ``allreduce`` (mean);
* ``allgather`` ↔ ``reduce_scatter`` (sum), in both directions;
* ``broadcast`` from root ↔ ``reduce`` (sum) to root, in both directions;
* ``send`` to ``dest`` ↔ ``recv`` from ``dest``: the gradient travels back
  on the message's tag plus :data:`BACKWARD_TAG`, so forward tags must be
  smaller than it. Every send and recv the loss's schedule makes gets its
  backward message (a zero gradient when this rank's loss does not read
  it), so the two ranks of a message always agree. The backward sends run
  when the gradients are evaluated: a rank that receives must differentiate
  with respect to something (and evaluate that gradient), or its peer waits.

Other reduction ops (min, max, prod, ...) have no gradient here, and asking
for one raises at ``backprop`` time, naming the node.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .._errors import InvalidType, InvalidValue
from . import _comm_ops as c
from . import _node as n
from ._executor import schedule
from ._node import Node

__all__ = ["backprop", "BACKWARD_TAG"]

#: Added to a message's tag for the gradient that travels back.
BACKWARD_TAG = 1 << 14


def backprop(loss: Node, wrt: Sequence[Node]) -> list[Node]:
    """Gradient nodes of ``loss`` with respect to each node of ``wrt``.

    ``loss`` is usually a scalar; a loss with more elements is treated as
    the sum of its elements. A ``wrt`` node the loss does not depend on gets
    a gradient of zeros. Gradients have their node's shape and dtype.
    """
    if not isinstance(loss, Node):
        raise InvalidType(f"graph.backprop: loss={loss!r} is not a graph node")
    if loss.dtype.kind not in "fc":
        raise InvalidType(f"graph.backprop: loss {loss!r} must be floating-point")
    wrt = list(wrt)
    for w in wrt:
        if not isinstance(w, Node) or w.dtype.kind not in "fc":
            raise InvalidType(f"graph.backprop: cannot differentiate with respect to {w!r}; "
                              "wrt must be floating-point graph nodes")
    # The seed runs after ``loss``, so the whole backward pass runs after the
    # forward one: a rank's forward sends and receives (in the order its loss
    # makes them) come before any backward message, even when only gradients
    # are evaluated. Otherwise the gradient through ``send`` (a backward recv
    # that reads nothing of the forward) could run before the send itself.
    seed = n.identity(n.constant(np.ones(loss.shape, loss.dtype)), after=[loss])
    grads: dict[int, Node] = {id(loss): seed}
    tokens: list[Node] = []              # backward sends, which must run too
    for node in reversed(schedule([loss])):
        # Every consumer comes later in the schedule, so ``g`` is complete.
        g = grads.get(id(node))
        if g is None and node.op in ("send", "recv"):
            # Every message the forward pass makes gets its backward message,
            # even one this rank's loss does not read (a send token passed in
            # ``after``, a received value left unused): the peer's gradient
            # needs it, and the peer waits for it.
            g = n.identity(n.constant(np.zeros(node.shape, node.dtype)), after=[seed])
        if g is None or node.op in ("parameter", "constant"):
            continue
        if node.op in ("send", "recv") and node.attrs["tag"] >= BACKWARD_TAG:
            raise InvalidValue(f"graph.backprop: {node!r} has tag={node.attrs['tag']}; the gradient "
                               f"travels back on tag + BACKWARD_TAG, so forward tags must be "
                               f"< BACKWARD_TAG={BACKWARD_TAG}")
        if node.op == "recv":
            tokens.append(c.send(g, node.attrs["source"], node.attrs["tag"] + BACKWARD_TAG))
            continue
        adjoint = _ADJOINTS.get(node.op)
        if adjoint is None:
            raise InvalidValue(f"graph.backprop: {node!r} has no gradient")
        for inp, gi in zip(node.inputs, adjoint(node, g, *node.inputs)):
            if gi is None or inp.dtype.kind not in "fc":
                continue
            prev = grads.get(id(inp))
            grads[id(inp)] = gi if prev is None else n.add(prev, gi)
    out = []
    for w in wrt:
        g = grads.get(id(w))
        if g is None:
            g = n.constant(np.zeros(w.shape, w.dtype))
        out.append(n.identity(g, after=tokens) if tokens else g)
    return out


# --- adjoints: (node, gradient of its output, *its inputs) -> gradients of the inputs ---

def _unbroadcast(g: Node, shape: tuple) -> Node:
    """Sum ``g`` back down to ``shape``, undoing numpy broadcasting."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1)
    return n.reshape(n.sum(g, axes), shape)


def _dot(node, g, a, b):
    if a.ndim == 1 and b.ndim == 1:
        return g * b, g * a
    if a.ndim == 1:                       # (k,) @ (k, m) -> (m,)
        return n.dot(b, g), n.dot(n.reshape(a, (-1, 1)), n.reshape(g, (1, -1)))
    if b.ndim == 1:                       # (m, k) @ (k,) -> (m,)
        return n.dot(n.reshape(g, (-1, 1)), n.reshape(b, (1, -1))), n.dot(n.transpose(a), g)
    return n.dot(g, n.transpose(b)), n.dot(n.transpose(a), g)


def _sum(node, g, x):
    keep = tuple(1 if i in node.attrs["axes"] else d for i, d in enumerate(x.shape))
    return (n.broadcast_to(n.reshape(g, keep), x.shape),)


def _softmax(node, g, x):
    axis = node.attrs["axis"]
    inner = n.sum(g * node, axis, keepdims=True)
    return (node * (g - inner),)


def _maximum(node, g, a, b):
    take_a = Node("greater_equal", (a, b), node.shape, node.dtype)
    return _unbroadcast(g * take_a, a.shape), _unbroadcast(g * (1 - take_a), b.shape)


def _allreduce(node, g, x):
    op = node.attrs["op"]
    if op not in ("sum", "mean"):
        raise InvalidValue(f"graph.backprop: {node!r} with op={op!r} has no gradient; only sum and mean do")
    return (c.allreduce(g, op),)


def _reduce(node, g, x):
    if node.attrs["op"] != "sum":
        raise InvalidValue(f"graph.backprop: {node!r} with op={node.attrs['op']!r} has no gradient; "
                           "only sum does")
    return (c.broadcast(g, node.attrs["root"]),)


def _reduce_scatter(node, g, x):
    if node.attrs["op"] != "sum":
        raise InvalidValue(f"graph.backprop: {node!r} with op={node.attrs['op']!r} has no gradient; "
                           "only sum does")
    return (c.allgather(g, x.shape[0]),)


_ADJOINTS = {
    "identity": lambda node, g, x: (g,),
    "cast": lambda node, g, x: (n.cast(g, x.dtype),),
    "add": lambda node, g, a, b: (_unbroadcast(g, a.shape), _unbroadcast(g, b.shape)),
    "subtract": lambda node, g, a, b: (_unbroadcast(g, a.shape), _unbroadcast(-g, b.shape)),
    "multiply": lambda node, g, a, b: (_unbroadcast(g * b, a.shape), _unbroadcast(g * a, b.shape)),
    "divide": lambda node, g, a, b: (_unbroadcast(g / b, a.shape), _unbroadcast(-(g * node) / b, b.shape)),
    "maximum": _maximum,
    "negative": lambda node, g, x: (-g,),
    "exp": lambda node, g, x: (g * node,),
    "log": lambda node, g, x: (g / x,),
    "relu": lambda node, g, x: (Node("relu_grad", (x, g), g.shape, g.dtype),),
    "softmax": _softmax,
    "one_hot": lambda node, g, labels: (None,),
    "dot": _dot,
    "sum": _sum,
    "broadcast_to": lambda node, g, x: (_unbroadcast(g, x.shape),),
    "reshape": lambda node, g, x: (n.reshape(g, x.shape),),
    "transpose": lambda node, g, x: (n.transpose(g, tuple(np.argsort(node.attrs["axes"]))),),
    "allreduce": _allreduce,
    "reduce": _reduce,
    "broadcast": lambda node, g, x: (c.reduce(g, node.attrs["root"], "sum"),),
    "allgather": lambda node, g, x: (c.reduce_scatter(g, "sum"),),
    "reduce_scatter": _reduce_scatter,
    # The recv reads nothing of ``g``; ``after=[g]`` keeps it in the backward pass.
    "send": lambda node, g, x: (n.identity(c.recv(node.attrs["dest"], x.shape, x.dtype,
                                                  node.attrs["tag"] + BACKWARD_TAG), after=[g]),),
}
