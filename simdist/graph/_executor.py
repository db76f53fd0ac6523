"""Running graphs: one deterministic schedule, numpy kernels, communicator calls.

:class:`Executor` orders the nodes once, depth first from the outputs in
the order given, a node's ``after`` dependencies before its inputs: so
``identity(recv(...), after=[send(...)])`` sends before it receives, and the
backward sends of :func:`backprop` run before its backward receives (in the
other order, two ranks that exchange messages would each wait in ``recv``
for the other's send). The order depends only on the graph's structure, so
every rank that runs the same graph makes the same communication calls in
the same order. A graph whose ranks would disagree (built differently per
rank, say) makes mismatched calls, which the simulator (and MPI with
``check_calls=True``) reports as :class:`simdist.CollectiveMismatch` instead
of hanging.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .._communicator import Communicator
from .._errors import InvalidType, InvalidValue
from ._comm_ops import COMM_OPS
from ._node import Node

__all__ = ["Executor", "evaluate", "schedule"]


def schedule(outputs: Sequence[Node], after: bool = True) -> list[Node]:
    """Every node the outputs need, each after everything it needs.

    ``after=False`` follows input edges only: the nodes a value is computed
    from, without those that merely run before it.
    """
    order: list[Node] = []
    done: set[int] = set()
    for out in outputs:
        stack = [(out, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in done:
                continue
            if expanded:
                done.add(id(node))
                order.append(node)
                continue
            stack.append((node, True))
            # Pushed in reverse so that they are visited in order: ``after``
            # first (sends before the receives that may wait for a peer).
            for dep in reversed(node.after + node.inputs if after else node.inputs):
                if id(dep) not in done:
                    stack.append((dep, False))
    return order


class Executor:
    """Computes ``outputs`` from fed parameters, on one rank of a communicator.

    ``run(comm, feeds)`` takes ``feeds`` keyed by parameter node or name and
    returns the outputs' values as new numpy arrays, in order. Every rank of
    ``comm`` must run the same graph (one built once and shipped to the
    ranks, or built identically on each).
    """

    def __init__(self, outputs: Sequence[Node]):
        self.outputs = list(outputs)
        for out in self.outputs:
            if not isinstance(out, Node):
                raise InvalidType(f"graph.Executor: output {out!r} is not a graph node")
        self.order = schedule(self.outputs)
        self._slot = {id(node): i for i, node in enumerate(self.order)}
        self._inputs = [[self._slot[id(i)] for i in node.inputs] for node in self.order]
        self.parameters = [n for n in self.order if n.op == "parameter"]
        names = [p.name for p in self.parameters]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise InvalidValue(f"graph.Executor: parameter names {repeated} are used by more than one node")

    @property
    def communication(self) -> list[Node]:
        """The communication nodes, in the order every rank runs them."""
        return [n for n in self.order if n.op in COMM_OPS]

    def run(self, comm: Communicator | None, feeds: Mapping) -> list[np.ndarray]:
        values: list = [None] * len(self.order)
        given = _feeds_by_name(feeds)
        for i, node in enumerate(self.order):
            args = [values[j] for j in self._inputs[i]]
            if node.op == "parameter":
                values[i] = _fed(node, given)
            elif node.op in COMM_OPS:
                if comm is None:
                    raise InvalidValue(f"graph: {node!r} needs a communicator; pass one to run()")
                values[i] = _communicate(node, args, comm)
            else:
                values[i] = _KERNELS[node.op](node, *args)
        return [np.array(values[self._slot[id(out)]], copy=True) for out in self.outputs]


def evaluate(outputs: Sequence[Node], feeds: Mapping, comm: Communicator | None = None) -> list[np.ndarray]:
    """Compute ``outputs`` once: ``Executor(outputs).run(comm, feeds)``."""
    return Executor(outputs).run(comm, feeds)


def _feeds_by_name(feeds: Mapping) -> dict[str, object]:
    given = {}
    for key, value in feeds.items():
        name = key.name if isinstance(key, Node) else key
        if not isinstance(name, str):
            raise InvalidType(f"graph: feed key {key!r} is neither a parameter node nor a name")
        given[name] = value
    return given


def _fed(node: Node, given: dict) -> np.ndarray:
    if node.name not in given:
        raise InvalidValue(f"graph: parameter {node.name!r} {node.shape} {node.dtype} was not fed; "
                           f"pass feeds={{{node.name!r}: array}}")
    value = np.asarray(given[node.name])
    if value.shape != node.shape:
        raise InvalidValue(f"graph: parameter {node.name!r} expects shape {node.shape}, got {value.shape}")
    if value.dtype != node.dtype:
        if not np.can_cast(value.dtype, node.dtype, "safe"):
            raise InvalidType(f"graph: parameter {node.name!r} expects {node.dtype}, got {value.dtype}; "
                              f"convert it with .astype({node.dtype.name!r}) if that is intended")
        value = value.astype(node.dtype)
    return value


# --- communication ------------------------------------------------------------------

def _communicate(node: Node, args: list, comm: Communicator) -> np.ndarray:
    a = node.attrs
    op = node.op
    if op == "allreduce":
        return comm.allreduce(args[0], a["op"])
    if op == "reduce":
        out = comm.reduce(args[0], a["root"], a["op"])
        return np.zeros(node.shape, node.dtype) if out is None else out
    if op == "broadcast":
        return comm.broadcast(args[0], a["root"])
    if op == "allgather":
        if node.shape[0] != comm.size:
            raise InvalidValue(f"rank {comm.rank}: graph allgather was built for size={node.shape[0]} "
                               f"but runs on a communicator of size {comm.size}")
        return comm.allgather(args[0])
    if op == "reduce_scatter":
        return comm.reduce_scatter(args[0], a["op"])
    if op == "send":
        comm.send(args[0], a["dest"], a["tag"])
        return np.zeros((), node.dtype)
    if op == "recv":
        out = comm.recv(a["source"], a["tag"])
        if out.shape != node.shape or out.dtype != node.dtype:
            raise InvalidValue(f"rank {comm.rank}: graph recv(source={a['source']}, tag={a['tag']}) "
                               f"expects {node.shape} {node.dtype}, got {out.shape} {out.dtype}")
        return out
    raise AssertionError(op)


# --- math kernels -------------------------------------------------------------------

def _softmax(node, x):
    axis = node.attrs["axis"]
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _one_hot(node, labels):
    depth = node.attrs["depth"]
    bad = (labels < 0) | (labels >= depth)
    if np.any(bad):
        raise InvalidValue(f"graph.one_hot: label {labels[bad].flat[0]} is outside 0..{depth - 1}")
    return np.eye(depth, dtype=node.dtype)[labels]


def _typed(node, value):
    """Keep the node's dtype: numpy turns some 0-d results into scalars."""
    return np.asarray(value, dtype=node.dtype)


_KERNELS = {
    "constant": lambda node: node.attrs["value"],
    "identity": lambda node, x: x,
    "cast": lambda node, x: x.astype(node.dtype),
    "add": lambda node, a, b: _typed(node, a + b),
    "subtract": lambda node, a, b: _typed(node, a - b),
    "multiply": lambda node, a, b: _typed(node, a * b),
    "divide": lambda node, a, b: _typed(node, a / b),
    "maximum": lambda node, a, b: _typed(node, np.maximum(a, b)),
    "negative": lambda node, x: _typed(node, -x),
    "exp": lambda node, x: _typed(node, np.exp(x)),
    "log": lambda node, x: _typed(node, np.log(x)),
    "relu": lambda node, x: _typed(node, np.maximum(x, 0)),
    "relu_grad": lambda node, x, g: _typed(node, np.where(x > 0, g, 0)),
    "greater_equal": lambda node, a, b: _typed(node, a >= b),
    "softmax": _softmax,
    "one_hot": _one_hot,
    "dot": lambda node, a, b: _typed(node, np.dot(a, b)),
    "sum": lambda node, x: _typed(node, np.sum(x, axis=node.attrs["axes"], keepdims=node.attrs["keepdims"])),
    "broadcast_to": lambda node, x: np.broadcast_to(x, node.shape),
    "reshape": lambda node, x: np.reshape(x, node.shape),
    "transpose": lambda node, x: np.transpose(x, node.attrs["axes"]),
}
