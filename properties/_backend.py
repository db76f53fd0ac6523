"""The backend under test: a persistent world, and the communicator to test on it.

A property runs a function on every rank with :meth:`Backend.run`, which
hands the function the communicator under test: the world's own (``sim`` or
``mpi``), or ``FACTORY(base)`` for a user's ``MODULE:FACTORY`` wrapping the
world's communicator. Worlds persist for the whole pytest session, one per
size, so every Hypothesis example of every property reuses them.
"""

from __future__ import annotations

from dataclasses import dataclass

import simdist
from simdist.reference import load_factory
from simdist.reference._focus import NAMED_FACTORIES, named_backend
from simdist.reference._ranks import target_of, unsupported

__all__ = ["Backend", "parse_spec", "under_test"]


def parse_spec(backend: str, factory: str | None = None) -> tuple[str, str | None]:
    """``(world backend, factory spec)`` from ``--simdist-backend`` and ``--simdist-factory``."""
    if backend in ("sim", "mpi"):
        return backend, factory
    if backend in NAMED_FACTORIES:  # torch-gloo, torch-nccl: a factory on the simulator's ranks
        return named_backend(backend, factory, "--simdist-backend")
    if ":" in backend and factory is None:
        load_factory(backend)            # fail now, with its message, not on every rank
        return "sim", backend
    raise simdist.InvalidValue(
        f"--simdist-backend={backend!r} must be sim, mpi, torch-gloo, torch-nccl or MODULE:FACTORY "
        "(with --simdist-factory MODULE:FACTORY to wrap mpi)")


def under_test(base, factory: str | None):
    """The communicator a property tests, on a rank."""
    return target_of(base, factory)


def _call(base, factory, fn, args):
    return fn(under_test(base, factory), *args)


@dataclass
class Backend:
    """``size`` ranks of ``kind`` (sim or mpi), testing ``factory(base)`` if given.

    A hang costs the world's timeout per call, and Hypothesis would repeat
    the failing call while shrinking it; so the first hang fails the test at
    once (``pytest.fail``, which Hypothesis does not shrink), and every later
    run on this backend fails at once, naming that hang. A rank that dies
    fails its test at once too (the world replaces it for the next test).
    """

    kind: str
    factory: str | None
    size: int
    world: simdist.World
    hung: str | None = None
    refused: str | None = None  # what the backend last said it does not support, in this test

    @property
    def name(self) -> str:
        return self.factory if self.kind == "sim" and self.factory else (
            f"{self.kind} + {self.factory}" if self.factory else self.kind)

    def run(self, fn, *args) -> list:
        """``fn(comm, *args)`` on every rank; the list of results by rank."""
        import pytest

        if self.hung is not None:
            pytest.fail(f"not run: {self.name} hung earlier ({self.hung})", pytrace=False)
        try:
            return self.world.run(_call, self.factory, fn, args)
        except simdist.CollectiveTimeout as hang:
            self.hung = str(hang).splitlines()[0]
            pytest.fail(f"{self.name} hung:\n{hang}", pytrace=False)
        except simdist.RankDied as death:    # nothing to shrink: fail now (the world recovers)
            pytest.fail(f"{self.name} lost a rank:\n{death}", pytrace=False)
        except simdist.RankError as error:
            refused = _refusal(error, self.size)
            if refused is None:
                raise
            self.refused = refused
            from hypothesis import reject
            from hypothesis.control import currently_in_test_context

            if currently_in_test_context():  # an example the backend cannot run: another one
                reject()
            pytest.skip(f"{self.name} does not support it: {refused}")


def _refusal(error: simdist.RankError, size: int) -> str | None:
    """The message of a call every rank refused as "not supported" (as
    ``simdist check`` reports a row unsupported), else None."""
    raised = error.exceptions
    if len(raised) != size or error.aborted or error.died:
        return None
    if all(unsupported(e) for e in raised.values()):
        return str(raised[min(raised)])
    return None
