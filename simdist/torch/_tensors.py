"""Tensors as MPI buffers, and torch's reduce ops as the contract's.

A CPU tensor travels as the numpy array over its memory (no copy when it
is contiguous; a contiguous copy, written back afterwards, when it is not).
bfloat16 has no MPI type: it travels as its 16-bit patterns and is
reduced by an op that folds them as bfloat16 with torch's own arithmetic
(each step computed in float32 and rounded once: the correctly rounded
bfloat16 result, as numpy's float16 steps are for float16).

Every reduction is the simulated MPI's, hence the contract's fold in rank
order. torch's ops map onto it as follows (``ReduceOps.mpi_op`` and
``premultiplied``):

- SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR: the MPI op of that name;
- on bool tensors SUM and MAX are a logical or, PRODUCT and MIN a logical
  and (a bool has no sum; torch's backends reduce bools so);
- AVG: the sum, then divided by the group's size in the tensor's dtype (the
  contract's ``mean``); floating and complex dtypes only;
- PREMUL_SUM: each rank's tensor times the factor (in its dtype), then the sum.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.distributed import ReduceOp

from .._bfloat16 import NAME as BFLOAT16, dtype_named, is_bfloat16

_R = ReduceOp.RedOpType
_NAMES = {_R.SUM: "SUM", _R.AVG: "AVG", _R.PRODUCT: "PRODUCT", _R.MIN: "MIN", _R.MAX: "MAX",
          _R.BAND: "BAND", _R.BOR: "BOR", _R.BXOR: "BXOR", _R.PREMUL_SUM: "PREMUL_SUM"}
_BOOL_OPS = {"SUM": "LOR", "MAX": "LOR", "PRODUCT": "LAND", "MIN": "LAND", "BAND": "LAND", "BOR": "LOR",
             "BXOR": "LXOR"}
_MPI_OPS = {"SUM": "SUM", "AVG": "SUM", "PREMUL_SUM": "SUM", "PRODUCT": "PROD", "MIN": "MIN", "MAX": "MAX",
            "BAND": "BAND", "BOR": "BOR", "BXOR": "BXOR"}
_BF16_FOLD = {"SUM": torch.add, "PROD": torch.mul, "MIN": torch.minimum, "MAX": torch.maximum}
_INTEGER_ONLY = ("BAND", "BOR", "BXOR")
#: c10d's ops by the contract's names (the contract's others, the logical ops, torch has not).
CONTRACT_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "mean": "AVG", "band": "BAND",
                "bor": "BOR", "bxor": "BXOR"}
#: What no dtype has (torch's own backends refuse them too).
_NO_DTYPE = (torch.complex32, torch.float8_e4m3fn, torch.float8_e5m2)


def one_tensor(tensors, call: str, group: str) -> torch.Tensor:
    """The one tensor of a call's list: ``group`` (a group's description) takes no more."""
    if len(tensors) != 1:
        raise ValueError(f"{call}: {group} takes one tensor per rank, not {len(tensors)}")
    return tensors[0]


def op_name(op) -> str:
    """``ReduceOp.SUM`` (or a ReduceOp object) as ``"SUM"``."""
    return _NAMES[op.op if isinstance(op, ReduceOp) else op]


def check_dtype(t: torch.Tensor, call: str) -> None:
    if t.device.type != "cpu":
        raise ValueError(f"{call}: the simdist backend takes CPU tensors; this one is on {t.device}")
    if t.layout != torch.strided:
        raise TypeError(f"{call}: the simdist backend moves dense tensors here (a sparse COO tensor only through "
                        f"all_reduce with SUM, as Gloo); this one's layout is {t.layout} (call .to_dense() first)")
    if t.dtype in _NO_DTYPE or t.is_quantized:
        raise TypeError(f"{call}: the simdist backend cannot move a tensor of dtype {t.dtype}")


def as_array(t: torch.Tensor) -> np.ndarray:
    """The numpy array over a contiguous CPU tensor's memory (bfloat16 as uint16)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def from_numpy(x: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy``, also of ml_dtypes' bfloat16 arrays (the contract's
    arrays of torch's backends): a tensor over ``x``'s memory."""
    if is_bfloat16(x.dtype):
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A copy of the CPU tensor ``t`` as a numpy array (bfloat16 as ml_dtypes')."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(dtype_named(BFLOAT16)).copy()
    return t.numpy().copy()


class Staged:
    """A tensor's contiguous form: ``array`` over it; ``done()`` writes it
    back when it had to be a copy."""

    __slots__ = ("tensor", "buffer", "array", "copied")

    def __init__(self, tensor: torch.Tensor, call: str):
        check_dtype(tensor, call)
        self.tensor = tensor
        self.buffer = tensor.detach().contiguous().resolve_conj()  # each the tensor itself when it already is
        self.copied = self.buffer.data_ptr() != tensor.data_ptr() or self.buffer.stride() != tensor.stride()
        self.array = as_array(self.buffer).reshape(-1)

    def done(self) -> None:
        if self.copied:
            with torch.no_grad():
                self.tensor.copy_(self.buffer.view(self.tensor.shape))


class ReduceOps:
    """The MPI ops of one simulated MPI, and what torch's ops need around them."""

    def __init__(self, MPI):
        self.MPI = MPI
        self._bf16 = {}

    def mpi_op(self, name: str, dtype: torch.dtype, call: str):
        if dtype == torch.bool:
            if name in ("AVG", "PREMUL_SUM"):
                raise TypeError(f"{call}: ReduceOp.{name} is not defined on bool tensors")
            return getattr(self.MPI, _BOOL_OPS[name])
        if name in _INTEGER_ONLY and (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"{call}: ReduceOp.{name} needs an integer or bool tensor, not {dtype}")
        if name == "AVG" and not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"{call}: ReduceOp.AVG needs a floating-point or complex tensor, not {dtype} "
                            "(an integer mean would be rounded); reduce with SUM and divide as you mean to")
        if dtype.is_complex and name in ("MIN", "MAX"):
            raise TypeError(f"{call}: ReduceOp.{name} is not defined on complex tensors")
        mpi = _MPI_OPS[name]
        if dtype == torch.bfloat16:
            return self._bfloat16_op(mpi)
        return getattr(self.MPI, mpi)

    def _bfloat16_op(self, mpi: str):
        op = self._bf16.get(mpi)
        if op is None:
            fold = _BF16_FOLD[mpi]

            def step(inbuf, inoutbuf, datatype):
                a = torch.frombuffer(inbuf, dtype=torch.bfloat16)
                b = torch.frombuffer(inoutbuf, dtype=torch.bfloat16)
                fold(a, b, out=b)

            op = self._bf16[mpi] = self.MPI.Op.Create(step, commute=True)
        return op

    def free(self) -> None:
        for op in self._bf16.values():
            op.Free()
        self._bf16.clear()


def premultiplied(staged: Staged, op) -> None:
    """PREMUL_SUM's factor applied to the (already staged) tensor's copy."""
    factor = op.factor if hasattr(op, "factor") else None
    if factor is None:
        return
    if isinstance(factor, torch.Tensor):
        factor = factor.to(device="cpu")
    staged.buffer.mul_(factor)
