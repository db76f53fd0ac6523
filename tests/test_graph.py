"""The training-graph IR on one device: construction, inference, execution,
gradients, passes and error bounds.

Communication ops on real simulated worlds are in ``test_graph_comm.py``.
Gradients are checked against central finite differences in float64 of a
scalar loss ``sum(op(...) * w)`` with fixed random weights ``w``, so that
every element of the gradient is exercised.
"""

from __future__ import annotations

import numpy as np
import pytest

import simdist
from simdist import graph
from simdist.graph import constant, parameter

F64 = "float64"


def rng_for(*key) -> np.random.Generator:
    return np.random.default_rng([7, *key])


# --- construction errors: a table of bad calls ----------------------------------------

def _p(name, shape, dtype="float32"):
    return parameter(name, shape, dtype)


# (id, call, error class, fragments the message must contain)
BAD_CALLS = [
    ("dot-inner-dims", lambda: graph.dot(_p("a", (64, 32)), _p("b", (16, 10))),
     simdist.InvalidValue, ["graph.dot", "(64, 32)", "(16, 10)", "32 != 16"]),
    ("dot-3d", lambda: graph.dot(_p("a", (2, 2, 2)), _p("b", (2,))),
     simdist.InvalidValue, ["graph.dot", "1-d or 2-d", "(2, 2, 2)", "(2,)"]),
    ("dot-0d", lambda: graph.dot(_p("a", ()), _p("b", (2,))),
     simdist.InvalidValue, ["graph.dot", "1-d or 2-d", "()", "(2,)"]),
    ("dot-dtypes", lambda: graph.dot(_p("a", (2, 3)), _p("b", (3, 4), F64)),
     simdist.InvalidType, ["graph.dot", "'a'", "float32", "'b'", "float64", "graph.cast"]),
    ("add-dtypes", lambda: _p("a", (3,)) + _p("b", (3,), "int32"),
     simdist.InvalidType, ["graph.add", "'a'", "float32", "'b'", "int32"]),
    ("add-shapes", lambda: graph.add(_p("a", (2, 3)), _p("b", (4,))),
     simdist.InvalidValue, ["graph.add", "do not broadcast", "(2, 3)", "(4,)"]),
    ("multiply-shapes", lambda: _p("a", (5, 1, 3)) * _p("b", (2, 4)),
     simdist.InvalidValue, ["graph.multiply", "(5, 1, 3)", "(2, 4)"]),
    ("maximum-dtypes", lambda: graph.maximum(_p("a", (3,), "int64"), _p("b", (3,))),
     simdist.InvalidType, ["graph.maximum", "int64", "float32"]),
    ("add-two-numbers", lambda: graph.add(1, 2),
     simdist.InvalidType, ["graph.add", "needs at least one graph node", "1", "2"]),
    ("add-float-to-int-node", lambda: _p("i", (3,), "int32") + 0.5,
     simdist.InvalidType, ["graph.add", "0.5", "int32"]),
    ("add-int-out-of-range", lambda: _p("u", (3,), "uint8") + 300,
     simdist.InvalidValue, ["graph.add", "300", "uint8"]),
    ("add-string", lambda: _p("a", (3,)) + "x",
     simdist.InvalidType, ["graph.add", "'x'"]),
    ("exp-array", lambda: graph.exp(np.ones(3)),
     simdist.InvalidType, ["graph.exp", "not a graph node", "graph.constant"]),
    ("relu-list", lambda: graph.relu([1.0]),
     simdist.InvalidType, ["graph.relu", "[1.0]", "not a graph node"]),
    ("exp-int", lambda: graph.exp(_p("i", (3,), "int32")),
     simdist.InvalidType, ["graph.exp", "floating-point", "'i'"]),
    ("log-int", lambda: graph.log(_p("i", (3,), "int64")),
     simdist.InvalidType, ["graph.log", "floating-point", "int64"]),
    ("softmax-int", lambda: graph.softmax(_p("i", (3,), "int32")),
     simdist.InvalidType, ["graph.softmax", "floating-point"]),
    ("softmax-axis-range", lambda: graph.softmax(_p("a", (2, 3)), axis=2),
     simdist.InvalidValue, ["graph.softmax", "axis 2", "2 dimensions"]),
    ("softmax-axis-tuple", lambda: graph.softmax(_p("a", (2, 3)), axis=(0, 1)),
     simdist.InvalidType, ["graph.softmax", "axis=(0, 1)", "one int"]),
    ("softmax-0d", lambda: graph.softmax(_p("a", ())),
     simdist.InvalidValue, ["graph.softmax", "0 dimensions"]),
    ("sum-axis-range", lambda: graph.sum(_p("a", (2, 3)), 2),
     simdist.InvalidValue, ["graph.sum", "axis 2", "2 dimensions"]),
    ("sum-axis-negative-range", lambda: graph.sum(_p("a", (2, 3)), -3),
     simdist.InvalidValue, ["graph.sum", "axis -3"]),
    ("sum-axis-repeated", lambda: graph.sum(_p("a", (2, 3)), (1, -1)),
     simdist.InvalidValue, ["graph.sum", "axes=(1, -1)", "repeat"]),
    ("sum-axis-float", lambda: graph.sum(_p("a", (2, 3)), 1.5),
     simdist.InvalidType, ["graph.sum", "axes=1.5"]),
    ("sum-axis-str", lambda: graph.sum(_p("a", (2, 3)), ("a",)),
     simdist.InvalidType, ["graph.sum", "'a'", "not an int"]),
    ("sum-0d-axis", lambda: graph.sum(_p("a", ()), 0),
     simdist.InvalidValue, ["graph.sum", "axis 0", "0 dimensions"]),
    ("reshape-size", lambda: graph.reshape(_p("a", (2, 3)), (4, 2)),
     simdist.InvalidValue, ["graph.reshape", "(2, 3)", "(4, 2)"]),
    ("reshape-two-unknowns", lambda: graph.reshape(_p("a", (2, 3)), (-1, -1)),
     simdist.InvalidValue, ["graph.reshape", "(-1, -1)"]),
    ("reshape-negative", lambda: graph.reshape(_p("a", (2, 3)), (-2, -3)),
     simdist.InvalidValue, ["graph.reshape", "(-2, -3)"]),
    ("reshape-empty-unknown", lambda: graph.reshape(_p("a", (0, 3)), (-1, 0)),
     simdist.InvalidValue, ["graph.reshape", "(0, 3)", "(-1, 0)"]),
    ("reshape-float", lambda: graph.reshape(_p("a", (2, 3)), (2.0, 3)),
     simdist.InvalidType, ["graph.reshape", "(2.0, 3)", "ints"]),
    ("broadcast_to-incompatible", lambda: graph.broadcast_to(_p("a", (2, 3)), (2, 4)),
     simdist.InvalidValue, ["graph.broadcast_to", "(2, 3)", "(2, 4)"]),
    ("broadcast_to-fewer-dims", lambda: graph.broadcast_to(_p("a", (2, 3)), (3,)),
     simdist.InvalidValue, ["graph.broadcast_to", "(2, 3)", "(3,)"]),
    ("broadcast_to-shrink", lambda: graph.broadcast_to(_p("a", (2, 3)), (1, 3)),
     simdist.InvalidValue, ["graph.broadcast_to", "(2, 3)", "(1, 3)"]),
    ("transpose-not-permutation", lambda: graph.transpose(_p("a", (2, 3)), (0, 0)),
     simdist.InvalidValue, ["graph.transpose", "axes=(0, 0)", "permutation", "(2, 3)"]),
    ("transpose-wrong-length", lambda: graph.transpose(_p("a", (2, 3, 4)), (1, 0)),
     simdist.InvalidValue, ["graph.transpose", "axes=(1, 0)", "3 axes"]),
    ("one_hot-float-labels", lambda: graph.one_hot(_p("l", (4,)), 3),
     simdist.InvalidType, ["graph.one_hot", "integers", "'l'", "float32"]),
    ("one_hot-depth", lambda: graph.one_hot(_p("l", (4,), "int64"), 0),
     simdist.InvalidValue, ["graph.one_hot", "depth=0"]),
    ("one_hot-array", lambda: graph.one_hot(np.arange(3), 3),
     simdist.InvalidType, ["graph.one_hot", "labels=", "not a graph node"]),
    ("parameter-empty-name", lambda: parameter("", (2,)),
     simdist.InvalidValue, ["graph.parameter", "name=''"]),
    ("parameter-name-type", lambda: parameter(3, (2,)),
     simdist.InvalidValue, ["graph.parameter", "name=3"]),
    ("parameter-negative-dim", lambda: parameter("p", (2, -1)),
     simdist.InvalidValue, ["graph.parameter", "'p'", "(2, -1)", "non-negative"]),
    ("parameter-float-dim", lambda: parameter("p", (2.0,)),
     simdist.InvalidValue, ["graph.parameter", "(2.0,)"]),
    ("allreduce-op", lambda: graph.allreduce(_p("a", (2,)), "avg"),
     simdist.InvalidValue, ["graph.allreduce", "op='avg'", "sum"]),
    ("reduce-root", lambda: graph.reduce(_p("a", (2,)), root=-1),
     simdist.InvalidValue, ["graph.reduce", "root=-1"]),
    ("broadcast-root-bool", lambda: graph.broadcast(_p("a", (2,)), root=True),
     simdist.InvalidValue, ["graph.broadcast", "root=True"]),
    ("allgather-size", lambda: graph.allgather(_p("a", (2,)), 0),
     simdist.InvalidValue, ["graph.allgather", "size=0"]),
    ("reduce_scatter-0d", lambda: graph.reduce_scatter(_p("a", ())),
     simdist.InvalidValue, ["graph.reduce_scatter", "(size, ...)", "'a'"]),
    ("send-dest", lambda: graph.send(_p("a", (2,)), dest=-1),
     simdist.InvalidValue, ["graph.send", "dest=-1"]),
    ("send-tag", lambda: graph.send(_p("a", (2,)), 1, tag=1.5),
     simdist.InvalidValue, ["graph.send", "tag=1.5"]),
    ("recv-source", lambda: graph.recv(-2, (2,)),
     simdist.InvalidValue, ["graph.recv", "source=-2"]),
    ("recv-shape", lambda: graph.recv(0, (-1,)),
     simdist.InvalidValue, ["graph.recv", "shape=(-1,)"]),
    ("sum-non-node", lambda: graph.sum(np.ones(3)),
     simdist.InvalidType, ["graph.sum", "not a graph node"]),
    ("allreduce-non-node", lambda: graph.allreduce(3.0),
     simdist.InvalidType, ["graph.allreduce", "x=3.0", "not a graph node"]),
    ("executor-non-node", lambda: graph.Executor([np.ones(2)]),
     simdist.InvalidType, ["graph.Executor", "not a graph node"]),
    ("backprop-non-node-loss", lambda: graph.backprop(1.0, []),
     simdist.InvalidType, ["graph.backprop", "loss=1.0"]),
    ("backprop-integer-loss", lambda: graph.backprop(graph.sum(_p("i", (2,), "int32")), []),
     simdist.InvalidType, ["graph.backprop", "floating-point", "int32"]),
    ("backprop-integer-wrt", lambda: graph.backprop(graph.sum(_p("a", (2,))), [_p("i", (2,), "int32")]),
     simdist.InvalidType, ["graph.backprop", "'i'", "floating-point"]),
    ("backprop-allreduce-max", lambda: graph.backprop(graph.sum(graph.allreduce(_p("a", (2,)), "max")),
                                                      [_p("a", (2,))]),
     simdist.InvalidValue, ["graph.backprop", "<allreduce (2,) float32>", "op='max'", "no gradient"]),
    ("backprop-reduce-min", lambda: graph.backprop(graph.sum(graph.reduce(_p("a", (2,)), 0, "min")), []),
     simdist.InvalidValue, ["graph.backprop", "<reduce (2,) float32>", "op='min'"]),
    ("backprop-reduce_scatter-prod",
     lambda: graph.backprop(graph.sum(graph.reduce_scatter(_p("a", (2, 3)), "prod")), []),
     simdist.InvalidValue, ["graph.backprop", "<reduce_scatter (3,) float32>", "op='prod'"]),
    ("backprop-send-tag-too-large",
     lambda: graph.backprop(graph.send(_p("a", (2,)), 1, tag=graph.BACKWARD_TAG), [_p("a", (2,))]),
     simdist.InvalidValue, ["graph.backprop", "<send () float32>", f"tag={graph.BACKWARD_TAG}",
                            "BACKWARD_TAG"]),
    ("rewrite-shape-change", lambda: (lambda a: graph.rewrite([a * 2.0], {id(a): _p("b", (3,))}))(_p("a", (2,))),
     simdist.InvalidValue, ["graph.rewrite", "(3,)", "(2,)"]),
    ("rewrite-dtype-change", lambda: (lambda a: graph.rewrite([a * 2.0], {id(a): _p("b", (2,), F64)}))(
        _p("a", (2,))),
     simdist.InvalidValue, ["graph.rewrite", "float64", "float32"]),
]


@pytest.mark.parametrize("call, error, fragments", [c[1:] for c in BAD_CALLS],
                         ids=[c[0] for c in BAD_CALLS])
def test_bad_call_raises_a_message_naming_its_arguments(call, error, fragments):
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    missing = [f for f in fragments if f not in message]
    assert not missing, f"{missing} not in {message!r}"


def test_dot_error_names_both_operand_shapes():
    with pytest.raises(simdist.InvalidValue, match=r"\(64, 32\).*\(16, 10\)"):
        graph.dot(parameter("a", (64, 32)), parameter("b", (16, 10)))


def test_dtype_mismatch_error_names_both_operands():
    a, b = parameter("a", (3,), "float32"), parameter("b", (3,), F64)
    with pytest.raises(simdist.InvalidType, match=r"'a'.*float32.*'b'.*float64"):
        graph.subtract(a, b)


def test_construction_errors_are_builtin_type_and_value_errors():
    with pytest.raises(TypeError):
        graph.exp(1.0)
    with pytest.raises(ValueError):
        graph.reshape(parameter("a", (2, 3)), (5,))


def test_reshape_infers_large_shapes_without_allocating():
    big = parameter("big", (10**6, 10**6, 10**3))
    assert graph.reshape(big, (-1, 10**3)).shape == (10**12, 10**3)


# --- shape and dtype inference against numpy ------------------------------------------

def _inputs(shapes_dtypes, key):
    rng = rng_for(*key)
    out = []
    for shape, dtype in shapes_dtypes:
        dt = np.dtype(dtype)
        if dt.kind in "iu":
            out.append(rng.integers(0, 3, size=shape).astype(dt))
        else:
            out.append((rng.random(size=shape) + 0.5).astype(dt))
    return out


# (id, [(shape, dtype) of the parameters], graph builder, numpy reference)
INFERENCE = [
    ("add", [((2, 3), "float32"), ((2, 3), "float32")], lambda a, b: a + b, lambda a, b: a + b),
    ("add-row", [((2, 3), F64), ((3,), F64)], graph.add, np.add),
    ("add-outer", [((2, 1), F64), ((1, 3), F64)], graph.add, np.add),
    ("add-0d-left", [((), "float32"), ((2, 3), "float32")], graph.add, np.add),
    ("add-0d-both", [((), F64), ((), F64)], graph.add, np.add),
    ("add-3d", [((4, 1, 3), F64), ((2, 1), F64)], graph.add, np.add),
    ("add-empty", [((0, 3), F64), ((3,), F64)], graph.add, np.add),
    ("add-int", [((2, 3), "int32"), ((2, 3), "int32")], graph.add, np.add),
    ("add-number", [((2, 3), "float32")], lambda a: a + 1.5, lambda a: a + 1.5),
    ("rsub-number", [((3,), "float32")], lambda a: 2.0 - a, lambda a: 2.0 - a),
    ("rdiv-number", [((3,), "float16")], lambda a: 1.0 / a, lambda a: 1.0 / a),
    ("add-int-number", [((3,), "int16")], lambda a: a + 2, lambda a: a + 2),
    ("subtract", [((2, 3), "float32"), ((1, 3), "float32")], graph.subtract, np.subtract),
    ("multiply", [((2, 3), F64), ((2, 1), F64)], graph.multiply, np.multiply),
    ("divide", [((3,), "float32"), ((2, 3), "float32")], graph.divide, np.divide),
    ("maximum", [((2, 3), F64), ((), F64)], graph.maximum, np.maximum),
    ("maximum-int", [((2, 3), "int64"), ((3,), "int64")], graph.maximum, np.maximum),
    ("negative", [((2, 3), "float32")], graph.negative, np.negative),
    ("negative-0d", [((), F64)], lambda a: -a, np.negative),
    ("exp", [((2, 3), "float32")], graph.exp, np.exp),
    ("exp-float16", [((4,), "float16")], graph.exp, np.exp),
    ("log", [((2, 3), F64)], graph.log, np.log),
    ("log-0d", [((), "float32")], graph.log, np.log),
    ("relu", [((2, 3), "float32")], graph.relu, lambda a: np.maximum(a, np.float32(0))),
    ("relu-int", [((5,), "int32")], graph.relu, lambda a: np.maximum(a, np.int32(0))),
    ("identity", [((2, 3), F64)], graph.identity, lambda a: a),
    ("cast-down", [((2, 3), F64)], lambda a: graph.cast(a, "float32"), lambda a: a.astype(np.float32)),
    ("cast-int-to-float", [((3,), "int32")], lambda a: graph.cast(a, F64), lambda a: a.astype(np.float64)),
    ("softmax", [((2, 3), "float32")], graph.softmax,
     lambda a: np.exp(a - a.max(-1, keepdims=True)) / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    ("softmax-axis0", [((2, 3), F64)], lambda a: graph.softmax(a, 0),
     lambda a: np.exp(a) / np.exp(a).sum(0, keepdims=True)),
    ("one_hot", [((4,), "int64")], lambda a: graph.one_hot(a, 3, F64),
     lambda a: np.eye(3, dtype=np.float64)[a]),
    ("one_hot-0d", [((), "int32")], lambda a: graph.one_hot(a, 5), lambda a: np.eye(5, dtype=np.float32)[a]),
    ("one_hot-2d", [((2, 3), "int8")], lambda a: graph.one_hot(a, 3), lambda a: np.eye(3, dtype=np.float32)[a]),
    ("dot-vv", [((4,), F64), ((4,), F64)], graph.dot, np.dot),
    ("dot-vm", [((4,), "float32"), ((4, 3), "float32")], graph.dot, np.dot),
    ("dot-mv", [((2, 4), F64), ((4,), F64)], graph.dot, np.dot),
    ("dot-mm", [((2, 4), "float32"), ((4, 3), "float32")], lambda a, b: a @ b, np.dot),
    ("dot-empty-inner", [((2, 0), F64), ((0, 3), F64)], graph.dot, np.dot),
    ("sum-all", [((2, 3, 4), F64)], graph.sum, np.sum),
    ("sum-axis0", [((2, 3, 4), "float32")], lambda a: graph.sum(a, 0), lambda a: np.sum(a, 0)),
    ("sum-axis-neg", [((2, 3, 4), F64)], lambda a: graph.sum(a, -1), lambda a: np.sum(a, -1)),
    ("sum-axes", [((2, 3, 4), F64)], lambda a: graph.sum(a, (0, 2)), lambda a: np.sum(a, (0, 2))),
    ("sum-keepdims", [((2, 3, 4), F64)], lambda a: graph.sum(a, (2, 0), keepdims=True),
     lambda a: np.sum(a, (0, 2), keepdims=True)),
    ("sum-all-keepdims", [((2, 3), "float32")], lambda a: graph.sum(a, keepdims=True),
     lambda a: np.sum(a, keepdims=True)),
    ("sum-no-axes", [((2, 3), F64)], lambda a: graph.sum(a, ()), lambda a: np.sum(a, ())),
    ("sum-0d", [((), F64)], graph.sum, np.sum),
    ("sum-empty", [((0, 3), F64)], lambda a: graph.sum(a, 0), lambda a: np.sum(a, 0)),
    ("broadcast_to", [((3,), F64)], lambda a: graph.broadcast_to(a, (2, 3)), lambda a: np.broadcast_to(a, (2, 3))),
    ("broadcast_to-0d", [((), "float32")], lambda a: graph.broadcast_to(a, (2, 2)),
     lambda a: np.broadcast_to(a, (2, 2))),
    ("broadcast_to-inner", [((2, 1), F64)], lambda a: graph.broadcast_to(a, (4, 2, 3)),
     lambda a: np.broadcast_to(a, (4, 2, 3))),
    ("reshape", [((2, 3), F64)], lambda a: graph.reshape(a, (3, 2)), lambda a: a.reshape(3, 2)),
    ("reshape-unknown", [((2, 3, 4), "float32")], lambda a: graph.reshape(a, (4, -1)),
     lambda a: a.reshape(4, -1)),
    ("reshape-to-0d", [((1, 1), F64)], lambda a: graph.reshape(a, ()), lambda a: a.reshape(())),
    ("reshape-from-0d", [((), F64)], lambda a: graph.reshape(a, (1, -1)), lambda a: a.reshape(1, -1)),
    ("reshape-empty", [((0, 3), F64)], lambda a: graph.reshape(a, (-1, 3, 1)), lambda a: a.reshape(-1, 3, 1)),
    ("transpose", [((2, 3), F64)], graph.transpose, np.transpose),
    ("transpose-perm", [((2, 3, 4), "float32")], lambda a: graph.transpose(a, (1, 2, 0)),
     lambda a: np.transpose(a, (1, 2, 0))),
    ("transpose-0d", [((), F64)], graph.transpose, np.transpose),
    ("cross_entropy", [((4, 3), F64), ((4,), "int64")], graph.cross_entropy,
     lambda z, l: -np.mean(np.log(np.exp(z) / np.exp(z).sum(1, keepdims=True))[np.arange(4), l])),
]


@pytest.mark.parametrize("specs, build, reference", [c[1:] for c in INFERENCE], ids=[c[0] for c in INFERENCE])
def test_inferred_shape_and_dtype_equal_numpys_result(specs, build, reference):
    params = [parameter(f"p{i}", shape, dtype) for i, (shape, dtype) in enumerate(specs)]
    node = build(*params)
    values = _inputs(specs, (len(specs), *[d for s, _ in specs for d in s]))
    (got,) = graph.evaluate([node], dict(zip(params, values)))
    want = np.asarray(reference(*values))
    assert (node.shape, node.dtype) == (want.shape, want.dtype)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    tol = {"float16": 1e-3, "float32": 1e-6}.get(want.dtype.name, 1e-12)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_binary_ops_keep_the_operand_dtype_where_numpy_would_promote():
    # Documented: nothing is promoted silently; numbers adopt the node's dtype.
    a = parameter("a", (3,), "float16")
    assert (a * 3).dtype == np.float16
    assert (a / 2.0).dtype == np.float16
    i = parameter("i", (3,), "int32")
    (got,) = graph.evaluate([i / 2], {"i": np.array([1, 4, 7], np.int32)})
    assert got.dtype == np.int32


def test_node_attributes_report_shape_dtype_ndim_and_repr():
    a = parameter("weights", (3, 4), F64)
    assert (a.shape, a.dtype, a.ndim, a.op, a.name) == ((3, 4), np.dtype(F64), 2, "parameter", "weights")
    assert repr(a) == "<parameter 'weights' (3, 4) float64>"
    assert repr(graph.exp(a)) == "<exp (3, 4) float64>"
    c = constant([1, 2, 3])
    assert (c.shape, c.dtype) == ((3,), np.dtype("int64"))


def test_node_equality_is_identity_and_builds_no_op():
    a, b = parameter("a", (2,)), parameter("b", (2,))
    assert (a == a) is True and (a == b) is False
    assert len({a, b, a}) == 2


def test_constant_copies_and_freezes_its_value():
    value = np.arange(3.0)
    c = constant(value)
    value[0] = 99.0
    (got,) = graph.evaluate([c], {})
    np.testing.assert_array_equal(got, [0.0, 1.0, 2.0])
    assert not c.attrs["value"].flags.writeable


# --- the executor ----------------------------------------------------------------------

def test_missing_feed_names_the_parameter_shape_and_dtype():
    x = parameter("x", (2, 3), F64)
    with pytest.raises(simdist.InvalidValue, match=r"parameter 'x' \(2, 3\) float64 was not fed.*feeds="):
        graph.evaluate([x * 2.0], {})


def test_feed_of_wrong_shape_names_expected_and_given():
    x = parameter("x", (2, 3), F64)
    with pytest.raises(simdist.InvalidValue, match=r"'x' expects shape \(2, 3\), got \(3, 2\)"):
        graph.evaluate([x], {"x": np.zeros((3, 2))})


def test_feed_of_unsafe_dtype_is_refused_with_a_hint():
    x = parameter("x", (3,), "float32")
    with pytest.raises(simdist.InvalidType, match=r"'x' expects float32, got float64.*astype\('float32'\)"):
        graph.evaluate([x], {"x": np.zeros(3)})
    with pytest.raises(simdist.InvalidType, match="got int64"):
        graph.evaluate([x], {"x": np.arange(3)})


def test_feed_of_safe_dtype_is_converted():
    x = parameter("x", (3,), F64)
    (got,) = graph.evaluate([x], {"x": np.arange(3, dtype=np.float32)})
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, [0.0, 1.0, 2.0])


def test_feeds_may_be_keyed_by_node_or_name_and_extras_are_ignored():
    x, y = parameter("x", (2,), F64), parameter("y", (2,), F64)
    (got,) = graph.evaluate([x + y], {x: np.ones(2), "y": np.full(2, 2.0), "unused": 5})
    np.testing.assert_array_equal(got, [3.0, 3.0])


def test_feed_key_that_is_not_a_parameter_is_refused():
    x = parameter("x", (2,), F64)
    with pytest.raises(simdist.InvalidType, match="feed key 3"):
        graph.evaluate([x], {3: np.ones(2)})
    with pytest.raises(simdist.InvalidType, match="feed key <exp"):
        graph.evaluate([x], {graph.exp(x): np.ones(2)})


def test_duplicate_parameter_names_are_rejected():
    a, b = parameter("w", (2,)), parameter("w", (2,))
    with pytest.raises(simdist.InvalidValue, match=r"parameter names \['w'\] are used by more than one node"):
        graph.Executor([a + b])


def test_communication_op_without_a_communicator_is_refused():
    x = parameter("x", (2,), F64)
    with pytest.raises(simdist.InvalidValue, match=r"<allreduce \(2,\) float64> needs a communicator"):
        graph.evaluate([graph.allreduce(x)], {"x": np.ones(2)})


def test_one_hot_label_out_of_range_is_refused_at_run_time():
    labels = parameter("l", (3,), "int64")
    with pytest.raises(simdist.InvalidValue, match=r"label 3 is outside 0..2"):
        graph.evaluate([graph.one_hot(labels, 3)], {"l": np.array([0, 3, 1])})


def test_outputs_are_new_writeable_arrays():
    c = constant(np.arange(3.0))
    x = parameter("x", (3,), F64)
    fed = np.ones(3)
    out_c, out_x, out_b = graph.evaluate([c, x, graph.broadcast_to(x, (2, 3))], {"x": fed})
    for out in (out_c, out_x, out_b):
        assert out.flags.writeable and out.flags.owndata
    out_x[0] = 5.0
    assert fed[0] == 1.0
    (again,) = graph.evaluate([c], {})
    np.testing.assert_array_equal(again, [0.0, 1.0, 2.0])


def test_executor_runs_repeatedly_with_new_feeds():
    x = parameter("x", (2,), F64)
    ex = graph.Executor([x * x, graph.sum(x)])
    a = ex.run(None, {"x": np.array([1.0, 2.0])})
    b = ex.run(None, {"x": np.array([3.0, 4.0])})
    np.testing.assert_array_equal(a[0], [1.0, 4.0])
    np.testing.assert_array_equal(b[0], [9.0, 16.0])
    assert (a[1], b[1]) == (3.0, 7.0)


def test_an_output_node_repeated_gives_one_value_per_position():
    x = parameter("x", (2,), F64)
    y = x + 1.0
    out = graph.evaluate([y, x, y], {"x": np.zeros(2)})
    assert [o.tolist() for o in out] == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


# --- schedule ----------------------------------------------------------------------

def _diamond():
    x = parameter("x", (3,), F64)
    a = graph.exp(x)
    b = graph.log(x)
    c = a * b
    d = graph.identity(c + a, after=[b])
    return x, a, b, c, d


def test_schedule_lists_every_needed_node_once_inputs_before_consumers():
    x, a, b, c, d = _diamond()
    order = graph.schedule([d])
    assert len(order) == len({id(n) for n in order})
    position = {id(n): i for i, n in enumerate(order)}
    for node in order:
        for dep in node.inputs + node.after:
            assert position[id(dep)] < position[id(node)], (dep, node)
    assert {id(n) for n in (x, a, b, c, d)} <= set(position)
    assert order[-1] is d


def test_schedule_leaves_out_nodes_the_outputs_do_not_need():
    x = parameter("x", (3,), F64)
    used, unused = graph.exp(x), graph.log(x)
    order = graph.schedule([used])
    assert unused not in order and order == [x, used]


def test_schedule_is_depth_first_after_dependencies_then_inputs_in_order():
    x, y = parameter("x", (2,), F64), parameter("y", (2,), F64)
    first = graph.exp(x)
    second = graph.log(y)
    early = graph.negative(y)
    out = graph.identity(first + second, after=[early])
    order = graph.schedule([out])
    assert [n.op for n in order] == ["parameter", "negative", "parameter", "exp", "log", "add", "identity"]
    assert order[0] is y and order[2] is x


def test_schedule_runs_a_send_in_after_before_the_receive_it_guards():
    x = parameter("x", (2,), F64)
    token = graph.send(x, 1)
    out = graph.identity(graph.recv(1, (2,), F64), after=[token])
    assert [n.op for n in graph.Executor([out]).communication] == ["send", "recv"]


def test_backprop_schedules_backward_sends_before_backward_receives():
    # Two ranks exchanging messages would otherwise each wait in recv for the other.
    x = parameter("x", (2,), F64)
    loss = graph.send(x, 1) + graph.sum(graph.exp(graph.recv(1, (2,), F64)))
    (g,) = graph.backprop(loss, [x])
    comm = [(n.op, n.attrs["tag"]) for n in graph.Executor([loss, g]).communication]
    assert comm == [("send", 0), ("recv", 0), ("send", graph.BACKWARD_TAG), ("recv", graph.BACKWARD_TAG)]


def test_schedule_follows_the_outputs_in_the_order_given():
    x = parameter("x", (2,), F64)
    a, b = graph.exp(x), graph.log(x)
    assert graph.schedule([a, b]) == [x, a, b]
    assert graph.schedule([b, a]) == [x, b, a]


def test_schedule_depends_only_on_structure():
    orders = []
    for _ in range(2):
        _, _, _, _, d = _diamond()
        orders.append([(n.op, n.shape, n.name) for n in graph.schedule([d])])
    assert orders[0] == orders[1]
    _, _, _, _, d = _diamond()
    assert graph.schedule([d]) == graph.schedule([d])


def test_schedule_handles_deep_chains_without_recursion():
    x = parameter("x", (), F64)
    y = x
    for _ in range(5000):
        y = y + 1.0
    assert len(graph.schedule([y])) == 1 + 2 * 5000
    (got,) = graph.evaluate([y], {"x": np.float64(0.0)})
    assert got == 5000.0


def test_executor_communication_lists_comm_nodes_in_run_order():
    x = parameter("x", (2, 3), F64)
    s = graph.allreduce(x)
    g = graph.allgather(s, 2)
    r = graph.reduce_scatter(g)
    ex = graph.Executor([graph.exp(r), graph.broadcast(x)])
    assert ex.communication[:3] == [s, g, r] and ex.communication[3].op == "broadcast"


def test_gradients_alone_run_the_forward_sends_before_the_backward_receives():
    # The gradient through send is a backward recv that reads nothing of the
    # forward pass; it must still come after this rank's forward send.
    x = parameter("x", (2,), F64)
    (g,) = graph.backprop(graph.send(x, 1, tag=2), [x])
    comm = [(n.op, n.attrs["tag"]) for n in graph.Executor([g]).communication]
    assert comm == [("send", 2), ("recv", 2 + graph.BACKWARD_TAG)]
    r = parameter("r", (), F64)
    (gr,) = graph.backprop(graph.recv(0, (2,), F64, tag=2) * r, [r])
    comm = [(n.op, n.attrs["tag"]) for n in graph.Executor([gr]).communication]
    assert comm == [("recv", 2), ("send", 2 + graph.BACKWARD_TAG)]


# --- gradients against finite differences ------------------------------------------------

def finite_differences(loss_of, values, h=1e-5):
    """Central differences of the scalar ``loss_of(values)`` for every element."""
    grads = []
    for i, v in enumerate(values):
        g = np.zeros_like(v)
        for j in np.ndindex(v.shape):
            up = [w.copy() for w in values]
            down = [w.copy() for w in values]
            up[i][j] += h
            down[i][j] -= h
            g[j] = (loss_of(up) - loss_of(down)) / (2 * h)
        grads.append(g)
    return grads


def assert_gradients_match(params, loss, values, rtol=1e-6):
    """``backprop`` of ``loss`` equals central differences, at ``values``."""
    grads = graph.backprop(loss, params)
    for p, g in zip(params, grads):
        assert (g.shape, g.dtype) == (p.shape, p.dtype)
    loss_ex = graph.Executor([loss])
    got = graph.evaluate(grads, dict(zip(params, values)))
    want = finite_differences(lambda vs: float(loss_ex.run(None, dict(zip(params, vs)))[0]), values)
    scale = max(1.0, *(float(np.max(np.abs(w), initial=0.0)) for w in want))
    for p, g, w in zip(params, got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale, err_msg=f"gradient of {p!r}")


def weighted_loss(out, key):
    """``sum(out * w)`` with fixed random weights, so every gradient element matters."""
    w = rng_for(99, *key).standard_normal(out.shape)
    return graph.sum(out * constant(w, out.dtype))


def anything(rng, shape):
    return rng.standard_normal(shape)


def positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def away_from_zero(rng, shape):
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape)


def on_integers(rng, shape):
    """Within 0.2 above an integer: at least 0.3 from every ``off_integers`` value."""
    return rng.integers(-2, 3, shape) + rng.uniform(0.0, 0.2, shape)


def off_integers(rng, shape):
    return rng.integers(-2, 3, shape) + rng.uniform(0.5, 0.7, shape)


# (id, [(shape, sampler)], builder)
GRADIENTS = [
    ("add", [((2, 3), anything), ((2, 3), anything)], graph.add),
    ("add-row", [((2, 3), anything), ((3,), anything)], graph.add),
    ("add-column-row", [((2, 1), anything), ((1, 3), anything)], graph.add),
    ("add-0d", [((), anything), ((2, 3), anything)], graph.add),
    ("add-3d", [((4, 1, 3), anything), ((2, 1), anything)], graph.add),
    ("add-number", [((2, 3), anything)], lambda a: a + 2.0),
    ("subtract", [((2, 3), anything), ((2, 3), anything)], graph.subtract),
    ("subtract-broadcast", [((3,), anything), ((2, 1), anything)], graph.subtract),
    ("rsub-number", [((3,), anything)], lambda a: 3.0 - a),
    ("multiply", [((2, 3), anything), ((2, 3), anything)], graph.multiply),
    ("multiply-broadcast", [((2, 1, 3), anything), ((4, 1), anything)], graph.multiply),
    ("multiply-0d", [((2, 3), anything), ((), anything)], graph.multiply),
    ("multiply-self", [((2, 3), anything)], lambda a: a * a),
    ("divide", [((2, 3), anything), ((2, 3), positive)], graph.divide),
    ("divide-broadcast", [((2, 3), anything), ((3,), positive)], graph.divide),
    ("divide-0d-numerator", [((), anything), ((2, 2), positive)], graph.divide),
    ("rdiv-number", [((3,), positive)], lambda a: 1.0 / a),
    ("negative", [((2, 3), anything)], graph.negative),
    ("dot-vector-vector", [((4,), anything), ((4,), anything)], graph.dot),
    ("dot-vector-matrix", [((4,), anything), ((4, 3), anything)], graph.dot),
    ("dot-matrix-vector", [((2, 4), anything), ((4,), anything)], graph.dot),
    ("dot-matrix-matrix", [((2, 4), anything), ((4, 3), anything)], graph.dot),
    ("dot-shared-operand", [((3, 3), anything)], lambda a: a @ a),
    ("sum-all", [((2, 3, 4), anything)], graph.sum),
    ("sum-all-keepdims", [((2, 3, 4), anything)], lambda a: graph.sum(a, keepdims=True)),
    ("sum-axis0", [((2, 3, 4), anything)], lambda a: graph.sum(a, 0)),
    ("sum-axis1-keepdims", [((2, 3, 4), anything)], lambda a: graph.sum(a, 1, keepdims=True)),
    ("sum-axis-neg", [((2, 3, 4), anything)], lambda a: graph.sum(a, -1)),
    ("sum-axes02", [((2, 3, 4), anything)], lambda a: graph.sum(a, (0, 2))),
    ("sum-axes02-keepdims", [((2, 3, 4), anything)], lambda a: graph.sum(a, (2, 0), keepdims=True)),
    ("sum-no-axes", [((2, 3), anything)], lambda a: graph.sum(a, ())),
    ("sum-0d", [((), anything)], graph.sum),
    ("broadcast_to-row", [((3,), anything)], lambda a: graph.broadcast_to(a, (2, 3))),
    ("broadcast_to-column", [((2, 1), anything)], lambda a: graph.broadcast_to(a, (2, 3))),
    ("broadcast_to-0d", [((), anything)], lambda a: graph.broadcast_to(a, (2, 2))),
    ("broadcast_to-lead", [((1, 3), anything)], lambda a: graph.broadcast_to(a, (4, 2, 3))),
    ("reshape", [((2, 3), anything)], lambda a: graph.reshape(a, (3, 2))),
    ("reshape-flat", [((2, 3, 2), anything)], lambda a: graph.reshape(a, (-1,))),
    ("reshape-0d", [((), anything)], lambda a: graph.reshape(a, (1, 1))),
    ("transpose", [((2, 3), anything)], graph.transpose),
    ("transpose-perm120", [((2, 3, 4), anything)], lambda a: graph.transpose(a, (1, 2, 0))),
    ("transpose-perm201", [((2, 3, 4), anything)], lambda a: graph.transpose(a, (2, 0, 1))),
    ("relu", [((3, 4), away_from_zero)], graph.relu),
    ("exp", [((2, 3), anything)], graph.exp),
    ("log", [((2, 3), positive)], graph.log),
    ("maximum", [((2, 3), on_integers), ((2, 3), off_integers)], graph.maximum),    # no ties
    ("maximum-broadcast", [((2, 3), on_integers), ((3,), off_integers)], graph.maximum),
    ("maximum-0d", [((), off_integers), ((4,), on_integers)], graph.maximum),
    ("softmax-last", [((3, 4), anything)], graph.softmax),
    ("softmax-axis0", [((3, 4), anything)], lambda a: graph.softmax(a, 0)),
    ("softmax-1d", [((5,), anything)], graph.softmax),
    ("identity", [((2, 3), anything)], graph.identity),
    ("identity-after", [((2, 3), anything)], lambda a: graph.identity(a, after=[graph.exp(a)])),
    ("cast-roundtrip", [((2, 3), anything)], lambda a: graph.cast(graph.cast(a, "float64"), "float64")),
    ("one_hot-mask", [((4, 3), anything)],
     lambda a: a * graph.one_hot(constant(np.array([0, 2, 1, 2])), 3, F64)),
    ("cross_entropy", [((4, 3), anything)], lambda a: graph.cross_entropy(a, constant(np.array([0, 2, 1, 2])))),
    ("cross_entropy-weight", [((4, 3), anything)],
     lambda a: graph.cross_entropy(a, constant(np.array([1, 1, 0, 2])), weight=0.5)),
    ("mlp", [((5, 4), anything), ((4, 3), anything), ((3,), anything), ((3, 2), anything)],
     lambda x, w1, b1, w2: graph.cross_entropy(graph.relu(x @ w1 + b1) @ w2, constant(np.array([0, 1, 1, 0, 1])))),
]


@pytest.mark.parametrize("specs, build", [c[1:] for c in GRADIENTS], ids=[c[0] for c in GRADIENTS])
def test_backprop_matches_finite_differences(request, specs, build):
    key = (len(request.node.callspec.id), *map(ord, request.node.callspec.id[:6]))
    rng = rng_for(*key)
    params = [parameter(f"p{i}", shape, F64) for i, (shape, _) in enumerate(specs)]
    values = [np.array(sample(rng, shape), dtype=np.float64) for shape, sample in specs]
    out = build(*params)
    assert_gradients_match(params, weighted_loss(out, key), values)


def test_backprop_through_cast_gives_a_gradient_in_the_parameters_dtype():
    # float32 inputs with few mantissa bits, a step of 2**-10: x +- h is exact in
    # float32, and the loss is computed in float64 after the cast.
    rng = rng_for(5)
    x = parameter("x", (2, 3), "float32")
    values = (rng.integers(-64, 64, (2, 3)) / 64).astype(np.float32)
    loss = weighted_loss(graph.exp(graph.cast(x, F64)), (5,))
    (g,) = graph.backprop(loss, [x])
    assert g.dtype == np.float32
    (got,) = graph.evaluate([g], {"x": values})
    ex = graph.Executor([loss])
    h = np.float32(2.0**-10)
    want = np.zeros((2, 3))
    for j in np.ndindex(2, 3):
        up, down = values.copy(), values.copy()
        up[j] += h
        down[j] -= h
        want[j] = (ex.run(None, {"x": up})[0] - ex.run(None, {"x": down})[0]) / (2 * float(h))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_backprop_of_a_non_scalar_loss_is_that_of_its_sum():
    x = parameter("x", (2, 3), F64)
    (g,) = graph.backprop(x * 3.0, [x])
    (got,) = graph.evaluate([g], {"x": np.ones((2, 3))})
    np.testing.assert_array_equal(got, np.full((2, 3), 3.0))


def test_backprop_gives_zeros_for_parameters_the_loss_ignores():
    x, y = parameter("x", (2,), F64), parameter("y", (3,), "float32")
    gx, gy = graph.backprop(graph.sum(graph.exp(x)), [x, y])
    got = graph.evaluate([gx, gy], {"x": np.zeros(2)})
    np.testing.assert_array_equal(got[0], [1.0, 1.0])
    assert (got[1].dtype, got[1].tolist()) == (np.float32, [0.0, 0.0, 0.0])


def test_backprop_skips_integer_inputs_but_differentiates_through_their_siblings():
    x = parameter("x", (3,), F64)
    labels = parameter("l", (3,), "int64")
    loss = graph.sum(x * graph.cast(labels, F64))
    (g,) = graph.backprop(loss, [x])
    (got,) = graph.evaluate([g], {"x": np.ones(3), "l": np.array([1, 2, 3])})
    np.testing.assert_array_equal(got, [1.0, 2.0, 3.0])


def test_backprop_of_the_loss_with_respect_to_itself_is_one():
    x = parameter("x", (), F64)
    loss = graph.exp(x)
    (g,) = graph.backprop(loss, [loss])
    assert graph.evaluate([g], {"x": 0.0})[0] == 1.0


def test_backprop_with_respect_to_an_intermediate_node():
    x = parameter("x", (3,), F64)
    h = graph.exp(x)
    loss = graph.sum(h * h)
    (g,) = graph.backprop(loss, [h])
    (got,) = graph.evaluate([g], {"x": np.zeros(3)})
    np.testing.assert_array_equal(got, [2.0, 2.0, 2.0])


def test_relu_and_maximum_gradients_at_ties_are_pinned():
    # relu'(0) = 0; at a tie maximum's gradient goes to its first operand.
    x, y = parameter("x", (3,), F64), parameter("y", (3,), F64)
    gx, gy = graph.backprop(graph.sum(graph.maximum(x, y)), [x, y])
    (gr,) = graph.backprop(graph.sum(graph.relu(x)), [x])
    got = graph.evaluate([gx, gy, gr], {"x": np.array([0.0, 1.0, -1.0]), "y": np.array([0.0, 0.0, 0.0])})
    assert [g.tolist() for g in got] == [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]


# --- passes ----------------------------------------------------------------------

def _model(rows, dtype=F64):
    x = parameter("x", (rows, 4), dtype)
    labels = parameter("labels", (rows,), "int64")
    w = parameter("w", (4, 3), dtype)
    b = parameter("b", (3,), dtype)
    return graph.cross_entropy(x @ w + b, labels), (w, b)


def _feeds(rows, key=0, dtype=np.float64):
    rng = rng_for(11, key)
    return {
        "x": rng.standard_normal((rows, 4)).astype(dtype),
        "labels": rng.integers(0, 3, rows),
        "w": rng.standard_normal((4, 3)).astype(dtype),
        "b": rng.standard_normal(3).astype(dtype),
    }


def test_sgd_update_equals_parameter_minus_lr_times_gradient():
    loss, params = _model(6)
    step = graph.sgd(loss, params, lr=0.25)
    assert step.synced == step.grads and step.lr == 0.25 and step.params == params
    assert step.outputs == [step.loss, *step.updates, *step.synced, *step.grads]
    feeds = _feeds(6)
    out = graph.evaluate(step.outputs, feeds)
    w_new, b_new, gw, gb = out[1], out[2], out[5], out[6]
    np.testing.assert_array_equal(w_new, feeds["w"] - 0.25 * gw)
    np.testing.assert_array_equal(b_new, feeds["b"] - 0.25 * gb)


def test_sgd_steps_lower_the_loss():
    loss, params = _model(8)
    step = graph.sgd(loss, params, lr=0.5)
    feeds = _feeds(8)
    ex = graph.Executor(step.outputs)
    losses = []
    for _ in range(5):
        out = ex.run(None, feeds)
        losses.append(float(out[0]))
        feeds["w"], feeds["b"] = out[1], out[2]
    assert losses == sorted(losses, reverse=True) and losses[-1] < losses[0]


def test_data_parallel_inserts_one_allreduce_per_gradient_before_its_update():
    loss, params = _model(6)
    step = graph.sgd(loss, params, lr=0.1)
    dp = graph.data_parallel(step)
    assert [s.op for s in dp.synced] == ["allreduce", "allreduce"]
    assert [s.attrs["op"] for s in dp.synced] == ["mean", "mean"]
    assert [s.inputs[0] for s in dp.synced] == list(step.grads)
    assert dp.grads == step.grads and dp.loss is step.loss and dp.params == step.params
    for update, synced in zip(dp.updates, dp.synced):
        assert synced in graph.schedule([update])
    assert [n.attrs["op"] for n in graph.Executor(dp.updates).communication] == ["mean", "mean"]
    assert "allreduce(mean) on 2 gradients" in dp.notes[0]
    assert graph.data_parallel(step, op="sum").synced[0].attrs["op"] == "sum"
    assert graph.Executor(step.updates).communication == []     # the original step is unchanged


def test_rewrite_shares_nodes_that_depend_on_nothing_replaced():
    x, y = parameter("x", (3,), F64), parameter("y", (3,), F64)
    left = graph.exp(x)
    right = graph.log(y)
    out = left * right
    z = parameter("z", (3,), F64)
    (new,) = graph.rewrite([out], {id(y): z})
    assert new is not out and new.op == "multiply"
    assert new.inputs[0] is left
    assert new.inputs[1] is not right and new.inputs[1].inputs[0] is z
    assert graph.rewrite([out], {}) == [out]
    got = graph.evaluate([new], {"x": np.zeros(3), "z": np.full(3, np.e)})[0]
    np.testing.assert_allclose(got, np.ones(3))


def test_rewrite_follows_after_dependencies():
    x, y = parameter("x", (2,), F64), parameter("y", (2,), F64)
    out = graph.identity(x, after=[graph.exp(y)])
    z = parameter("z", (2,), F64)
    (new,) = graph.rewrite([out], {id(y): z})
    assert new.after[0].inputs[0] is z and new.inputs[0] is x


def test_rewrite_keeps_shared_subgraphs_shared():
    x = parameter("x", (2,), F64)
    shared = graph.exp(x)
    out = shared + shared * 2.0
    z = parameter("z", (2,), F64)
    (new,) = graph.rewrite([out], {id(x): z})
    assert new.inputs[0] is new.inputs[1].inputs[0]


# --- rounding-error bounds ---------------------------------------------------------------

def test_magnitude_of_dot_is_abs_a_dot_abs_b():
    a, b = parameter("a", (3, 4), F64), parameter("b", (4, 2), F64)
    rng = rng_for(3)
    av, bv = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    (m,) = graph.evaluate([graph.magnitude(a @ b)], {"a": av, "b": bv})
    np.testing.assert_array_equal(m, np.abs(av) @ np.abs(bv))


def test_magnitude_of_linear_ops_uses_absolute_values():
    a, b = parameter("a", (2, 3), F64), parameter("b", (3,), F64)
    rng = rng_for(4)
    av, bv = rng.standard_normal((2, 3)), rng.uniform(0.5, 1, 3) * rng.choice([-1, 1], 3)
    cases = [
        (a - b, np.abs(av) + np.abs(bv)),
        (-a * b, np.abs(av) * np.abs(bv)),
        (a / b, 2 * np.abs(av) / np.abs(bv)),          # |a|/|b| plus the slope in b, |a| |b| / b^2
        (graph.sum(a, 0), np.abs(av).sum(0)),
        (graph.transpose(graph.reshape(a, (3, 2))), np.abs(av).reshape(3, 2).T),
        (graph.broadcast_to(b, (4, 3)), np.broadcast_to(np.abs(bv), (4, 3))),
        (graph.exp(a), np.exp(av) * (1 + np.abs(av))),  # e^a (1 + M(a)): the slope carries M(a)
        (graph.maximum(a, b), np.maximum(np.abs(av), np.abs(bv))),
        (graph.cast(a, "float32"), np.abs(av).astype(np.float32)),
    ]
    got = graph.evaluate([graph.magnitude(node) for node, _ in cases], {"a": av, "b": bv})
    for (node, want), m in zip(cases, got):
        assert (m.shape, m.dtype) == (node.shape, node.dtype)
        np.testing.assert_allclose(m, want, rtol=1e-15, err_msg=repr(node))


def test_magnitude_bounds_the_value():
    loss, params = _model(5)
    grads = graph.backprop(loss, params)
    feeds = _feeds(5)
    for g in grads:
        value, m = graph.evaluate([g, graph.magnitude(g)], feeds)
        assert np.all(np.abs(value) <= m * (1 + 1e-12))


def test_summands_counts_inner_dimensions_and_reduced_elements():
    a, b, c = parameter("a", (3, 4)), parameter("b", (4, 5)), parameter("c", (5, 2))
    assert graph.summands(a) == 1
    assert graph.summands(a @ b) == 4
    assert graph.summands((a @ b) @ c) == 4 + 5
    assert graph.summands(graph.sum(a)) == 12
    assert graph.summands(graph.sum(a, 1)) == 4
    assert graph.summands(graph.sum(parameter("d", (2, 3, 4)), (0, 2))) == 8
    assert graph.summands(graph.softmax(a)) == 4 + 3      # its sum, and exp, subtract, divide
    assert graph.summands(graph.softmax(a, 0)) == 3 + 3
    assert graph.summands(a * a + a) == 2                  # one rounding per elementwise op
    assert graph.summands(graph.allreduce(a @ b), size=4) == 4 + 4
    assert graph.summands(graph.reduce_scatter(a, "sum"), size=3) == 3
    assert graph.summands(graph.allgather(a, 2), size=2) == 1
    shared = a @ b
    assert graph.summands(shared + shared) == 4 + 1      # each node counted once, plus the addition


def test_summands_and_magnitude_of_a_gradient_count_only_what_its_value_reads():
    # backprop orders the gradient after the loss (an ``after`` edge); the
    # loss's own sums do not reach the gradient's value and must not count.
    x, w = parameter("x", (3, 4), F64), parameter("w", (4, 5), F64)
    (gx,) = graph.backprop(graph.sum(x @ w), [x])
    assert graph.summands(gx) == 5
    wv = rng_for(8).standard_normal((4, 5))
    (m,) = graph.evaluate([graph.magnitude(gx)], {"x": np.ones((3, 4)), "w": wv})
    np.testing.assert_allclose(m, np.broadcast_to(np.abs(wv).sum(1), (3, 4)), rtol=1e-15)


def test_gamma_is_k_u_over_one_minus_k_u():
    u32, u64 = 2.0**-24, 2.0**-53
    assert graph.gamma(1, "float64") == u64 / (1 - u64)
    assert graph.gamma(10, np.float32) == 10 * u32 / (1 - 10 * u32)
    assert graph.gamma(2**24, "float32") == float("inf")
    assert graph.gamma(100, "float16") > graph.gamma(100, "float32") > graph.gamma(100, "float64")


def test_graph_exports_are_what_they_claim():
    for name in graph.__all__:
        assert hasattr(graph, name), name
    assert "cross_entropy" in graph.__all__
    assert graph.BACKWARD_TAG == 1 << 14
