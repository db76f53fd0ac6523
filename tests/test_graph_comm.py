"""The graph's communication ops on real simulated worlds.

Forward values are compared with the Communicator calls they stand for, to
the bit. Adjoints are checked by central finite differences of the *global*
objective, the sum over ranks of every rank's loss (``_autodiff.py``): inside
one ``World.run`` every rank evaluates its loss for the base input and for
perturbations of one element on one rank ``s`` (all ranks run the same
sequence of evaluations, so their collectives match), the losses are
allreduced, and each rank ``s`` compares the estimate with its backprop
gradient. Ranks that disagree about the graph must get CollectiveMismatch,
not a hang. The data-parallel pass is checked against one device on the
whole batch, within the rounding bound of ``_bounds.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import simdist
from simdist import graph
from simdist.graph import parameter

SIZES = (1, 2, 3, 4)
F64 = "float64"
TIMEOUT = 10


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng([23, *key])


def assert_bits(a, b, what=""):
    a, b = np.asarray(a), np.asarray(b)
    assert (a.dtype, a.shape) == (b.dtype, b.shape), what
    assert a.tobytes() == b.tobytes(), (what, a, b)


# --- forward values ---------------------------------------------------------------------

def _rank_forward(comm):
    n, r = comm.size, comm.rank
    x = parameter("x", (n, 3), F64)
    i = parameter("i", (4,), "int32")
    nodes = [
        graph.allreduce(x), graph.allreduce(x, "mean"), graph.allreduce(x, "max"),
        graph.allreduce(i, "bor"),
        graph.reduce(x, root=n - 1), graph.reduce(x, root=0, op="min"),
        graph.broadcast(x, root=n - 1), graph.allgather(x, n), graph.reduce_scatter(x),
        graph.reduce_scatter(x, "mean"),
    ]
    xv = rng_for(1, r).standard_normal((n, 3))
    iv = rng_for(2, r).integers(0, 64, 4).astype(np.int32)
    got = graph.evaluate(nodes, {"x": xv, "i": iv}, comm)

    def or_zeros(value):
        return np.zeros((n, 3)) if value is None else value

    want = [
        comm.allreduce(xv), comm.allreduce(xv, "mean"), comm.allreduce(xv, "max"),
        comm.allreduce(iv, "bor"),
        or_zeros(comm.reduce(xv, n - 1)), or_zeros(comm.reduce(xv, 0, "min")),
        comm.broadcast(xv, n - 1), comm.allgather(xv), comm.reduce_scatter(xv),
        comm.reduce_scatter(xv, "mean"),
    ]
    return [repr(node) for node in nodes], got, want


@pytest.mark.parametrize("n", SIZES)
def test_forward_values_equal_the_communicator_calls_to_the_bit(n):
    with simdist.World(n, timeout=TIMEOUT) as w:
        results = w.run(_rank_forward)
    for rank, (names, got, want) in enumerate(results):
        for name, g, v in zip(names, got, want):
            assert_bits(g, v, f"rank {rank}: {name}")
    # reduce gives zeros (not None) off the root, in the node's shape
    for rank, (_, got, _) in enumerate(results):
        if rank != n - 1:
            assert_bits(got[4], np.zeros((n, 3)))


def _rank_ring(comm):
    n, r = comm.size, comm.rank
    x = parameter("x", (2,), F64)
    token = graph.send(x, (r + 1) % n, tag=3)
    received = graph.identity(graph.recv((r - 1) % n, (2,), F64, tag=3), after=[token])
    return graph.evaluate([received, token], {"x": np.full(2, float(r))}, comm)


@pytest.mark.parametrize("n", (2, 3))
def test_send_and_recv_pass_a_message_round_a_ring_and_send_returns_a_zero_token(n):
    with simdist.World(n, timeout=TIMEOUT) as w:
        results = w.run(_rank_ring)
    for r, (received, token) in enumerate(results):
        assert_bits(received, np.full(2, float((r - 1) % n)))
        assert_bits(token, np.zeros((), np.float64))


# --- adjoints by finite differences of the global objective ------------------------------

def global_gradient_check(comm, build, x_shape, seed, h=1e-5):
    """This rank's backprop gradient and the central differences of the global loss.

    Returns ``(grad, fd)`` where ``fd[s]`` estimates the gradient with respect
    to rank ``s``'s ``x`` (the same on every rank, as it is allreduced).
    """
    n, r = comm.size, comm.rank
    x = parameter("x", x_shape, F64)
    y = build(x, n)
    w = parameter("w", y.shape, F64)
    loss = graph.sum((y * y + y) * w) + graph.sum(graph.exp(x * 0.5))     # nonlinear; dloss/dy != 0 at y = 0
    (grad,) = graph.backprop(loss, [x])
    xv = rng_for(seed, r).standard_normal(x_shape)
    wv = rng_for(seed, 100 + r).standard_normal(y.shape)
    (g,) = graph.Executor([grad]).run(comm, {"x": xv, "w": wv})
    loss_ex = graph.Executor([loss])
    fd = np.zeros((n, *x_shape))
    for s in range(n):
        for j in np.ndindex(*x_shape):
            totals = []
            for step in (h, -h):
                xp = xv.copy()
                if r == s:
                    xp[j] += step
                (value,) = loss_ex.run(comm, {"x": xp, "w": wv})
                totals.append(comm.allreduce(value))
            fd[(s, *j)] = (totals[0] - totals[1]) / (2 * h)
    return g, fd


# (id, shape of x for world size n, builder)
ADJOINTS = [
    ("allreduce-sum", lambda n: (2, 3), lambda x, n: graph.allreduce(x)),
    ("allreduce-mean", lambda n: (2, 3), lambda x, n: graph.allreduce(x, "mean")),
    ("allgather", lambda n: (3,), lambda x, n: graph.allgather(x, n)),
    ("reduce_scatter-sum", lambda n: (n, 2), lambda x, n: graph.reduce_scatter(x)),
    ("broadcast-root0", lambda n: (2, 2), lambda x, n: graph.broadcast(x, 0)),
    ("broadcast-last-root", lambda n: (2, 2), lambda x, n: graph.broadcast(x, n - 1)),
    ("reduce-sum-last-root", lambda n: (2, 2), lambda x, n: graph.reduce(x, n - 1)),
    ("reduce-sum-root0", lambda n: (3,), lambda x, n: graph.reduce(x, 0, "sum")),
    ("composition", lambda n: (n, 2),
     lambda x, n: graph.broadcast(graph.allreduce(x, "mean") * x, n - 1)
     + graph.reduce_scatter(graph.allgather(graph.exp(x), n) * 0.5)),
]


@pytest.mark.slow
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("shape_for, build", [c[1:] for c in ADJOINTS], ids=[c[0] for c in ADJOINTS])
def test_adjoint_matches_finite_differences_of_the_global_loss(request, shape_for, build, n):
    seed = sum(map(ord, request.node.callspec.id))
    with simdist.World(n, timeout=TIMEOUT) as w:
        results = w.run(global_gradient_check, build, shape_for(n), seed)
    fds = [fd for _, fd in results]
    for fd in fds[1:]:
        assert_bits(fd, fds[0])
    scale = max(1.0, float(np.max(np.abs(fds[0]))))
    for r, (g, fd) in enumerate(results):
        np.testing.assert_allclose(g, fd[r], rtol=1e-6, atol=1e-6 * scale, err_msg=f"rank {r} of {n}")


def _rank_broadcast_gradient(comm):
    x = parameter("x", (3,), F64)
    (g,) = graph.backprop(graph.sum(graph.broadcast(x, 1)), [x])
    return graph.evaluate([g], {"x": np.zeros(3)}, comm)[0]


def test_broadcast_gradient_reaches_only_the_root_and_sums_every_rank():
    with simdist.World(3, timeout=TIMEOUT) as w:
        grads = w.run(_rank_broadcast_gradient)
    assert [g.tolist() for g in grads] == [[0.0] * 3, [3.0] * 3, [0.0] * 3]


def _rank_send_recv(comm, seed, h=1e-5):
    r = comm.rank
    x = parameter("x", (3,), F64)
    v = parameter("v", (3,), F64)
    xv = rng_for(seed, 0).standard_normal(3)
    vv = rng_for(seed, 1).standard_normal(3)
    if r == 0:
        loss = graph.send(x, dest=1, tag=5)                        # the token only
        wrt = [x]
    elif r == 1:
        received = graph.recv(0, (3,), F64, tag=5)
        loss = graph.sum(graph.exp(received) * v)
        wrt = [v]
    else:
        loss = graph.sum(x * 0.0)
        wrt = [x]
    grads = graph.backprop(loss, wrt)
    feeds = {"x": xv, "v": vv}
    (g,) = graph.evaluate(grads, feeds, comm)
    ex = graph.Executor([loss])
    fd = np.zeros(3)
    for j in range(3):
        totals = []
        for step in (h, -h):
            xp = xv.copy()
            if r == 0:
                xp[j] += step
            (value,) = ex.run(comm, {"x": xp, "v": vv})
            totals.append(comm.allreduce(value))
        fd[j] = (totals[0] - totals[1]) / (2 * h)
    return g, fd, np.exp(xv) * vv


@pytest.mark.parametrize("n", (2, 3))
def test_send_gradient_is_the_receivers_loss_gradient(n):
    with simdist.World(n, timeout=TIMEOUT) as w:
        results = w.run(_rank_send_recv, 41)
    g0, fd, analytic = results[0]
    np.testing.assert_allclose(g0, analytic, rtol=1e-14)
    np.testing.assert_allclose(g0, fd, rtol=1e-6)
    g1, _, _ = results[1]
    np.testing.assert_allclose(g1, np.exp(rng_for(41, 0).standard_normal(3)), rtol=1e-14)


def _rank_token_in_after(comm, receiver_reads):
    x = parameter("x", (3,), F64)
    if comm.rank == 0:     # the token orders the loss instead of entering it
        loss = graph.identity(graph.sum(x * 2.0), after=[graph.send(x, 1)])
    else:
        received = graph.recv(0, (3,), F64)
        loss = graph.sum(received * x) if receiver_reads else \
            graph.identity(graph.sum(x * x), after=[received])
    (g,) = graph.backprop(loss, [x])
    feeds = {"x": np.full(3, float(comm.rank + 1))}
    first = graph.evaluate([g], feeds, comm)[0]
    second = graph.evaluate([g], feeds, comm)[0]       # no stale message left behind
    return first, second


@pytest.mark.parametrize("receiver_reads", [True, False], ids=["receiver-reads", "receiver-ignores"])
def test_send_whose_token_is_only_an_after_dependency_still_gets_its_gradient(receiver_reads):
    with simdist.World(2, timeout=TIMEOUT) as w:
        (g0, again0), (g1, again1) = w.run(_rank_token_in_after, receiver_reads)
    # rank 0: 2 from its own loss, plus d(loss_1)/dx_0 = x_1 = 2 if rank 1 reads it
    assert g0.tolist() == ([4.0] * 3 if receiver_reads else [2.0] * 3)
    assert g1.tolist() == ([1.0] * 3 if receiver_reads else [4.0] * 3)
    assert_bits(again0, g0)
    assert_bits(again1, g1)


def _rank_exchange(comm):
    peer = 1 - comm.rank
    x = parameter("x", (3,), F64)
    loss = graph.send(x, peer) + graph.sum(graph.exp(graph.recv(peer, (3,), F64)) * float(comm.rank + 1))
    (g,) = graph.backprop(loss, [x])
    return graph.evaluate([g], {"x": np.full(3, float(comm.rank))}, comm)[0]


def test_two_ranks_exchanging_messages_get_gradients_without_deadlock():
    with simdist.World(2, timeout=TIMEOUT) as w:
        g0, g1 = w.run(_rank_exchange)
    np.testing.assert_allclose(g0, np.full(3, 2 * np.exp(0.0)))   # rank 1's loss weighs x_0 by 2
    np.testing.assert_allclose(g1, np.full(3, np.exp(1.0)))


def _rank_backprop_max(comm):
    x = parameter("x", (2,), F64)
    graph.backprop(graph.sum(graph.allreduce(x, "max")), [x])


def test_backprop_of_allreduce_max_raises_naming_the_node():
    with simdist.World(2, timeout=TIMEOUT) as w:
        with pytest.raises(simdist.RankError) as info:
            w.run(_rank_backprop_max)
    for exc in info.value.exceptions.values():
        assert isinstance(exc, simdist.InvalidValue)
        assert "<allreduce (2,) float64> with op='max' has no gradient" in str(exc)


# --- ranks that disagree ----------------------------------------------------------------

def _rank_different_collectives(comm):
    x = parameter("x", (3,), F64)
    y = graph.allreduce(x) if comm.rank == 0 else graph.allgather(x, comm.size)
    return graph.evaluate([y], {"x": np.ones(3)}, comm)


def _rank_different_shapes(comm):
    shape = (3,) if comm.rank == 0 else (4,)
    x = parameter("x", shape, F64)
    return graph.evaluate([graph.allreduce(x)], {"x": np.ones(shape)}, comm)


def _rank_different_ops(comm):
    x = parameter("x", (3,), F64)
    (g,) = graph.backprop(graph.sum(graph.allreduce(x, "mean" if comm.rank else "sum")), [x])
    return graph.evaluate([g], {"x": np.ones(3)}, comm)


@pytest.mark.parametrize("fn", [_rank_different_collectives, _rank_different_shapes, _rank_different_ops],
                         ids=["collective", "shape", "op"])
def test_ranks_whose_graphs_disagree_raise_collective_mismatch(fn):
    with simdist.World(2, timeout=TIMEOUT) as w:
        with pytest.raises(simdist.CollectiveMismatch):
            w.run(fn)
        assert w.run(lambda comm: comm.rank) == [0, 1]            # the world is usable again


def _rank_allgather_size(comm):
    x = parameter("x", (2,), F64)
    return graph.evaluate([graph.allgather(x, 4)], {"x": np.ones(2)}, comm)


def test_allgather_built_for_another_size_names_both_sizes():
    with simdist.World(2, timeout=TIMEOUT) as w:
        with pytest.raises(simdist.RankError) as info:
            w.run(_rank_allgather_size)
    assert sorted(info.value.exceptions) == [0, 1]
    for rank, exc in info.value.exceptions.items():
        assert isinstance(exc, simdist.InvalidValue)
        assert f"rank {rank}" in str(exc) and "size=4" in str(exc) and "size 2" in str(exc)


def _rank_recv_shape(comm):
    if comm.rank == 0:
        x = parameter("x", (3,), F64)
        return graph.evaluate([graph.send(x, 1)], {"x": np.ones(3)}, comm)
    return graph.evaluate([graph.recv(0, (4,), F64)], {}, comm)


def _rank_recv_dtype(comm):
    if comm.rank == 0:
        x = parameter("x", (3,), "float32")
        return graph.evaluate([graph.send(x, 1)], {"x": np.ones(3, np.float32)}, comm)
    return graph.evaluate([graph.recv(0, (3,), F64)], {}, comm)


@pytest.mark.parametrize("fn, fragments", [
    (_rank_recv_shape, ["expects (4,) float64, got (3,) float64"]),
    (_rank_recv_dtype, ["expects (3,) float64, got (3,) float32"]),
], ids=["shape", "dtype"])
def test_recv_of_an_unexpected_message_names_expected_and_received(fn, fragments):
    with simdist.World(2, timeout=TIMEOUT) as w:
        with pytest.raises(simdist.RankError) as info:
            w.run(fn)
    exc = info.value.exceptions[1]
    assert isinstance(exc, simdist.InvalidValue)
    for fragment in ["rank 1", "recv(source=0, tag=0)", *fragments]:
        assert fragment in str(exc)


# --- passes on worlds ----------------------------------------------------------------

ROWS = 12          # the global batch, split evenly over 1, 2, 3 or 4 ranks


def _model(rows, dtype):
    x = parameter("x", (rows, 5), dtype)
    labels = parameter("labels", (rows,), "int64")
    w1 = parameter("w1", (5, 4), dtype)
    b1 = parameter("b1", (4,), dtype)
    w2 = parameter("w2", (4, 3), dtype)
    hidden = graph.relu(x @ w1 + b1)
    return graph.cross_entropy(hidden @ w2, labels), (w1, b1, w2)


def _batch(dtype):
    rng = rng_for(77)
    return {
        "x": rng.standard_normal((ROWS, 5)).astype(dtype),
        "labels": rng.integers(0, 3, ROWS),
        "w1": rng.standard_normal((5, 4)).astype(dtype),
        "b1": rng.standard_normal(4).astype(dtype),
        "w2": rng.standard_normal((4, 3)).astype(dtype),
    }


def _shard(feeds, rank, size):
    rows = ROWS // size
    out = dict(feeds)
    out["x"] = feeds["x"][rank * rows:(rank + 1) * rows]
    out["labels"] = feeds["labels"][rank * rows:(rank + 1) * rows]
    return out


def _rank_steps(comm, outputs, feeds, runs=2):
    ex = graph.Executor(outputs)
    mine = _shard(feeds, comm.rank, comm.size)
    return [ex.run(comm, mine) for _ in range(runs)]


@pytest.mark.parametrize("n", SIZES)
def test_data_parallel_gradient_equals_one_device_on_the_whole_batch_within_the_bound(n):
    dtype = np.float32
    feeds = _batch(dtype)
    loss, params = _model(ROWS, dtype)
    single = graph.sgd(loss, params, lr=0.1)
    bounds = [graph.magnitude(g) for g in single.grads]
    out = graph.evaluate([*single.grads, *bounds], feeds)
    g_single, m_single = out[:3], out[3:]

    shard_loss, shard_params = _model(ROWS // n, dtype)
    step = graph.sgd(shard_loss, shard_params, lr=0.1)
    mean, total = graph.data_parallel(step), graph.data_parallel(step, op="sum")
    with simdist.World(n, timeout=TIMEOUT) as w:
        results = w.run(_rank_steps, [*mean.synced, *total.synced, *mean.updates], feeds)

    for k, (g, m) in enumerate(zip(g_single, m_single)):
        summands = max(graph.summands(single.grads[k]), graph.summands(mean.synced[k], size=n))
        bound = 2 * graph.gamma(summands, dtype) * m
        synced_mean = results[0][0][k]
        synced_sum = results[0][0][3 + k]
        assert np.all(np.abs(synced_mean - g) <= bound), (k, np.max(np.abs(synced_mean - g) - bound))
        assert np.all(np.abs(synced_sum - n * g) <= n * bound)
        if n > 1:   # the classic bug: n times the gradient, caught by the bound
            assert not np.all(np.abs(synced_sum - g) <= bound)
        else:
            assert_bits(synced_sum, synced_mean)

    first = results[0][0]
    for rank_runs in results:
        for run in rank_runs:             # identical to the bit across ranks and runs
            for a, b in zip(run, first):
                assert_bits(a, b)


def _rank_training(comm, step, feeds, steps):
    ex = graph.Executor(step.outputs)
    mine = _shard(feeds, comm.rank, comm.size)
    history = []
    for _ in range(steps):
        out = ex.run(comm, mine)
        updates = out[1:1 + len(step.params)]
        for p, u in zip(step.params, updates):
            mine[p.name] = u
        history.append((float(out[0]), [u.tobytes() for u in updates]))
    return history


def test_data_parallel_training_keeps_parameters_identical_on_every_rank():
    feeds = _batch(np.float64)
    loss, params = _model(ROWS // 3, np.float64)
    step = graph.data_parallel(graph.sgd(loss, params, lr=0.5))
    with simdist.World(3, timeout=TIMEOUT) as w:
        histories = w.run(_rank_training, step, feeds, 4)
    for history in histories[1:]:
        assert [u for _, u in history] == [u for _, u in histories[0]]
    global_losses = [sum(h[i][0] for h in histories) / 3 for i in range(4)]
    assert global_losses[-1] < global_losses[0]


def _rank_broadcast_parameters(comm, root):
    params = [parameter("w", (2, 3), F64), parameter("b", (3,), "float32")]
    synced = graph.broadcast_parameters(params, root)
    feeds = {"w": np.full((2, 3), float(comm.rank)), "b": np.arange(3, dtype=np.float32) + comm.rank}
    return graph.evaluate(synced, feeds, comm)


@pytest.mark.parametrize("n, root", [(1, 0), (3, 0), (4, 2)])
def test_broadcast_parameters_makes_every_rank_start_from_roots_values(n, root):
    with simdist.World(n, timeout=TIMEOUT) as w:
        results = w.run(_rank_broadcast_parameters, root)
    for w_value, b_value in results:
        assert_bits(w_value, np.full((2, 3), float(root)))
        assert_bits(b_value, np.arange(3, dtype=np.float32) + root)


# --- bounds of communication ops -----------------------------------------------------

def _rank_magnitudes(comm):
    n, r = comm.size, comm.rank
    x = parameter("x", (n, 2), F64)
    nodes = [graph.allreduce(x), graph.allreduce(x, "mean"), graph.reduce(x, 1), graph.broadcast(x, 1),
             graph.allgather(x, n), graph.reduce_scatter(x)]
    xv = rng_for(9, r).standard_normal((n, 2))
    a = np.abs(xv)
    got = graph.evaluate([graph.magnitude(node, size=n) for node in nodes], {"x": xv}, comm)
    reduced = comm.reduce(a, 1)
    want = [comm.allreduce(a), comm.allreduce(a) / n, np.zeros_like(a) if reduced is None else reduced,
            comm.broadcast(a, 1), comm.allgather(a), comm.reduce_scatter(a)]
    return got, want


def test_magnitude_of_a_reduction_reduces_the_magnitudes():
    with simdist.World(3, timeout=TIMEOUT) as w:
        results = w.run(_rank_magnitudes)
    for got, want in results:
        for g, v in zip(got, want):
            assert_bits(g, v)
