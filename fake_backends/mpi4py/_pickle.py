"""``MPI.pickle``: how the lowercase API turns objects into bytes.

As in mpi4py, ``MPI.pickle.__init__(dumps, loads)`` swaps the serializer
(e.g. for dill or cloudpickle) and ``MPI.pickle.PROTOCOL`` sets the pickle
protocol (default: the highest).
"""

from __future__ import annotations

import pickle as _std


class Pickle:
    """The serializer of the lowercase API."""

    def __init__(self, dumps=None, loads=None, protocol=None, threshold=None):
        self._dumps = _std.dumps if dumps is None else dumps
        self._loads = _std.loads if loads is None else loads
        self.PROTOCOL = _std.HIGHEST_PROTOCOL if protocol is None and dumps is None else protocol
        self.THRESHOLD = 262144 if threshold is None else threshold

    @property
    def THRESHOLD(self) -> int:
        """Out-of-band threshold (bytes) of ``dumps_oob``; None sets mpi4py's default."""
        return self._threshold

    @THRESHOLD.setter
    def THRESHOLD(self, threshold) -> None:
        self._threshold = 262144 if threshold is None else threshold

    def dumps(self, obj) -> bytes:
        if self.PROTOCOL is None:
            return bytes(self._dumps(obj))
        return bytes(self._dumps(obj, self.PROTOCOL))

    def loads(self, data):
        return self._loads(data)

    def dumps_oob(self, obj):
        """(pickle data, out-of-band buffers), as mpi4py's: protocol 5 at
        least, each buffer of ``THRESHOLD`` bytes or more out of band."""
        from ._mpibuffer import buffer

        protocol = max(_std.HIGHEST_PROTOCOL if self.PROTOCOL is None else self.PROTOCOL, 5)
        buffers: list = []

        def out_of_band(pickled) -> bool:
            view = buffer(pickled.raw())
            if view.nbytes >= self.THRESHOLD:
                buffers.append(view)
                return False
            return True

        return self._dumps(obj, protocol, buffer_callback=out_of_band), buffers

    def loads_oob(self, data, buffers):
        return self._loads(data, buffers=buffers)


pickle = Pickle()
