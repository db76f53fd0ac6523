"""Passes: graph rewrites that turn a single-device training step into a
distributed one.

``sgd(loss, params, lr)`` builds one device's training step: gradients by
:func:`backprop` and the update ``p - lr * g``. ``data_parallel(step)``
rewrites that step for N ranks, each on its own shard of the batch, by
injecting a mean-allreduce after each gradient, before its update.
``broadcast_parameters`` builds the nodes that make every rank start from
rank 0's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .._errors import InvalidValue
from . import _comm_ops as c
from . import _node as n
from ._autodiff import backprop
from ._node import Node

__all__ = ["Step", "sgd", "data_parallel", "broadcast_parameters", "rewrite"]


@dataclass(frozen=True)
class Step:
    """One training step: run ``outputs`` and feed ``updates`` back as ``params``.

    ``grads`` are each rank's own gradients; ``synced`` the gradients the
    update uses (the same nodes on one device, the allreduced ones after
    :func:`data_parallel`).
    """

    loss: Node
    params: tuple[Node, ...]
    grads: tuple[Node, ...]
    synced: tuple[Node, ...]
    updates: tuple[Node, ...]
    lr: float
    notes: tuple[str, ...] = field(default=())

    @property
    def outputs(self) -> list[Node]:
        """``[loss, *updates, *synced, *grads]``: everything a step reports."""
        return [self.loss, *self.updates, *self.synced, *self.grads]


def sgd(loss: Node, params: Sequence[Node], lr: float) -> Step:
    """A plain SGD step on one device: ``p <- p - lr * dloss/dp``."""
    params = tuple(params)
    grads = tuple(backprop(loss, params))
    updates = tuple(p - n.constant(lr, p.dtype) * g for p, g in zip(params, grads))
    return Step(loss, params, grads, grads, updates, float(lr))


def data_parallel(step: Step, op: str = "mean", params: Sequence[Node] | None = None) -> Step:
    """``step`` with ``allreduce(g, op)`` between each gradient and its update.

    With ``op="mean"`` (the correct choice when each rank's loss is the mean
    over its shard of an evenly split global batch) the update equals one
    device's update on the whole global batch. ``op="sum"`` is right when
    each rank's loss is already its share of the global loss (as under
    tensor parallelism); with per-shard means it is the classic bug that
    multiplies the effective learning rate by the world size.
    ``params`` limits the allreduce to those parameters (default: all).
    """
    chosen = {id(p) for p in (step.params if params is None else params)}
    synced = tuple(c.allreduce(s, op) if id(p) in chosen else s for p, s in zip(step.params, step.synced))
    updates = rewrite(step.updates, {id(old): new for old, new in zip(step.synced, synced) if old is not new})
    return Step(step.loss, step.params, step.grads, synced, tuple(updates), step.lr,
                step.notes + (f"data_parallel: allreduce({op}) on {len(chosen)} gradients",))


def broadcast_parameters(params: Sequence[Node], root: int = 0) -> list[Node]:
    """Nodes giving every rank ``root``'s value of each parameter."""
    return [c.broadcast(p, root) for p in params]


def rewrite(outputs: Sequence[Node], replace: Mapping[int, Node]) -> list[Node]:
    """``outputs`` rebuilt with each node whose ``id()`` is in ``replace`` swapped.

    Nodes that depend on nothing replaced are shared, not copied. A
    replacement must have its node's shape and dtype.
    """
    done: dict[int, Node] = {}

    def visit(node: Node) -> Node:
        key = id(node)
        if key in done:
            return done[key]
        if key in replace:
            new = replace[key]
            if (new.shape, new.dtype) != (node.shape, node.dtype):
                raise InvalidValue(f"graph.rewrite: {new!r} cannot replace {node!r}")
        else:
            inputs = tuple(visit(i) for i in node.inputs)
            after = tuple(visit(a) for a in node.after)
            if inputs == node.inputs and after == node.after:
                new = node
            else:
                new = Node(node.op, inputs, node.shape, node.dtype, node.attrs, node.name, after)
        done[key] = new
        return new

    return [visit(o) for o in outputs]
