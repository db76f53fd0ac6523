"""Argument checks shared by every backend, with messages that name the
rank, the collective, the argument and its value, and suggest the fix."""

from __future__ import annotations

import operator

import numpy as np

from ._communicator import OPS
from ._errors import InvalidType, InvalidValue
from ._reduction import accepts

#: The dtypes of the contract, in a fixed order; a dtype's code is its index + 1
#: (code 0 means "no array", as a non-root's broadcast input).
DTYPES = tuple(
    np.dtype(name)
    for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
)
DTYPE_CODE = {dt: i + 1 for i, dt in enumerate(DTYPES)}
#: The most dimensions a numpy array can have (64 since numpy 2, 32 before).
MAX_DIMS = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
OP_CODE = {op: i + 1 for i, op in enumerate(OPS)}
#: (op, dtype code) pairs that are defined; everything else is an error.
OP_DTYPE_OK = frozenset((op, DTYPE_CODE[dt]) for op in OPS for dt in DTYPES if accepts(op, dt))


def where(rank: int, collective: str) -> str:
    return f"rank {rank}: {collective}"


def as_input(x, rank: int, collective: str, arg: str = "x") -> np.ndarray:
    """``x`` as an array of a supported dtype, or a clear InvalidType."""
    if type(x) is not np.ndarray:
        if x is None:
            raise InvalidType(f"{where(rank, collective)}: {arg}=None; pass a numpy array")
        try:
            x = np.asarray(x)
        except Exception as exc:
            raise InvalidType(f"{where(rank, collective)}: {arg}={x!r:.80} is not array-like ({exc})") from None
    if x.dtype not in DTYPE_CODE:
        raise InvalidType(
            f"{where(rank, collective)}: {arg} has dtype {x.dtype} ({x.dtype.str!r}), which collectives "
            f"do not carry; supported: {', '.join(str(d) for d in DTYPES)} in native byte order"
            + ("; convert with x.astype(x.dtype.newbyteorder('='))" if x.dtype.kind in "biufc" else "")
        )
    return x


def check_op(op, dtype: np.dtype, rank: int, collective: str) -> None:
    if not isinstance(op, str):
        raise InvalidType(f"{where(rank, collective)}: op={op!r} must be a str, one of {', '.join(OPS)}")
    if (op, DTYPE_CODE[dtype]) in OP_DTYPE_OK:
        return
    if op not in OP_CODE:
        raise InvalidValue(f"{where(rank, collective)}: op={op!r} is not a reduction op; use one of {', '.join(OPS)}")
    usable = [o for o in OPS if (o, DTYPE_CODE[dtype]) in OP_DTYPE_OK]
    hint = "; reduce with op='sum' and divide" if op == "mean" and dtype.kind in "iu" else ""
    raise InvalidType(
        f"{where(rank, collective)}: op={op!r} is not defined on dtype {dtype}{hint}; ops for {dtype}: {', '.join(usable)}"
    )


def check_rank_arg(value, size: int, rank: int, collective: str, arg: str) -> int:
    """A root/dest/source argument: an int in ``range(size)``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidType(f"{where(rank, collective)}: {arg}={value!r} must be an int rank in 0..{size - 1}")
    value = operator.index(value)
    if not 0 <= value < size:
        raise InvalidValue(f"{where(rank, collective)}: {arg}={value} is out of range; ranks are 0..{size - 1}")
    return value


def check_int(value, rank: int, collective: str, arg: str, minimum: int | None = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InvalidType(f"{where(rank, collective)}: {arg}={value!r} must be an int")
    value = operator.index(value)
    if minimum is not None and value < minimum:
        raise InvalidValue(f"{where(rank, collective)}: {arg}={value} must be >= {minimum}")
    if not -(2**63) <= value < 2**63:
        raise InvalidValue(f"{where(rank, collective)}: {arg}={value} does not fit in 64 bits")
    return value


def check_blocks(x: np.ndarray, size: int, rank: int, collective: str, arg: str = "x") -> None:
    """``x`` must have shape ``(size, ...)``: one block per rank."""
    if x.ndim == 0 or x.shape[0] != size:
        raise InvalidValue(
            f"{where(rank, collective)}: {arg} has shape {x.shape}; it must have shape (size, ...) = "
            f"({size}, ...), one block per rank"
        )


def check_stackable(x: np.ndarray, rank: int, collective: str) -> None:
    """``x`` must leave room for the rank axis that gather and allgather add."""
    if x.ndim >= MAX_DIMS:
        raise InvalidValue(
            f"{where(rank, collective)}: x has {x.ndim} dimensions; the result stacks the ranks' arrays along "
            f"a new first axis and numpy arrays have at most {MAX_DIMS}: reshape x to {MAX_DIMS - 1} or fewer"
        )
