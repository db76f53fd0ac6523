"""Graph nodes and the math ops, with shape and dtype inference.

A :class:`Node` is one operation applied to input nodes. It knows its shape
and dtype from the moment it is built, so a bad graph fails at construction,
naming both operands, instead of deep inside a training run. Nodes are
immutable and hold no values: the executor (``_executor.py``) computes them,
``_autodiff.py`` differentiates them, and the communication ops live in
``_comm_ops.py``.

Binary elementwise ops broadcast as numpy does; Python numbers become
constants of the other operand's dtype. Operands of a binary op must have
the same dtype: nothing is promoted silently.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from .._errors import InvalidType, InvalidValue

__all__ = [
    "Node", "parameter", "constant", "add", "subtract", "multiply", "divide", "negative",
    "dot", "sum", "broadcast_to", "reshape", "transpose", "relu", "exp", "log", "maximum",
    "softmax", "one_hot", "cast", "identity",
]

_ids = itertools.count()


class Node:
    """One operation in a graph: ``op`` applied to ``inputs`` with ``attrs``.

    ``shape`` and ``dtype`` are inferred at construction. ``after`` lists
    nodes that must run before this one although it does not read them
    (the backward pass of ``send``/``recv`` uses it). Arithmetic operators
    (``+ - * / @``, unary ``-``) build the corresponding ops.
    """

    __slots__ = ("op", "inputs", "attrs", "shape", "dtype", "name", "after", "id")

    def __init__(self, op: str, inputs: Sequence["Node"], shape, dtype, attrs=None,
                 name: str | None = None, after: Sequence["Node"] = ()):
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = dict(attrs or {})
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.name = name
        self.after = tuple(after)
        self.id = next(_ids)        # creation order: only for readable reprs

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        label = f"{self.op} {self.name!r}" if self.name else self.op
        return f"<{label} {self.shape} {self.dtype}>"

    def __add__(self, other): return add(self, other)
    def __radd__(self, other): return add(other, self)
    def __sub__(self, other): return subtract(self, other)
    def __rsub__(self, other): return subtract(other, self)
    def __mul__(self, other): return multiply(self, other)
    def __rmul__(self, other): return multiply(other, self)
    def __truediv__(self, other): return divide(self, other)
    def __rtruediv__(self, other): return divide(other, self)
    def __matmul__(self, other): return dot(self, other)
    def __neg__(self): return negative(self)

    # Nodes are compared by identity: ``==`` must not build a graph op.
    __eq__ = object.__eq__
    __hash__ = object.__hash__


# --- checks -------------------------------------------------------------------------

def _fail_type(op: str, message: str):
    raise InvalidType(f"graph.{op}: {message}")


def _fail_value(op: str, message: str):
    raise InvalidValue(f"graph.{op}: {message}")


def _node(x, op: str, arg: str = "x") -> Node:
    if not isinstance(x, Node):
        _fail_type(op, f"{arg}={x!r} is not a graph node; wrap arrays in graph.constant()")
    return x


def _pair(a, b, op: str) -> tuple[Node, Node]:
    """Both operands as nodes of one dtype; numbers adopt the node's dtype."""
    if not isinstance(a, Node) and not isinstance(b, Node):
        _fail_type(op, f"needs at least one graph node, got {a!r} and {b!r}")
    if not isinstance(a, Node):
        a = _number(a, b, op)
    if not isinstance(b, Node):
        b = _number(b, a, op)
    if a.dtype != b.dtype:
        _fail_type(op, f"operands differ in dtype: {a!r} and {b!r}; "
                       f"cast one with graph.cast(x, {a.dtype.name!r})")
    return a, b


def _number(value, other: Node, op: str) -> Node:
    """``value`` as a constant of ``other``'s dtype, refusing lossy conversions
    (``0.5`` to an integer node would silently become ``0``)."""
    try:
        given = np.asarray(value)
    except (TypeError, ValueError) as exc:
        _fail_type(op, f"operand {value!r} is neither a graph node nor a number ({exc})")
    kinds = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
    if given.dtype.kind not in kinds or kinds[given.dtype.kind] > kinds.get(other.dtype.kind, -1):
        _fail_type(op, f"operand {value!r} does not fit {other!r}'s dtype {other.dtype.name}; "
                       f"wrap it with graph.constant(value, dtype) and cast explicitly")
    try:
        out = constant(value, dtype=other.dtype)
        if out.dtype.kind in "biu" and not np.array_equal(out.attrs["value"], given):
            raise ValueError("it would change its value")
    except (OverflowError, TypeError, ValueError) as exc:
        _fail_value(op, f"operand {value!r} does not fit {other!r}'s dtype {other.dtype.name}: {exc}")
    return out


def _float(x: Node, op: str) -> Node:
    if x.dtype.kind not in "fc":
        _fail_type(op, f"needs a floating-point operand, got {x!r}")
    return x


def _axes(axes, ndim: int, op: str) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, (int, np.integer)):
        axes = (axes,)
    try:
        axes = tuple(axes)
    except TypeError:
        _fail_type(op, f"axes={axes!r} must be an int or a sequence of ints")
    out = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            _fail_type(op, f"axes={axes!r}: axis {a!r} is not an int")
        if not -ndim <= int(a) < ndim:
            _fail_value(op, f"axis {a} is out of range for {ndim} dimensions")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        _fail_value(op, f"axes={tuple(axes)} repeat an axis")
    return tuple(sorted(out))


# --- sources ------------------------------------------------------------------------

def parameter(name: str, shape: Sequence[int], dtype="float32") -> Node:
    """A value fed at run time (inputs, labels, weights), by ``name``."""
    if not isinstance(name, str) or not name:
        _fail_value("parameter", f"name={name!r} must be a non-empty str")
    shape = tuple(shape)
    if any(not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        _fail_value("parameter", f"{name!r}: shape={shape} must be non-negative ints")
    return Node("parameter", (), shape, dtype, name=name)


def constant(value, dtype=None, name: str | None = None) -> Node:
    """A fixed array, stored in the graph (read-only)."""
    array = np.array(value, dtype=dtype)
    array.setflags(write=False)
    return Node("constant", (), array.shape, array.dtype, {"value": array}, name=name)


# --- elementwise --------------------------------------------------------------------

def _binary(op: str, a, b) -> Node:
    a, b = _pair(a, b, op)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        _fail_value(op, f"shapes do not broadcast: {a!r} and {b!r}")
    return Node(op, (a, b), shape, a.dtype)


def add(a, b) -> Node: return _binary("add", a, b)
def subtract(a, b) -> Node: return _binary("subtract", a, b)
def multiply(a, b) -> Node: return _binary("multiply", a, b)
def divide(a, b) -> Node: return _binary("divide", a, b)
def maximum(a, b) -> Node: return _binary("maximum", a, b)


def _unary(op: str, x, floating: bool = False) -> Node:
    x = _node(x, op)
    if floating:
        _float(x, op)
    return Node(op, (x,), x.shape, x.dtype)


def negative(x) -> Node: return _unary("negative", x)
def exp(x) -> Node: return _unary("exp", x, floating=True)
def log(x) -> Node: return _unary("log", x, floating=True)
def relu(x) -> Node: return _unary("relu", x)


def identity(x, after: Sequence[Node] = ()) -> Node:
    """``x`` itself, computed only after the nodes ``after``."""
    x = _node(x, "identity")
    return Node("identity", (x,), x.shape, x.dtype, after=after)


def cast(x, dtype) -> Node:
    x = _node(x, "cast")
    return Node("cast", (x,), x.shape, dtype, {"dtype": np.dtype(dtype)})


def softmax(x, axis: int = -1) -> Node:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    x = _float(_node(x, "softmax"), "softmax")
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        _fail_type("softmax", f"axis={axis!r} must be one int")
    (axis,) = _axes(axis, x.ndim, "softmax")
    return Node("softmax", (x,), x.shape, x.dtype, {"axis": axis})


def one_hot(labels, depth: int, dtype="float32") -> Node:
    """Rows of ``depth`` zeros with a one at each integer label."""
    labels = _node(labels, "one_hot", "labels")
    if labels.dtype.kind not in "iu":
        _fail_type("one_hot", f"labels must be integers, got {labels!r}")
    if not isinstance(depth, (int, np.integer)) or depth < 1:
        _fail_value("one_hot", f"depth={depth!r} must be an int >= 1")
    return Node("one_hot", (labels,), labels.shape + (int(depth),), dtype, {"depth": int(depth)})


# --- linear algebra and shapes ------------------------------------------------------

def dot(a, b) -> Node:
    """Matrix product of 1-d or 2-d operands, as ``numpy.dot``."""
    a, b = _pair(a, b, "dot")
    if not 1 <= a.ndim <= 2 or not 1 <= b.ndim <= 2:
        _fail_value("dot", f"operands must be 1-d or 2-d, got {a!r} and {b!r}")
    if a.shape[-1] != b.shape[0]:
        _fail_value("dot", f"inner dimensions differ: {a!r} and {b!r} "
                           f"({a.shape[-1]} != {b.shape[0]})")
    return Node("dot", (a, b), a.shape[:-1] + b.shape[1:], a.dtype)


def sum(x, axes=None, keepdims: bool = False) -> Node:  # noqa: A001 - the op's name
    """Sum over ``axes`` (all by default)."""
    x = _node(x, "sum")
    axes = _axes(axes, x.ndim, "sum")
    if keepdims:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return Node("sum", (x,), shape, x.dtype, {"axes": axes, "keepdims": bool(keepdims)})


def broadcast_to(x, shape: Sequence[int]) -> Node:
    """``x`` repeated to ``shape``, by numpy's broadcasting rules."""
    x = _node(x, "broadcast_to")
    shape = tuple(int(d) for d in shape)
    try:
        if np.broadcast_shapes(x.shape, shape) != shape:
            raise ValueError
    except ValueError:
        _fail_value("broadcast_to", f"cannot broadcast {x!r} to shape {shape}")
    return Node("broadcast_to", (x,), shape, x.dtype, {"shape": shape})


def reshape(x, shape: Sequence[int]) -> Node:
    """``x`` with a new shape of the same size (one dimension may be -1)."""
    x = _node(x, "reshape")
    shape = tuple(shape)
    # Inferred arithmetically: allocating an array of x's shape to ask numpy
    # would fail (or take memory) for large shapes.
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) for d in shape):
        _fail_type("reshape", f"shape={shape!r} must be ints")
    size = int(np.prod(x.shape, dtype=np.int64))
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
    unknown = [i for i, d in enumerate(shape) if d == -1]
    new = tuple(int(d) for d in shape)
    if len(unknown) == 1 and known > 0 and size % known == 0:
        new = new[:unknown[0]] + (size // known,) + new[unknown[0] + 1:]
    if any(d < 0 for d in new) or int(np.prod(new, dtype=np.int64)) != size:
        _fail_value("reshape", f"cannot reshape {x!r} to {shape}")
    return Node("reshape", (x,), new, x.dtype, {"shape": new})


def transpose(x, axes: Sequence[int] | None = None) -> Node:
    """``x`` with its axes permuted (reversed by default)."""
    x = _node(x, "transpose")
    axes = tuple(reversed(range(x.ndim))) if axes is None else tuple(int(a) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        _fail_value("transpose", f"axes={axes} is not a permutation of {x.ndim} axes of {x!r}")
    return Node("transpose", (x,), tuple(x.shape[a] for a in axes), x.dtype, {"axes": axes})
