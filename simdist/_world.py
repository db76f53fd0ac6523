"""Worlds: a driver and its persistent rank processes, behind one facade.

``World`` checks its arguments, pickles the function of a run, hands the run
to the backend's driver (``sim._driver`` for the simulator) and turns the
per-rank outcomes into a list of return values or one exception.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import threading
from typing import Any, Callable

from . import _pickling, checks as _checks
from ._driver import log_levels
from ._errors import (
    ChecksFailed, CollectiveMismatch, CollectiveTimeout, Deadlock, InvalidType, InvalidValue, RankDied, RankError, SimdistError,
)
from ._orders import ORDERS
from .sim._driver import START_METHODS, SimDriver
from .sim._spares import OVERSUBSCRIBE

__all__ = ["World", "run"]


class World:
    """``size`` ranks in persistent worker processes; a context manager.

    ``run(fn, *args, **kwargs)`` runs ``fn(comm, *args, **kwargs)`` on every
    rank and returns the list of return values, indexed by rank. ``fn`` may
    be a lambda or a closure (it travels by cloudpickle); its arguments and
    return values are pickled, while the arrays of collectives travel through
    shared memory.

    ``timeout`` bounds, in seconds, how long the ranks may go without any
    progress while one of them waits in a communication call (on the
    simulator, also while all of them wait outside MPI: they sleep, block
    or poll); the run then raises :class:`CollectiveTimeout`. Ranks that
    all compute in user code are never timed out; on the simulator neither
    are ranks that wait for a peer that computes (uses a CPU), while on the
    MPI backend a rank that computes for longer than ``timeout`` while a
    peer waits for it is reported. Once a rank has failed, the
    others get a grace period of a few seconds to finish before they are
    stopped. ``start_method`` is one of ``fork`` (the default: fastest,
    and scripts need no ``if __name__ == "__main__"`` guard), ``forkserver``
    and ``spawn`` (which, as in multiprocessing, re-import the main module
    in each worker, so scripts need that guard); results are the same, to
    the bit, with any.
    ``slot_bytes`` sets each rank's shared buffer: larger messages are cut
    into chunks of that size, so the world's shared memory stays bounded.

    ``backend="mpi"`` runs the same functions on real MPI: ``mpiexec``
    (``mpiexec=`` or ``$SIMDIST_MPIEXEC``, else the one beside this Python,
    else the first on ``PATH``) starts the ranks, each with an ``MpiComm``
    over ``MPI_COMM_WORLD``; ``start_method`` and ``slot_bytes`` do not
    apply. A failed run ends the MPI job (a rank blocked in MPI cannot be
    unwound) and the next run starts a new one. ``check_calls=True`` makes
    the MPI ranks compare every collective's signature before running it
    (like ``TORCH_DISTRIBUTED_DEBUG=DETAIL``), so mismatched calls raise
    :class:`CollectiveMismatch` instead of hanging; the simulator always
    does. ``hosts`` (names, or one comma-separated string), ``hostfile`` and
    ``launcher`` (a command used instead of ``mpiexec``, such as ``"srun
    --mpi=pmix"``) spread the ranks over machines; the driver then listens
    on ``listen`` (``"ADDR[:PORT]"``) or on the address that routes to the
    first remote host (docs/mpi.md, "Running on a cluster"). Inside a job
    started by an MPI launcher, a World of the backend joins that job
    instead of starting one.

    ``order`` names the simulator's reduction order: ``"fold"`` (the
    canonical rank-ascending left fold), or the order of an algorithm of
    real MPI libraries, ``"ring"`` or ``"recursive_doubling"`` (see
    :mod:`simdist.reference`), to compare a backend pinned to that
    algorithm bit for bit. Every order is deterministic.

    ``sync_sends=True`` makes every ``send`` synchronous, as MPI's
    ``Ssend``: it returns only once the matching ``recv`` has taken the
    message (a message another ``recv`` only set aside, for another tag,
    is not taken). A program that relies on sends being buffered, such as
    a ring where every rank sends before it receives, then deadlocks at
    every message size, as it would on MPI above the eager limit, instead
    of passing here and hanging on a cluster. The default (False) buffers
    a send while the message fits in the ring to its destination (up to
    1 MiB). On the MPI backend ``send`` then uses ``Ssend``.

    A run in which every rank that has not returned waits for another (a
    deadlock) raises :class:`Deadlock`, a CollectiveTimeout naming the
    wait-for cycle: on the simulator as soon as no rank can move, on MPI
    at the timeout.

    ``universe`` (simulator only) maps that many slots, ``size`` of them
    the world's and the rest spare: a rank's ``Spawn`` in the simulated
    mpi4py starts processes there during a run (docs/mpi4py.md, "Spawning
    processes"). The default is ``size``: no spare slot. ``"oversubscribe"``
    (what ``simdist run`` uses without ``--universe``) spawns as ``mpiexec
    --oversubscribe`` does on one host: spare slots (at least 32, twice
    ``size`` where more) and ``MPI.UNIVERSE_SIZE`` the CPUs this process may
    use, as Open MPI counts a host's slots; under MPI it is mpiexec's own.

    ``check`` turns on the correctness checks of ``simdist run --check``
    (docs/correctness.md): True for all, or a LIST (``"deadlock,buffering"``,
    ``"all,-race"``) or an iterable of kinds. ``buffering`` implies
    ``sync_sends=True``, ``collective-order`` implies ``check_calls=True``.
    A run in which they find anything raises :class:`ChecksFailed`, whose
    ``findings`` list each ``simdist.checks.Finding`` (a deadlock's cycle,
    sends that rely on buffering, what the simulated mpi4py's checks found
    inside ``fn``), with the error the run raised as its ``__cause__`` or,
    when the run succeeded, its return values in ``results``.

    One World runs one function at a time: ``run`` called from several
    threads runs their functions one after the other, in the order the
    threads get the world, and ``close`` from another thread waits for the
    current run to end. ``run`` called from inside a run of the same world
    (a logging handler that calls it) raises SimdistError.
    """

    def __init__(
        self,
        size: int,
        backend: str = "sim",
        timeout: float = 60.0,
        *,
        start_method: str | None = None,
        slot_bytes: int | None = None,
        mpiexec: str | None = None,
        check_calls: bool = False,
        order: str = "fold",
        hosts=None,
        hostfile=None,
        launcher=None,
        listen=None,
        sync_sends: bool = False,
        check=None,
        universe: int | None = None,
    ):
        self.checks = _check_kinds(check)
        if "buffering" in self.checks and sync_sends is False:  # a send may not rely on buffering
            sync_sends = True
        check_calls = check_calls or "collective-order" in self.checks
        if isinstance(size, bool) or not isinstance(size, int):
            raise InvalidType(f"World(size={size!r}): size must be an int >= 1")
        if size < 1:
            raise InvalidValue(f"World(size={size}): size must be >= 1")
        if slot_bytes is not None:
            if isinstance(slot_bytes, bool) or not isinstance(slot_bytes, int):
                raise InvalidType(f"World(slot_bytes={slot_bytes!r}): slot_bytes must be an int number of bytes")
            if slot_bytes < 4096:
                raise InvalidValue(f"World(slot_bytes={slot_bytes}): slot_bytes must be >= 4096")
        if backend not in ("sim", "mpi"):
            raise InvalidValue(f"World(backend={backend!r}): unknown backend; use 'sim' or 'mpi'")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InvalidValue(f"World(timeout={timeout!r}): timeout must be a number of seconds > 0")
        if not isinstance(sync_sends, bool):
            raise InvalidType(f"World(sync_sends={sync_sends!r}): sync_sends must be True or False")
        if universe not in (None, OVERSUBSCRIBE) and (isinstance(universe, bool) or not isinstance(universe, int)
                                                      or universe < size):
            raise InvalidValue(f"World(universe={universe!r}): the universe is the world's {size} slots and the spare "
                               f"ones its ranks can spawn processes into: an int >= size, or {OVERSUBSCRIBE!r}")
        start_method = start_method or "fork"
        if start_method not in START_METHODS:
            raise InvalidValue(f"World(start_method={start_method!r}): use one of {', '.join(START_METHODS)}")
        self.size = size
        self.backend = backend
        self.timeout = float(timeout)
        self.start_method = start_method
        self.sync_sends = sync_sends
        self._closed = False
        self._turn = threading.Lock()  # one run (or close) at a time
        self._runner: int | None = None  # the thread running, for re-entry
        hosted = dict(hosts=hosts, hostfile=hostfile, launcher=launcher, listen=listen)
        if backend == "mpi":
            if universe not in (None, size, OVERSUBSCRIBE):
                raise InvalidValue("World(universe=): the simulator's spare slots; under MPI, mpiexec's hosts and "
                                   "slots make the universe")
            from .mpi import driver  # imported only when used

            self._driver = driver(size, self.timeout, mpiexec, check_calls=check_calls, sync_sends=sync_sends,
                                  **hosted)
        else:
            if any(v is not None for v in hosted.values()):
                raise InvalidValue("World(hosts=, hostfile=, launcher=, listen=): these place MPI ranks; use backend='mpi'")
            if order not in ORDERS:
                raise InvalidValue(f"World(order={order!r}): use one of {', '.join(ORDERS)}")
            self._driver = SimDriver(size, self.timeout, start_method, slot_bytes, order, sync_sends, universe)

    def close(self) -> None:
        """Stop every worker and release the shared memory. Idempotent."""
        if self._closed:
            return
        if self._runner == threading.get_ident():
            raise SimdistError("World.close: called from inside a run of this world")
        with self._turn:
            if self._closed:
                return
            self._closed = True
            self._driver.close()

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<World size={self.size} backend={self.backend!r} {state}>"

    @property
    def pids(self) -> list[int]:
        """The process ids of the ranks' workers, by rank."""
        return self._driver.pids

    # -- running ----------------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args, **kwargs) -> list[Any]:
        """Run ``fn(comm, *args, **kwargs)`` on every rank; return the values by rank.

        Raises RankError, CollectiveMismatch, CollectiveTimeout or RankDied
        (all SimdistError) when the run fails; the world stays usable.
        """
        if not callable(fn):
            raise InvalidType(f"World.run: fn={fn!r} is not callable")
        if self._runner == threading.get_ident():
            raise SimdistError(
                "World.run: called from inside a run of this world (from a logging handler?); "
                "a world runs one function at a time"
            )
        if self.checks:
            return self._run_checked(fn, args, kwargs)
        return self._run(fn, args, kwargs)

    def _run_checked(self, fn, args, kwargs) -> list[Any]:
        """``run`` with the checks on in every rank; raise ChecksFailed if they find anything."""
        with _checks.FindingsDir() as found:
            try:
                results = self._run(_checked_call, (fn, self.checks, found.path, args, kwargs), {})
            except SimdistError as exc:
                findings = found.collect(_checks.findings_of(exc, self.checks))
                if findings:
                    raise ChecksFailed(self._report(findings), findings) from exc
                raise
            findings = found.collect()
        if findings:
            raise ChecksFailed(self._report(findings), findings, results)
        return results

    def _report(self, findings) -> str:
        return "World.run: " + _checks.render(findings, self.checks)

    def _run(self, fn, args, kwargs) -> list[Any]:
        try:
            payload = _pickling.dumps((fn, args, kwargs))
        except Exception as exc:
            raise InvalidType(f"World.run: cannot pickle the function or its arguments: {exc}") from exc
        with self._turn:
            if self._closed:
                raise SimdistError("World.run: the world is closed")
            self._runner = threading.get_ident()
            try:
                outcomes, dead, report = self._driver.run((payload, list(sys.path), os.getcwd(), log_levels()))
            finally:
                self._runner = None
        return self._verdict(outcomes, dead, report)

    def _verdict(self, outcomes, dead, report):
        results = {r: _result(r, data) for r, (kind, data) in outcomes.items() if kind == "ok"}
        for rank, result in results.items():  # a value that cannot be rebuilt here fails its rank
            if isinstance(result, _Unreadable):
                outcomes[rank] = ("error", (result.traceback, None))
        errors = {r: data for r, (kind, data) in outcomes.items() if kind == "error"}
        if dead and not errors:
            raise RankDied(dead, " during World.run; the world has replaced it")
        if isinstance(report, Deadlock):
            raise report
        if report is not None:
            raise CollectiveTimeout(self.timeout, report)
        mismatches = {r: data for r, (kind, data) in outcomes.items() if kind == "mismatch"}
        if mismatches:
            message, calls = mismatches[min(mismatches)][:2]
            sites = [f"  rank {r} of the run called it at {data[3]}" for r, data in sorted(mismatches.items()) if data[3]]
            raise CollectiveMismatch("\n".join([message, *sites]), calls)
        if errors:  # ranks without an outcome were stopped after the grace period
            aborted = [r for r in range(self.size) if r not in dead and (r not in outcomes or outcomes[r][0] == "aborted")]
            exceptions = {r: _unpickle(exc) for r, (_, exc) in errors.items()}
            raise RankError({r: tb for r, (tb, _) in errors.items()}, exceptions, aborted, dead)
        if any(kind == "aborted" for kind, _ in outcomes.values()):
            raise SimdistError("the run was aborted")  # pragma: no cover - needs a failure above
        return [results[r] for r in range(self.size)]


def _check_kinds(check) -> frozenset[str]:
    """The kinds of ``World(check=...)``: True (all), a LIST string, an iterable of names."""
    if check is None or check is False:
        return frozenset()
    if check is True:
        return _checks.parse(None)
    if isinstance(check, str):
        text = check
    else:
        try:
            names = list(check)
        except TypeError:
            raise InvalidType(f"World(check={check!r}): use True, a LIST string such as 'deadlock,buffering', "
                              "or an iterable of kinds") from None
        if not all(isinstance(n, str) for n in names) or not names:
            raise InvalidType(f"World(check={check!r}): give the kinds as strings, e.g. ['deadlock', 'buffering']")
        text = ",".join(names)
    try:
        return _checks.parse(text)
    except ValueError as exc:
        raise InvalidValue(f"World(check={check!r}): {exc}".replace("--check: ", "")) from None


def _checked_call(comm, fn, kinds, directory, args, kwargs):
    """A rank's part of a checked run: ``fn`` with the checks on."""
    with _checks.active(kinds, directory, comm.rank):
        return fn(comm, *args, **kwargs)


class _Unreadable:
    """A rank's return value that the driver could not unpickle."""

    def __init__(self, traceback: str):
        self.traceback = traceback


def _result(rank: int, data: bytes):
    """Rank ``rank``'s return value, or _Unreadable if unpickling it raises
    (anything but Ctrl-C: a ``__reduce__`` may even call ``sys.exit``)."""
    try:
        return pickle.loads(data)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return _Unreadable(
            f"rank {rank} returned a value that the driver cannot unpickle: {type(exc).__name__}: {exc}\n"
            "(return plain data: numbers, strings, numpy arrays, or objects importable in the driver)\n"
        )


class _DriverUnpickler(pickle.Unpickler):
    """Refuses mpi4py's classes: importing ``mpi4py.MPI`` would start MPI in
    the driver (and leave a segment in /dev/shm)."""

    def find_class(self, module, name):
        if module.split(".")[0] == "mpi4py":
            raise pickle.UnpicklingError(f"{module}.{name} is not unpickled in the driver")
        return super().find_class(module, name)


def _unpickle(data):
    """A rank's exception, or None where it cannot be rebuilt here (the
    traceback text always reaches the driver)."""
    if data is None:
        return None
    try:
        return _DriverUnpickler(io.BytesIO(data)).load()
    except Exception:
        return None


def run(
    fn: Callable[..., Any],
    size: int,
    *args,
    backend: str = "sim",
    timeout: float = 60.0,
    start_method: str | None = None,
    slot_bytes: int | None = None,
    mpiexec: str | None = None,
    check_calls: bool = False,
    order: str = "fold",
    hosts=None,
    hostfile=None,
    launcher=None,
    listen=None,
    sync_sends: bool = False,
    check=None,
    **kwargs,
) -> list[Any]:
    """Run ``fn(comm, *args, **kwargs)`` once on a new world of ``size`` ranks.

    The keyword arguments named like :class:`World`'s configure the world;
    all others are passed to ``fn``.
    """
    options = dict(start_method=start_method, slot_bytes=slot_bytes, mpiexec=mpiexec, check_calls=check_calls,
                   order=order, sync_sends=sync_sends, check=check, hosts=hosts, hostfile=hostfile, launcher=launcher,
                   listen=listen)
    with World(size, backend=backend, timeout=timeout, **options) as world:
        return world.run(fn, *args, **kwargs)
