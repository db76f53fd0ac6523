"""Training properties: data parallelism on the backend under test equals one device.

A small MLP's data-parallel step (``simdist.graph.data_parallel``) runs on
the communicator under test, each rank on its shard of a global batch; one
device runs the same step on the whole batch with no communication. The
gradients must agree within ``2 gamma(K) M`` (``simdist.graph._bounds``),
and every rank's parameters must stay identical to the bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simdist import graph as g

FEATURES, HIDDEN, CLASSES = 5, 6, 3


def _model(rows: int):
    x = g.parameter("x", (rows, FEATURES), "float64")
    labels = g.parameter("labels", (rows,), "int64")
    params = [g.parameter("W1", (FEATURES, HIDDEN), "float64"), g.parameter("b1", (HIDDEN,), "float64"),
              g.parameter("W2", (HIDDEN, CLASSES), "float64"), g.parameter("b2", (CLASSES,), "float64")]
    W1, b1, W2, b2 = params
    loss = g.cross_entropy(g.relu(x @ W1 + b1) @ W2 + b2, labels)
    return g.sgd(loss, params, lr=0.1)


def _train(comm, x, labels, params, steps):
    local = len(labels) // comm.size
    rows = slice(comm.rank * local, (comm.rank + 1) * local)
    step = g.data_parallel(_model(local))
    run = g.Executor(step.outputs)
    names = [p.name for p in step.params]
    history = []
    for _ in range(steps):
        out = run.run(comm, {"x": x[rows], "labels": labels[rows], **params})
        count = len(names)
        history.append(([o.copy() for o in out[1 + count:1 + 2 * count]], dict(params)))
        params = dict(zip(names, out[1:1 + count]))
    return history, params


def _inputs(data, size):
    rows = size * data.draw(st.integers(1, 4))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((rows, FEATURES))
    labels = rng.integers(0, CLASSES, rows)
    params = {"W1": rng.standard_normal((FEATURES, HIDDEN)), "b1": rng.standard_normal(HIDDEN) * 0.1,
              "W2": rng.standard_normal((HIDDEN, CLASSES)), "b2": rng.standard_normal(CLASSES) * 0.1}
    return x, labels, params


@pytest.mark.simdist_collectives("allreduce")
@pytest.mark.simdist_ops("mean")  # data_parallel averages the gradients
@given(st.data())
def test_a_data_parallel_step_equals_one_device_on_the_global_batch(world, data):
    x, labels, params = _inputs(data, world.size)
    outs = world.run(_train, x, labels, params, 2)
    one = _model(len(labels))
    bounds = [g.magnitude(grad) for grad in one.grads]
    reference = g.Executor([*one.grads, *bounds])
    for step, (synced, before) in enumerate(outs[0][0]):
        got = reference.run(None, {"x": x, "labels": labels, **before})
        count = len(synced)
        for name, mine, ref, mag, grad in zip(before, synced, got[:count], got[count:], one.grads):
            k = max(g.summands(grad), g.summands(grad) + world.size)
            tol = 2 * g.gamma(k, np.float64) * mag
            worst = np.max(np.abs(mine - ref) - tol, initial=-np.inf)
            assert worst <= 0, (f"step {step}: the gradient of {name} on {world.size} ranks differs from one "
                                f"device's by more than the bound (by {worst:.3g}); ratio of norms "
                                f"{np.linalg.norm(mine) / max(np.linalg.norm(ref), 1e-300):.3f}")


@pytest.mark.simdist_collectives("allreduce")
@pytest.mark.simdist_ops("mean")  # data_parallel averages the gradients
@given(st.data())
def test_replicas_stay_identical(world, data):
    x, labels, params = _inputs(data, world.size)
    outs = world.run(_train, x, labels, params, 3)
    final = [o[1] for o in outs]
    for rank, mine in enumerate(final[1:], start=1):
        for name in mine:
            assert mine[name].tobytes() == final[0][name].tobytes(), \
                f"after 3 steps, rank {rank}'s {name} differs from rank 0's"
