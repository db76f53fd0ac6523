"""Reductions made of an allgather and a fold in numpy, in an order of our choosing.

The fakes that change *which* arrays a reduction folds, or in *what order*
(:class:`~fake_backends.faulty.reductions.MissingLastRank`,
:class:`~fake_backends.faulty.legal.RandomOrder`), cannot get that from the base's
reduce. They gather every rank's input with the base's ``allgather`` and fold
the chosen parts locally with simdist's own fold (``simdist._reduction``), in
the input dtype, so every op and dtype of the contract behaves as the
simulator's does apart from the order.

What the base would have checked is checked here first, with the base's
messages: the input's dtype, the op for that dtype, the root, the blocks of
``reduce_scatter`` (``InvalidType``/``InvalidValue``), and that every rank
passed the same op and root (``CollectiveMismatch`` on every rank; the
allgather itself refuses different dtypes or shapes).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

import simdist
from simdist._arguments import OP_CODE, as_input, check_blocks, check_op, check_rank_arg
from simdist._reduction import fold

__all__ = ["validate", "reduction"]


def validate(base, name: str, x, op, root: int = 0):
    """``(x as an array, root)`` after the checks the base would make."""
    rank, size = base.rank, base.size
    x = as_input(x, rank, name)
    check_op(op, x.dtype, rank, name)
    if name == "reduce":
        root = check_rank_arg(root, size, rank, name, "root")
    if name == "reduce_scatter":
        check_blocks(x, size, rank, name)
    return x, root


def _agree(base, name: str, op: str, root: int) -> None:
    """Raise CollectiveMismatch on every rank unless all passed the same op and root."""
    if base.size == 1:
        return
    calls = base.allgather(np.array([OP_CODE[op], root], np.int64))
    if (calls == calls[0]).all():
        return
    ops = {code: o for o, code in OP_CODE.items()}
    said = {r: f"{name}(op={ops[int(c[0])]!r}" + (f", root={int(c[1])})" if name == "reduce" else ")")
            for r, c in enumerate(calls)}
    raise simdist.CollectiveMismatch(
        f"rank {base.rank}: {name}: the ranks' calls do not match: "
        + "; ".join(f"rank {r}: {s}" for r, s in said.items()), said)


def reduction(base, name: str, x, op: str, root: int, order: Sequence[int]):
    """``name`` (``allreduce``, ``reduce`` or ``reduce_scatter``) of ``x``,
    folding the ranks' arrays in ``order`` (rank indices; a subset skips
    ranks). ``mean`` divides by ``base.size`` whatever ``order`` holds.
    Call with an ``x`` and ``root`` from :func:`validate`."""
    _agree(base, name, op, root)
    stack = base.allgather(x)  # (size, *x.shape), by rank
    if name == "reduce" and base.rank != root:
        return None
    if name == "reduce_scatter":
        stack = stack[:, base.rank]
    # folded flat: simdist's fold wants arrays of one dimension or more (numpy's
    # logical ops turn 0-d arrays into scalars)
    parts = [stack[r, ...].reshape(-1) for r in order]
    out = fold(op, parts, np.empty(parts[0].shape, x.dtype), size=base.size)
    return out.reshape(stack.shape[1:])
