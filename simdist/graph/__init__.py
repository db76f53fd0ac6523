"""A small training-graph IR: build once, differentiate, run on any communicator.

Build a graph from :func:`parameter` and :func:`constant` with the math ops
(``add``/``+``, ``dot``/``@``, ``sum``, ``softmax``, ...) and the
communication ops (``allreduce``, ``broadcast``, ``allgather``,
``reduce_scatter``, ``send``, ``recv``); shapes and dtypes are checked as you
build. :func:`backprop` adds gradient nodes, communication included;
:class:`Executor` runs the graph on one rank of a communicator (or on one
device, with none); :func:`sgd` and :func:`data_parallel` build training steps.
See docs/graph.md.
"""

from .._errors import InvalidValue
from ._autodiff import BACKWARD_TAG, backprop
from ._bounds import gamma, magnitude, summands
from ._comm_ops import allgather, allreduce, broadcast, recv, reduce, reduce_scatter, send
from ._executor import Executor, evaluate, schedule
from ._node import (
    Node, add, broadcast_to, cast, constant, divide, dot, exp, identity, log, maximum, multiply,
    negative, one_hot, parameter, relu, reshape, softmax, subtract, sum, transpose,
)
from ._passes import Step, broadcast_parameters, data_parallel, rewrite, sgd

__all__ = [
    "Node", "parameter", "constant", "add", "subtract", "multiply", "divide", "negative", "dot",
    "sum", "broadcast_to", "reshape", "transpose", "relu", "exp", "log", "maximum", "softmax",
    "one_hot", "cast", "identity", "cross_entropy",
    "allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "send", "recv",
    "backprop", "BACKWARD_TAG", "Executor", "evaluate", "schedule",
    "Step", "sgd", "data_parallel", "broadcast_parameters", "rewrite",
    "magnitude", "summands", "gamma",
]


def cross_entropy(logits: Node, labels: Node, weight: float | None = None) -> Node:
    """Softmax cross-entropy, summed over the rows and scaled by ``weight``.

    ``weight`` defaults to ``1 / rows``, the mean over the batch. A
    composition, ``-sum(one_hot * (z - log(sum(exp(z)))))``: the log-softmax
    form, whose gradient ``p - one_hot`` never divides by a probability.
    """
    if logits.ndim != 2:
        raise InvalidValue(f"graph.cross_entropy: logits must be (rows, classes), got {logits!r}")
    rows, classes = logits.shape
    weight = 1.0 / rows if weight is None else weight
    total = sum(exp(logits), 1, keepdims=True)
    picked = sum(one_hot(labels, classes, logits.dtype) * (logits - log(total)))
    return picked * constant(-weight, logits.dtype)
