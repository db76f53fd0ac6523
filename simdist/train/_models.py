"""The example's model: a one-hidden-layer MLP, as a graph, whole or split.

``mlp`` is the model one device trains, and each rank's model under data
parallelism (on its shard of the batch). ``mlp_tensor_parallel`` splits the
same model across ranks, Megatron-style, so that no rank holds all of it:

* layer 1 by columns: rank ``r`` holds ``W1[:, r-th block]`` and its part of
  ``b1``, and computes its block of hidden units for the whole batch;
* layer 2 by rows: rank ``r`` holds ``W2[r-th block, :]``; the partial
  logits ``h_r @ W2_r`` are summed over ranks by ``reduce_scatter``, which
  leaves each rank the logits of its block of the batch's rows;
* each rank's loss is its rows' share of the batch mean (weight ``1/B``),
  so the sum of the ranks' losses, which autodiff differentiates, is the
  single-device loss; ``b2`` is replicated, and its gradient is summed over
  ranks.

The parameters are named ``W1 b1 W2 b2`` in every variant; ``shard`` and
``unshard`` convert between the whole model's values and the ranks' blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import graph as g
from .._errors import InvalidValue

__all__ = ["Model", "mlp", "mlp_tensor_parallel", "init_params", "shard", "unshard", "SHARD_AXIS"]

#: Axis along which tensor parallelism splits each parameter (None: replicated).
SHARD_AXIS = {"W1": 1, "b1": 0, "W2": 0, "b2": None}


@dataclass(frozen=True)
class Model:
    """A model's graph: inputs ``x`` and ``labels``, ``params``, ``loss``, ``logits``.

    ``step`` is its training step (``graph.Step``); ``logits`` covers the
    rows of ``x`` on one device, the rank's rows under tensor parallelism.
    """

    x: g.Node
    labels: g.Node
    params: tuple
    loss: g.Node
    logits: g.Node
    step: g.Step
    describe: str


def _params(features: int, hidden: int, classes: int, dtype) -> tuple:
    return (g.parameter("W1", (features, hidden), dtype), g.parameter("b1", (hidden,), dtype),
            g.parameter("W2", (hidden, classes), dtype), g.parameter("b2", (classes,), dtype))


def mlp(features: int, hidden: int, classes: int, rows: int, lr: float, dtype="float32") -> Model:
    """``relu(x @ W1 + b1) @ W2 + b2`` on ``rows`` rows, mean cross-entropy, SGD."""
    x = g.parameter("x", (rows, features), dtype)
    labels = g.parameter("labels", (rows,), "int64")
    W1, b1, W2, b2 = params = _params(features, hidden, classes, dtype)
    logits = g.relu(x @ W1 + b1) @ W2 + b2
    loss = g.cross_entropy(logits, labels)
    return Model(x, labels, params, loss, logits, g.sgd(loss, params, lr),
                 f"MLP {features}-{hidden}-{classes}")


def mlp_tensor_parallel(features: int, hidden: int, classes: int, rows: int, lr: float,
                        size: int, dtype="float32") -> Model:
    """The same MLP split over ``size`` ranks (see the module docstring).

    ``x`` is the whole batch on every rank; ``labels`` are the rank's block
    of ``rows // size`` rows.
    """
    if hidden % size or rows % size:
        raise InvalidValue(f"tensor parallel on {size} ranks needs hidden={hidden} and the batch "
                           f"size={rows} to be multiples of {size}")
    block, local = hidden // size, rows // size
    x = g.parameter("x", (rows, features), dtype)
    labels = g.parameter("labels", (local,), "int64")
    W1, b1, W2, b2 = params = _params(features, block, classes, dtype)
    partial = g.relu(x @ W1 + b1) @ W2
    logits = g.reduce_scatter(g.reshape(partial, (size, local, classes))) + b2
    loss = g.cross_entropy(logits, labels, weight=1.0 / rows)
    step = g.sgd(loss, params, lr)
    step = g.data_parallel(step, op="sum", params=[b2])
    return Model(x, labels, params, loss, logits, step,
                 f"MLP {features}-{hidden}-{classes}, hidden layer split {size} ways")


def init_params(features: int, hidden: int, classes: int, seed: int, dtype="float32") -> dict:
    """He-initialised weights and zero biases of the whole model, from ``seed``."""
    rng = np.random.default_rng(seed)
    return {
        "W1": (rng.standard_normal((features, hidden)) * np.sqrt(2.0 / features)).astype(dtype),
        "b1": np.zeros(hidden, dtype),
        "W2": (rng.standard_normal((hidden, classes)) * np.sqrt(2.0 / hidden)).astype(dtype),
        "b2": np.zeros(classes, dtype),
    }


def shard(full: dict, rank: int, size: int) -> dict:
    """Rank ``rank``'s blocks of the whole model's ``full`` parameters."""
    out = {}
    for name, value in full.items():
        axis = SHARD_AXIS[name]
        out[name] = value if axis is None else np.array_split(value, size, axis=axis)[rank].copy()
    return out


def unshard(shards: list[dict]) -> dict:
    """The whole model's parameters from every rank's blocks, in rank order."""
    out = {}
    for name in shards[0]:
        axis = SHARD_AXIS[name]
        out[name] = shards[0][name] if axis is None else np.concatenate([s[name] for s in shards], axis)
    return out
