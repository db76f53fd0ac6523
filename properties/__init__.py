"""The property suite: Hypothesis properties of collectives, runnable against any backend.

Run it with ``python -m pytest --pyargs properties`` and choose the backend
with ``--simdist-backend sim|mpi|MODULE:FACTORY`` and the size with
``--simdist-np N`` (the pytest plugin in ``properties.plugin`` is installed
with simdist). ``properties.strategies`` holds the strategies, for writing
properties of your own. See docs/properties.md.
"""

from ._backend import Backend

__all__ = ["Backend"]
