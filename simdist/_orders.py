"""Named reduction orders: the bits a backend pinned to one algorithm computes.

A floating-point sum depends on how its terms are associated. The simulator
folds in one canonical order; real MPI libraries pick an algorithm by message
size and world size. Each function here returns, for the per-rank arrays
``parts`` (rank order, one dtype and shape), exactly what one algorithm
computes, in the input dtype, so that a backend pinned to that algorithm can
be compared to the bit (``simdist.reference.check(..., order=NAME)``).

Every pairwise step ``combine(op, a, b)`` is the simulator's own operation
(:func:`simdist._reduction.fold` on ``[a, b]``): numpy's IEEE ``+`` and ``*``
for real dtypes, the textbook formula ``(ac - bd) + (ad + bc)i`` for complex
``prod``, 0/1 for logical ops. ``mean`` is the ``sum`` in that order divided
by ``len(parts)`` at the end, as the contract defines it.

Operand order. MPI defines ``inout = in op inout``; Open MPI's built-in ops
compute ``out op= in`` (``ompi/mca/op/base/op_base_functions.c``), i.e.
``inout op in``. IEEE ``+`` and ``*`` are commutative to the bit (NaN payloads
aside), and so is the textbook complex product (both components add the same
two rounded products), so only the association matters; the functions below
still write the operands in MPI's documented order.

The orders, as in Open MPI 5.0 (``ompi/mca/coll/base/coll_base_allreduce.c``;
``coll_tuned_allreduce_algorithm`` 3 = recursive doubling, 4 = ring, see
``ompi/mca/coll/tuned/coll_tuned_allreduce_decision.c``):

``fold``
    ``((x0 op x1) op x2) ...`` -- the simulator's canonical order.

``ring`` (``ompi_coll_base_allreduce_intra_ring``)
    The flat (C-order) buffer of ``count`` elements is cut into ``N`` blocks
    by ``COLL_BASE_COMPUTE_BLOCKCOUNT``: the first ``count % N`` blocks have
    ``ceil(count / N)`` elements, the rest ``floor(count / N)`` (the split of
    ``numpy.array_split``). Block ``b`` starts at rank ``b`` and travels
    ``b -> b+1 -> ... -> b-1`` (mod N); each rank adds the partial sum it
    receives to its own block (``rbuf[b] = inbuf op rbuf[b]``). So block ``b``
    is the left fold of the ranks in the rotated order ``b, b+1, ..., b-1``:
    ``((x_b op x_{b+1}) op ...) op x_{b-1}``. The allgather phase only copies.
    With ``count < N`` Open MPI falls back to recursive doubling, and so does
    this function. ``N == 1`` copies.

``recursive_doubling`` (``ompi_coll_base_allreduce_intra_recursivedoubling``)
    Let ``P`` be the largest power of two ``<= N`` and ``E = N - P``. First the
    ranks ``r < 2E`` pair up: odd ``r`` receives from ``r - 1`` and keeps
    ``x_{r-1} op x_r``; even ``r`` drops out. The survivors are renumbered
    ``0 .. P-1`` (``v_j = x_{2j} op x_{2j+1}`` for ``j < E``, else
    ``v_j = x_{j+E}``), and at distances ``1, 2, 4, ... < P`` each pair
    ``(j, j ^ d)`` combines ``lower op higher`` (both ranks compute the same
    expression, so all get the same bits). The result is the balanced binary
    tree over ``v_0 .. v_{P-1}``: ``((v0 op v1) op (v2 op v3)) op ...``; every
    input goes through at most ``ceil(log2 N)`` operations.

Only sum, prod and mean depend on the order; for the other ops every order
gives the same bits.

Checked against Open MPI 5.0.11 (mpi4py, float32/float64 sums, N = 3..7,
counts from 2 to 100003, algorithm forced with ``--mca
coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm K``):
``K=4`` (and 5, segmented ring, whose default segment size of 0 falls back to
the ring) gives ``ring``'s bits, ``K=3`` gives ``recursive_doubling``'s, on
every rank. ``K=1`` (basic linear: a reduce to rank 0, then a broadcast) is
the fold in descending rank order, not named here. Unforced, Open MPI's own
decision gave recursive doubling's bits at N = 4 and 5 for every count tried
(10 to 10**6); that is a tuning table, not a promise, so pin the algorithm.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ._reduction import fold as _fold

__all__ = ["ORDERS", "in_order", "fold", "ring", "recursive_doubling", "ring_blocks", "gloo_ring",
           "gloo_ring_chunks", "depth"]


def combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a op b`` element by element with the simulator's semantics, new array
    (``sum`` for ``mean``: the division happens once, at the end)."""
    return _fold("sum" if op == "mean" else op, [a, b], np.empty_like(a))


def _finish(op: str, acc: np.ndarray, size: int) -> np.ndarray:
    if op == "mean":  # the simulator's own division: correctly rounded acc / size
        return _fold("mean", [acc], np.empty_like(acc), size=size)
    return acc


def _flat(parts: Sequence[np.ndarray]) -> list[np.ndarray]:
    parts = [np.asarray(p) for p in parts]
    if not parts:
        raise ValueError("parts=[] is empty; pass one array per rank")
    return [np.ascontiguousarray(p).reshape(-1) for p in parts]


def fold(op: str, parts: Sequence[np.ndarray]) -> np.ndarray:
    """The canonical rank-ascending left fold, :func:`simdist._reduction.fold`."""
    shape = np.shape(parts[0]) if len(parts) else ()
    flat = _flat(parts)
    return _fold(op, flat, np.empty_like(flat[0])).reshape(shape)


def ring_blocks(count: int, size: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the ``size`` blocks Open MPI's ring cuts a
    buffer of ``count`` elements into: the first ``count % size`` blocks have
    one element more than the others."""
    late, split = divmod(count, size)
    early = late + (split != 0)
    bounds, start = [], 0
    for b in range(size):
        stop = start + (early if b < split else late)
        bounds.append((start, stop))
        start = stop
    return bounds


def _left_fold(op: str, chunks: Sequence[np.ndarray]) -> np.ndarray:
    acc = chunks[0].copy()
    for chunk in chunks[1:]:
        acc = combine(op, acc, chunk)  # in = the travelling partial, inout = local block
    return acc


def ring(op: str, parts: Sequence[np.ndarray]) -> np.ndarray:
    """What Open MPI's ring allreduce computes (see the module docstring)."""
    shape = np.shape(parts[0])
    flat = _flat(parts)
    n, count = len(flat), flat[0].size
    if n == 1:
        return _finish(op, flat[0].copy(), 1).reshape(shape)
    if count < n:
        return recursive_doubling(op, parts)
    out = np.empty_like(flat[0])
    for b, (start, stop) in enumerate(ring_blocks(count, n)):
        rotated = [flat[(b + j) % n][start:stop] for j in range(n)]
        out[start:stop] = _left_fold(op, rotated)
    return _finish(op, out, n).reshape(shape)


def recursive_doubling(op: str, parts: Sequence[np.ndarray]) -> np.ndarray:
    """What Open MPI's recursive doubling allreduce computes (see the module
    docstring)."""
    shape = np.shape(parts[0])
    flat = _flat(parts)
    n = len(flat)
    if n == 1:
        return _finish(op, flat[0].copy(), 1).reshape(shape)
    adj = 1 << (n.bit_length() - 1)  # opal_next_poweroftwo(n) >> 1
    extra = n - adj
    values = [combine(op, flat[2 * j], flat[2 * j + 1]) for j in range(extra)]
    values += [flat[j + extra].copy() for j in range(extra, adj)]
    distance = 1
    while distance < adj:  # pairs (j, j ^ distance) both get lower op higher
        paired = [None] * adj
        for j in range(adj):
            if not j & distance:
                paired[j] = paired[j | distance] = combine(op, values[j], values[j | distance])
        values, distance = paired, distance << 1
    return _finish(op, values[0], n).reshape(shape)


_GLOO_MAX_SEGMENT = 1 << 20  # gloo::AllreduceOptions::kMaxSegmentSize, bytes


def gloo_ring_chunks(count: int, size: int, itemsize: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` of the ``size`` chunks Gloo's ring cuts a
    buffer of ``count`` elements of ``itemsize`` bytes into (see
    :func:`gloo_ring`); the last ones may be short or empty."""
    max_segment = itemsize * max(1, _GLOO_MAX_SEGMENT // itemsize)
    segments = max(-(-count * itemsize // max_segment), 2 * size)
    segments = -(-segments // size) * size  # a multiple of the ranks
    per_chunk = (segments // size) * -(-count // segments)  # elements
    return [(min(c * per_chunk, count), min((c + 1) * per_chunk, count)) for c in range(size)]


def gloo_ring(op: str, parts: Sequence[np.ndarray]) -> np.ndarray:
    """What Gloo's ring allreduce computes (``gloo/allreduce.cc``, the
    algorithm ``ProcessGroupGloo`` uses on CPU tensors).

    The buffer is cut into ``2N`` or more segments (a multiple of ``N``,
    each at most 1 MiB, all but the last ones ``ceil(count / segments)``
    elements long), ``segments / N`` consecutive ones per chunk, so the
    chunks are not numpy's even split: 100 float32 on 4 ranks make chunks
    of 26, 26, 26 and 22, and 1 element on 4 ranks one chunk of 1 and three
    empty ones. Chunk ``c`` starts at rank ``c - 1``, which sends its
    elements to ``c - 2``; each rank adds what it receives to its own
    (``own + received``) and passes it on, so chunk ``c`` ends at rank ``c``
    as ``x_c + (x_{c+1} + (... + (x_{c-2} + x_{c-1})))``, the ranks in
    descending ring order. A complex sum is the sum of its real and
    imaginary parts as one float buffer twice as long (c10d's
    ``view_as_real``), so a chunk may end between the two parts of a
    number. ``mean`` (Gloo's ``AVG``) is not the sum divided: it is refused.
    Checked against torch 2.14.1's Gloo: see docs/backends.md.
    """
    if op == "mean":
        raise ValueError("gloo_ring: Gloo's AVG is not the contract's mean (see docs/backends.md); "
                         "no named order gives it")
    shape = np.shape(parts[0])
    flat = _flat(parts)
    dtype = flat[0].dtype
    if dtype.kind == "c":  # as c10d sends it: the real view, twice as long
        flat = [f.view(f.real.dtype) for f in flat]
    n, count = len(flat), flat[0].size
    out = flat[0].copy()
    for c, (start, stop) in enumerate(gloo_ring_chunks(count, n, flat[0].itemsize)):
        # own + received, from rank c - 1 down to c: a fold in that order (+ and * commute to the bit)
        out[start:stop] = _left_fold(op, [flat[(c - j) % n][start:stop] for j in range(1, n + 1)])
    return out.view(dtype).reshape(shape)


#: Named orders, by name: ``ORDERS[name](op, parts) -> ndarray``.
ORDERS: dict[str, Callable[[str, Sequence[np.ndarray]], np.ndarray]] = {
    "fold": fold,
    "ring": ring,
    "recursive_doubling": recursive_doubling,
    "gloo_ring": gloo_ring,
}


def in_order(order: str, op: str, parts: Sequence[np.ndarray]) -> np.ndarray:
    """The reduction of ``parts`` with ``op`` in the named ``order``."""
    try:
        fn = ORDERS[order]
    except KeyError:
        raise ValueError(f"order={order!r} is not a named order; use one of {', '.join(ORDERS)}") from None
    return fn(op, parts)


def depth(order: str | None, size: int) -> int:
    """The most operations any one input goes through: ``N - 1`` for a fold,
    a ring or an unknown order, ``ceil(log2 N)`` for recursive doubling or any
    balanced tree (``"tree"``)."""
    if order in ("recursive_doubling", "tree"):
        return (size - 1).bit_length()  # ceil(log2 N) for N >= 1
    return max(size - 1, 0)
