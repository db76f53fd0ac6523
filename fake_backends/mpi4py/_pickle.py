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

    def dumps(self, obj) -> bytes:
        if self.PROTOCOL is None:
            return bytes(self._dumps(obj))
        return bytes(self._dumps(obj, self.PROTOCOL))

    def loads(self, data):
        return self._loads(data)

    def dumps_oob(self, obj):
        return self.dumps(obj), []

    def loads_oob(self, data, buffers):
        return self.loads(data)


pickle = Pickle()
