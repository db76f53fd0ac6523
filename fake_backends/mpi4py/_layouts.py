"""Where the bytes of a derived datatype lie in a buffer's memory, and
moving them between that memory and their packed copy.

A type map is the displacement of every byte it covers, in packed order
(``TypeMap.byte_index``). Moving a message through that index costs a
numpy fancy-index step per byte, and finding its bounds a pass over it.
The type maps programs really send (a vector: the column of a matrix; a
subarray: the pencil or slab of a 3-D array that a parallel FFT
transposes) are a regular grid of equal contiguous runs: ``start +
sum(k_i * stride_i)`` for ``k_i < shape_i``, each run ``run`` bytes
long. Such a layout (``Grid``) moves as one strided numpy copy, in units
of up to 8 bytes, at the speed of a copy of the array; any other type map
(``Scattered``) moves through its byte index. Both are found once per
type map and count (cached on the type map) and placed at a displacement
with ``at``, so a call neither builds an index nor scans one. A grid is
found from the constructor's own numbers where a vector, subarray or
contiguous type of a grid (or ``count`` copies of one) is a grid again
(``regular``), and from the byte index otherwise (``layout_of``): a
library that builds its transposes' subarray types per call never pays
for an index.
``Blocks`` is the layouts of a vector call's blocks, one after another.
``gather`` can pack straight into a message's place (``out``), where the
call has one, instead of into a copy of its own; ``gather_range`` and
``scatter_range`` move any range of the packed bytes, as a message cut
into chunks moves them (``Blocks`` are cut into their parts instead).
"""

from __future__ import annotations

import math

import numpy as np

_UNITS = {8: np.uint64, 4: np.uint32, 2: np.uint16, 1: np.uint8}


class Scattered:
    """Any type map: the displacement of every byte, in packed order."""

    __slots__ = ("index", "lo", "hi")

    def __init__(self, index: np.ndarray, lo: int | None = None, hi: int | None = None):
        self.index = index
        if lo is None:
            lo, hi = (int(index.min()), int(index.max())) if index.size else (0, -1)
        self.lo, self.hi = lo, hi  # the lowest and highest byte reached (hi < lo: none)

    @property
    def nbytes(self) -> int:
        return self.index.size

    def at(self, displacement: int) -> "Scattered":
        if not displacement:
            return self
        return Scattered(self.index + displacement, self.lo + displacement, self.hi + displacement)

    def gather(self, memory: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.take(memory, self.index, out=out)

    def scatter(self, memory: np.ndarray, packed: np.ndarray, nbytes: int) -> None:
        memory[self.index[:nbytes]] = packed[:nbytes]

    def gather_range(self, memory: np.ndarray, out: np.ndarray, lo: int) -> None:
        np.take(memory, self.index[lo:lo + out.size], out=out)

    def scatter_range(self, memory: np.ndarray, data: np.ndarray, lo: int) -> None:
        memory[self.index[lo:lo + data.size]] = data


class Grid:
    """Equal runs of ``run`` bytes at ``start + sum(k_i * strides_i)``."""

    __slots__ = ("start", "shape", "strides", "run", "unit", "lo", "hi", "nbytes", "_units")

    def __init__(self, start: int, shape: tuple, strides: tuple, run: int):
        self.start, self.shape, self.strides, self.run = start, shape, strides, run
        self.nbytes = math.prod(shape) * run
        self.unit = unit = next(u for u in _UNITS if run % u == 0 and all(s % u == 0 for s in strides))
        # _view's shape, dtype and strides in the largest unit
        self._units = (shape + (run // unit,), _UNITS[unit], strides + (unit,))
        below = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
        above = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
        self.lo, self.hi = start + below, start + above + run - 1

    def at(self, displacement: int) -> "Grid":
        if not displacement:
            return self
        return Grid(self.start + displacement, self.shape, self.strides, self.run)

    def _view(self, memory: np.ndarray, unit: int | None = None) -> np.ndarray:
        # An array over the memory itself: its offset makes the lowest byte
        # reached index 0 of nothing, so negative strides need no rebasing.
        if unit is None or unit == self.unit:
            shape, dtype, strides = self._units
            return np.ndarray(shape, dtype, memory, self.start, strides)
        return np.ndarray(self.shape + (self.run // unit,), _UNITS[unit], memory, self.start, self.strides + (unit,))

    def gather(self, memory: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        view = self._view(memory)
        if out is None:
            return view.copy().reshape(-1).view(np.uint8)
        np.copyto(out.view(view.dtype).reshape(view.shape), view)
        return out

    def scatter(self, memory: np.ndarray, packed: np.ndarray, nbytes: int) -> None:
        if nbytes == self.nbytes:
            view = self._view(memory)
            view[...] = packed[:nbytes].view(view.dtype).reshape(view.shape)
        else:  # a receive shorter than the type: the first bytes only
            self.scatter_range(memory, packed[:nbytes], 0)

    def runs(self, at: int) -> np.ndarray:
        """The runs of memory the layout reaches, in packed order, as
        (offset, length) rows of int64, offsets from ``at`` (where the
        memory's byte 0 lies)."""
        starts = np.full(1, at + self.start, np.int64)
        for n, stride in zip(self.shape, self.strides):
            starts = (starts[:, None] + np.arange(n, dtype=np.int64) * stride).reshape(-1)
        return np.stack([starts, np.full(starts.size, self.run, np.int64)], 1)

    def _pieces(self, memory: np.ndarray, lo: int, nbytes: int):
        """Packed bytes ``lo:lo + nbytes`` as strided views of the memory in
        packed order, in the largest unit that divides the bounds."""
        unit = next(u for u in _UNITS if u <= self.unit and not (lo | nbytes) % u)
        return _row_major(self._view(memory, unit), lo // unit, (lo + nbytes) // unit)

    def gather_range(self, memory: np.ndarray, out: np.ndarray, lo: int) -> None:
        if not lo and out.size == self.nbytes:  # the whole layout: one strided copy
            self.gather(memory, out)
            return
        done = 0
        for piece in self._pieces(memory, lo, out.size):
            n = piece.nbytes
            np.copyto(out[done:done + n].view(piece.dtype).reshape(piece.shape), piece)
            done += n

    def scatter_range(self, memory: np.ndarray, data: np.ndarray, lo: int) -> None:
        if not lo and data.size == self.nbytes:
            self.scatter(memory, data, data.size)
            return
        done = 0
        for piece in self._pieces(memory, lo, data.size):
            n = piece.nbytes
            piece[...] = data[done:done + n].view(piece.dtype).reshape(piece.shape)
            done += n


def _row_major(view: np.ndarray, a: int, b: int):
    """Elements ``a:b`` of ``view`` in row-major order, as few sub-views."""
    if a >= b:
        return
    if view.ndim == 1:
        yield view[a:b]
        return
    inner = math.prod(view.shape[1:])
    i, j = divmod(a, inner)
    k, m = divmod(b, inner)
    if i == k:
        yield from _row_major(view[i], j, m)
        return
    if j:
        yield from _row_major(view[i], j, inner)
        i += 1
    if k > i:
        yield view[i:k]
    if m:
        yield from _row_major(view[k], 0, m)


class Blocks:
    """The layouts of several blocks, packed one after another."""

    __slots__ = ("parts", "lo", "hi")

    def __init__(self, parts: list):
        self.parts = parts  # one per block, empty ones too
        reached = [p for p in parts if p.nbytes]
        self.lo = min((p.lo for p in reached), default=0)
        self.hi = max((p.hi for p in reached), default=-1)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def at(self, displacement: int) -> "Blocks":
        return Blocks([p.at(displacement) for p in self.parts])

    def gather(self, memory: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        out = np.empty(self.nbytes, np.uint8) if out is None else out
        done = 0
        for part in self.parts:
            part.gather(memory, out[done:done + part.nbytes])
            done += part.nbytes
        return out

    def scatter(self, memory: np.ndarray, packed: np.ndarray, nbytes: int) -> None:
        done = 0
        for part in self.parts:
            if done >= nbytes:
                return
            take = min(part.nbytes, nbytes - done)
            part.scatter(memory, packed[done:done + part.nbytes], take)
            done += part.nbytes


def stepped_rows(blocks: list) -> tuple | None:
    """Where the blocks of a call (each a ``Grid``, or a run of bytes as
    ``(lo, hi)``) are one strided array: equal shapes of units whose starts
    step evenly, so that row ``j`` of ``np.ndarray(shape, dtype, memory,
    start, strides)`` is block ``j``'s packed bytes in row-major order.
    Returns ``(shape, dtype, start, strides)``, or None where they are not
    (or are empty). A transpose's blocks are: one numpy copy moves them all."""
    units = []
    for block in blocks:
        if isinstance(block, Grid):
            shape, dtype, strides = block._units
            units.append((block.start, shape, dtype, strides))
        elif isinstance(block, tuple):
            lo, hi = block
            unit = next(u for u in _UNITS if not (lo | hi) % u)
            units.append((lo, ((hi - lo) // unit,), _UNITS[unit], (unit,)))
        else:
            return None
    first = units[0]
    step = units[1][0] - first[0] if len(units) > 1 else 0
    if not math.prod(first[1]) or any(u[1:] != first[1:] or u[0] != first[0] + j * step
                                       for j, u in enumerate(units)):
        return None
    return (len(units), *first[1]), first[2], first[0], (step, *first[3])


def regular(start: int, shape, strides, run: int) -> Grid:
    """The grid of runs of ``run`` bytes at ``start + sum(k_i * strides_i)``,
    in its fewest dimensions, as ``layout_of`` finds it from the bytes:
    dimensions of one dropped, runs that continue each other joined, and
    a dimension that continues the next merged into it."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    while dims and dims[-1][1] == run:
        run *= dims.pop()[0]
    merged: list[tuple[int, int]] = []
    for n, s in reversed(dims):
        if merged and s == merged[0][0] * merged[0][1]:
            merged[0] = (n * merged[0][0], merged[0][1])
        else:
            merged.insert(0, (n, s))
    return Grid(start, tuple(n for n, _ in merged), tuple(s for _, s in merged), run)


def layout_of(index: np.ndarray) -> Grid | Scattered:
    """The layout of a byte index (a Grid where it is one)."""
    if index.size == 0:
        return Scattered(index)
    breaks = np.flatnonzero(np.diff(index) != 1) + 1
    bounds = np.concatenate(([0], breaks, [index.size]))
    runs = np.diff(bounds)
    if (runs != runs[0]).any():
        return Scattered(index)
    grid = _grid(index[bounds[:-1]])
    if grid is None:
        return Scattered(index)
    shape, strides = grid
    return Grid(int(index[0]), shape, strides, int(runs[0]))


def _grid(starts: np.ndarray) -> tuple[tuple, tuple] | None:
    """``(shape, strides)`` with ``starts == starts[0] + sum(k_i * strides_i)``
    in row-major order of ``k``, or None."""
    shape, strides = [], []
    while starts.size > 1:
        step = int(starts[1] - starts[0])
        steps = np.diff(starts)
        off = np.flatnonzero(steps != step)
        k = int(off[0]) + 1 if off.size else starts.size
        if starts.size % k:
            return None
        rows = starts.reshape(-1, k)
        if not (rows == rows[:, :1] + np.arange(k, dtype=np.int64) * step).all():
            return None
        shape.insert(0, k)
        strides.insert(0, step)
        starts = rows[:, 0]
    return tuple(shape), tuple(strides)
