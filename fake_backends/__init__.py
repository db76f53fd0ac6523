"""Stand-ins for testing code that runs on simdist, of two kinds.

* **Stand-ins of real backends** -- :mod:`fake_backends.mpi4py`, the
  simulated ``mpi4py`` that ``simdist run`` installs on each simulated rank,
  so that programs written against mpi4py run on the simulator unchanged
  (see docs/mpi4py.md).
* **Communicators with one bug each** -- :mod:`fake_backends.faulty`: small
  wrappers around a real communicator, each with one fault (or, for the
  legal ones, one freedom the contract allows), for testing error handling
  and property suites (see docs/fakes.md).

The faulty communicators and their registry are re-exported here, so that
``from fake_backends import SumForMean, make, FAKES`` and the
``fake_backends:NAME`` factories of ``simdist check --backend`` work.

PYTEST_DONT_REWRITE: ``simdist run`` imports this package before the
program's pytest starts, and pytest would warn (an error under a
``filterwarnings = error`` configuration) that it cannot rewrite it.
"""

from __future__ import annotations

from . import faulty
from .faulty import *  # noqa: F401,F403 -- the names of faulty.__all__

__all__ = list(faulty.__all__)
