"""The view of an open MPI file: where the etypes of data lie in the file.

A view (``File.Set_view``) is a displacement, an etype and a filetype: the
filetype's blocks of bytes, tiled at its extent from the displacement, are
the bytes of the file that the rank's data fill, in order.
"""

from __future__ import annotations

import numpy as np


class View:
    """Where the data of a view lie in the file: ``blocks`` (offset,
    length) of bytes in each tile of ``extent`` bytes from ``disp``."""

    def __init__(self, disp: int, etype, filetype):
        self.disp, self.etype, self.filetype = int(disp), etype, filetype
        self.esize = etype.Get_size()
        self.blocks = _blocks(filetype)
        self.extent = filetype.Get_extent()[1]
        self.tile = sum(length for _, length in self.blocks)  # data bytes per tile

    def ranges(self, start: int, nbytes: int):
        """The file's byte ranges of data bytes [start, start + nbytes)."""
        if self.blocks == [(0, self.extent)]:  # contiguous: one range
            if nbytes:
                yield self.disp + start, nbytes
            return
        if not self.tile:
            raise ValueError("the file view's filetype holds no data")
        tile, within = divmod(start, self.tile)
        while nbytes > 0:
            for offset, length in self.blocks:
                if within >= length:
                    within -= length
                    continue
                take = min(length - within, nbytes)
                yield self.disp + tile * self.extent + offset + within, take
                nbytes -= take
                within = 0
                if not nbytes:
                    return
            tile += 1

    def byte_offset(self, etypes: int) -> int:
        return next(self.ranges(etypes * self.esize, 1), (self.disp, 1))[0]


def _blocks(datatype) -> list[tuple[int, int]]:
    """The (offset, length) byte blocks of one element of ``datatype``, in
    its type map's order, runs of adjacent bytes merged."""
    if not datatype._is_derived():
        return [(0, datatype.Get_size())]
    index = datatype._typemap("File.Set_view").byte_index(1)
    breaks = np.flatnonzero(np.diff(index) != 1) + 1
    starts, ends = np.concatenate(([0], breaks)), np.concatenate((breaks, [index.size]))
    return [(int(index[s]), int(e - s)) for s, e in zip(starts, ends) if e > s]
