"""bfloat16: no dtype of the contract, but one torch's backends carry.

numpy has it from ``ml_dtypes`` (installed with ``simdist[torch]``), as a
dtype of kind ``"V"`` whose arithmetic is float32's rounded once to
bfloat16, hence correctly rounded for one addition or product (float32
has more than 2 x 8 + 2 bits), as torch's is. The reference judges it as
the float it is (:func:`kind_of` says ``"f"``); a sweep makes its rows where a
factory says it carries it (``extra_dtypes``).
"""

from __future__ import annotations

import numpy as np

from ._errors import InvalidValue

__all__ = ["NAME", "is_bfloat16", "kind_of", "dtype_named"]

NAME = "bfloat16"


def is_bfloat16(dtype: np.dtype) -> bool:
    return dtype.kind == "V" and dtype.name == NAME


def kind_of(dtype: np.dtype) -> str:
    """``dtype.kind``, with ``"f"`` for bfloat16."""
    return "f" if is_bfloat16(dtype) else dtype.kind


def dtype_named(name: str) -> np.dtype:
    """``np.dtype(name)``; for ``"bfloat16"``, ml_dtypes' type (or a message saying how to get it)."""
    if name == NAME:
        try:
            import ml_dtypes
        except ImportError:
            raise InvalidValue("bfloat16 needs ml_dtypes, which numpy takes the type from: "
                               "pip install 'simdist[torch]'") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
