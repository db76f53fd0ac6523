"""Worlds: a driver and its persistent rank processes.

The driver owns the arena (``sim._arena``) and one pipe per worker. A run
sends the pickled function to every worker and then watches three things at
once: the pipes (results and log records), the process sentinels (a worker
that died), and the arena's status table (a rank that waits and no rank that
moves: a hang). Any failure aborts the run -- the abort word wakes every
waiting rank -- and workers that do not come back within a grace period are
killed and replaced, so the world is usable again.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.reduction
import os
import pickle
import signal
import sys
import time
import weakref
from typing import Any, Callable

import cloudpickle

from . import _worker
from ._errors import CollectiveMismatch, CollectiveTimeout, InvalidType, InvalidValue, RankDied, RankError, SimdistError
from .sim._arena import ABORT_DRIVER, CALL, H_ABORT, S_CTX, S_P2P_KIND, S_P2P_PEER, S_PROGRESS, S_STATE, Arena, Layout
from .sim._p2p import SEND
from .sim._report import whereabouts

__all__ = ["World", "run"]

_log = logging.getLogger("simdist")
START_METHODS = ("fork", "forkserver", "spawn")
_GRACE = 2.0  # seconds aborted ranks get to unwind before they are killed
_POLL = 0.05  # seconds between looks at the status table


class _SharedFd:
    """A file descriptor that survives pickling into a new process."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        return _SharedFd._rebuild, (multiprocessing.reduction.DupFd(self.fd),)

    @staticmethod
    def _rebuild(dup):
        return _SharedFd(dup.detach())


class _Worker:
    def __init__(self, process, conn):
        self.process = process
        self.conn = conn
        self.pid = process.pid


class World:
    """``size`` ranks in persistent worker processes; a context manager.

    ``run(fn, *args, **kwargs)`` runs ``fn(comm, *args, **kwargs)`` on every
    rank and returns the list of return values, indexed by rank. ``fn`` may
    be a lambda or a closure (it travels by cloudpickle); its arguments and
    return values are pickled, while the arrays of collectives travel through
    shared memory.

    ``timeout`` bounds, in seconds, how long the ranks may go without any
    progress while one of them waits in a communication call; the run then
    raises :class:`CollectiveTimeout`. Ranks that all compute in user code
    are never timed out; a rank that computes for longer than ``timeout``
    while a peer waits for it is reported. Once a rank has failed, the
    others get a grace period of a few seconds to finish before they are
    stopped. ``start_method`` is one of ``fork`` (the default: fastest,
    and scripts need no ``if __name__ == "__main__"`` guard), ``forkserver``
    and ``spawn`` (which, as in multiprocessing, re-import the main module
    in each worker, so scripts need that guard); results are the same, to
    the bit, with any.
    ``slot_bytes`` sets each rank's shared buffer: larger messages are cut
    into chunks of that size, so the world's shared memory stays bounded.
    """

    def __init__(
        self,
        size: int,
        backend: str = "sim",
        timeout: float = 60.0,
        *,
        start_method: str | None = None,
        slot_bytes: int | None = None,
    ):
        if isinstance(size, bool) or not isinstance(size, int):
            raise InvalidType(f"World(size={size!r}): size must be an int >= 1")
        if size < 1:
            raise InvalidValue(f"World(size={size}): size must be >= 1")
        if slot_bytes is not None:
            if isinstance(slot_bytes, bool) or not isinstance(slot_bytes, int):
                raise InvalidType(f"World(slot_bytes={slot_bytes!r}): slot_bytes must be an int number of bytes")
            if slot_bytes < 4096:
                raise InvalidValue(f"World(slot_bytes={slot_bytes}): slot_bytes must be >= 4096")
        if backend != "sim":
            raise InvalidValue(f"World(backend={backend!r}): unknown backend; use backend='sim'")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise InvalidValue(f"World(timeout={timeout!r}): timeout must be a number of seconds > 0")
        start_method = start_method or "fork"
        if start_method not in START_METHODS:
            raise InvalidValue(f"World(start_method={start_method!r}): use one of {', '.join(START_METHODS)}")
        self.size = size
        self.backend = backend
        self.timeout = float(timeout)
        self.start_method = start_method
        self._mp = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            self._mp.set_forkserver_preload(["simdist._worker"])
        self._layout = Layout(size, slot_bytes)
        self._arena = Arena.create(self._layout)
        # Workers block on reading the lifeline; only the driver holds its
        # write end, so they see end-of-file when the driver dies, however
        # it dies and whatever their parent process is.
        self._lifeline = os.pipe()
        self._workers: list[_Worker | None] = [None] * size
        self._run_id = 0
        self._closed = False
        self._finalizer = weakref.finalize(self, _shutdown, self._workers, self._arena, self._lifeline)
        try:
            self._start(range(size))
        except BaseException:
            self.close()
            raise

    # -- lifecycle ------------------------------------------------------------
    def _start(self, ranks) -> None:
        layout_args = {"size": self._layout.size, "slot_bytes": self._layout.slot_bytes, "ring_bytes": self._layout.ring_bytes, "contexts": self._layout.contexts}
        fd = _SharedFd(self._arena.fd)
        lifeline = _SharedFd(self._lifeline[0])
        inherited = self._lifeline[1] if self.start_method == "fork" else None
        started = []
        for rank in ranks:
            parent, child = self._mp.Pipe()
            proc = self._mp.Process(
                target=_worker.main,
                args=(rank, layout_args, fd, child, lifeline, inherited),
                name=f"simdist-rank-{rank}",
                daemon=True,
            )
            proc.start()
            child.close()
            self._workers[rank] = _Worker(proc, parent)
            started.append(rank)
        limit = max(self.timeout, 60.0)
        deadline = time.monotonic() + limit
        for rank in started:
            w = self._workers[rank]
            try:
                while not w.conn.poll(0.1):
                    if not w.process.is_alive():
                        raise EOFError
                    if time.monotonic() > deadline:
                        raise SimdistError(f"rank {rank} did not start within {limit:.0f} s")
                msg = pickle.loads(w.conn.recv_bytes())
            except (EOFError, OSError):
                w.process.join(5.0)
                raise RankDied({rank: _how(w.process)}, " while the world was starting") from None
            assert msg[0] == "ready", msg

    def close(self) -> None:
        """Stop every worker and release the shared memory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()

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
        return [w.pid for w in self._workers]

    # -- running ----------------------------------------------------------------
    def run(self, fn: Callable[..., Any], *args, **kwargs) -> list[Any]:
        """Run ``fn(comm, *args, **kwargs)`` on every rank; return the values by rank.

        Raises RankError, CollectiveMismatch, CollectiveTimeout or RankDied
        (all SimdistError) when the run fails; the world stays usable.
        """
        if self._closed:
            raise SimdistError("World.run: the world is closed")
        if not callable(fn):
            raise InvalidType(f"World.run: fn={fn!r} is not callable")
        try:
            payload = cloudpickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise InvalidType(f"World.run: cannot pickle the function or its arguments: {exc}") from exc
        gone = [r for r, w in enumerate(self._workers) if not w.process.is_alive()]
        if gone:  # died between runs: replace quietly, the last run had finished
            for rank in gone:
                self._workers[rank].process.join(1.0)
                self._workers[rank].conn.close()
                _log.warning("rank %d %s between runs; starting a new worker", rank, _how(self._workers[rank].process))
            self._start(gone)
        self._arena.reset_control()
        self._run_id += 1
        message = pickle.dumps(("run", self._run_id, payload, list(sys.path), os.getcwd(), _log_levels()))
        dead: dict[int, str] = {}
        for rank, w in enumerate(self._workers):
            try:
                w.conn.send_bytes(message)
            except OSError:  # it died since the check above
                w.process.join(1.0)
                dead[rank] = _how(w.process)
        return self._collect(dead)

    def _collect(self, dead: dict[int, str]) -> list[Any]:
        size = self.size
        outcomes: dict[int, tuple] = {}
        watch = _HangWatch(self._arena, self.timeout)
        report = None
        failed_at = None  # when the first rank failed: the others get a grace period
        try:
            while len(outcomes) + len(dead) < size:
                self._receive(outcomes, dead, _POLL)
                if dead:
                    break
                report = watch.check()
                if report is not None:
                    break
                if failed_at is None and any(kind != "ok" for kind, _ in outcomes.values()):
                    failed_at = time.monotonic()
                if failed_at is not None and time.monotonic() - failed_at > _GRACE:
                    break  # the run has failed; ranks still in user code are stopped
        except BaseException:  # Ctrl-C in the driver: stop the ranks, then re-raise
            self._abort(outcomes, dead)
            raise
        if len(outcomes) + len(dead) < size:
            self._abort(outcomes, dead)
        return self._verdict(outcomes, dead, report)

    def _receive(self, outcomes, dead, timeout) -> None:
        waiting = {}
        for rank, w in enumerate(self._workers):
            if rank not in outcomes and rank not in dead:
                waiting[w.conn] = rank
                waiting[w.process.sentinel] = rank
        for ready in multiprocessing.connection.wait(list(waiting), timeout):
            rank = waiting[ready]
            if rank in outcomes or rank in dead:
                continue
            w = self._workers[rank]
            if ready is w.process.sentinel:
                self._drain(rank, outcomes)
                if rank not in outcomes:
                    w.process.join(1.0)
                    dead[rank] = _how(w.process)
                continue
            self._drain(rank, outcomes, block=True)
            if rank not in outcomes and not w.process.is_alive():
                w.process.join(1.0)
                dead[rank] = _how(w.process)

    def _drain(self, rank, outcomes, block=False) -> None:
        """Handle every message waiting on ``rank``'s pipe."""
        conn = self._workers[rank].conn
        try:
            while rank not in outcomes and (block or conn.poll()):
                block = False
                msg = pickle.loads(conn.recv_bytes())
                if msg[0] == "log":
                    _dispatch_log(rank, msg[1])
                elif msg[0] == "done" and msg[1] == self._run_id:  # not a stale answer
                    outcomes[rank] = msg[2:]
        except (EOFError, OSError):
            pass

    def _abort(self, outcomes, dead) -> None:
        """Wake and unwind every rank still running; kill those that do not."""
        arena = self._arena
        arena.q[H_ABORT] = ABORT_DRIVER
        arena.wake_all()
        deadline = time.monotonic() + _GRACE
        while len(outcomes) + len(dead) < self.size and time.monotonic() < deadline:
            try:
                self._receive(outcomes, dead, 0.05)
            except KeyboardInterrupt:
                break
        stuck = [r for r in range(self.size) if r not in outcomes]
        for rank in stuck:
            proc = self._workers[rank].process
            if proc.is_alive():
                proc.kill()
            proc.join(5.0)
            self._workers[rank].conn.close()
        if stuck:
            self._start(stuck)

    def _verdict(self, outcomes, dead, report):
        if dead:
            raise RankDied(dead, " during World.run; the world has replaced it")
        if report is not None:
            raise CollectiveTimeout(self.timeout, report)
        mismatches = {r: data for r, (kind, data) in outcomes.items() if kind == "mismatch"}
        if mismatches:
            first = min(mismatches)
            message, calls, _ = mismatches[first]
            raise CollectiveMismatch(message, calls)
        errors = {r: data for r, (kind, data) in outcomes.items() if kind == "error"}
        if errors:
            aborted = [r for r, (kind, _) in outcomes.items() if kind == "aborted"]
            exceptions = {r: _unpickle(exc) for r, (_, exc) in errors.items()}
            raise RankError({r: tb for r, (tb, _) in errors.items()}, exceptions, aborted)
        if any(kind == "aborted" for kind, _ in outcomes.values()):
            raise SimdistError("the run was aborted")  # pragma: no cover - needs a failure above
        return [pickle.loads(outcomes[r][1]) for r in range(self.size)]


class _HangWatch:
    """Decides when a run is hung: a rank waits in a call and no rank has
    moved (state, calls completed, current context) for ``timeout`` seconds."""

    def __init__(self, arena: Arena, timeout: float):
        self.arena = arena
        self.timeout = timeout
        self.last = None
        self.since = time.monotonic()
        self.rank_since: dict[int, float] = {}

    def check(self) -> dict[int, str] | None:
        arena, lay = self.arena, self.arena.layout
        q = arena.q
        now = time.monotonic()
        snapshot = []
        for r in range(arena.size):
            ctx = q[lay.status_word(r, S_CTX)]
            if ctx >= 0:  # a phase of a collective completes
                moved = q[lay.arrive_word(r, ctx)]
            else:  # bytes of a message stream through a ring
                peer = q[lay.status_word(r, S_P2P_PEER)]
                sending = q[lay.status_word(r, S_P2P_KIND)] == SEND
                moved = q[lay.pair_word(r, peer)] if sending else q[lay.pair_word(peer, r) + 1]
            snapshot.append((q[lay.status_word(r, S_STATE)], q[lay.status_word(r, S_PROGRESS)], ctx, moved))
        if self.last is None or snapshot != self.last:
            for r, (old, new) in enumerate(zip(self.last or [None] * len(snapshot), snapshot)):
                if old != new:
                    self.rank_since[r] = now
            self.last = snapshot
            self.since = now
            return None
        if now - self.since < self.timeout or not any(s[0] == CALL for s in snapshot):
            return None
        return {r: whereabouts(arena, r, now - self.rank_since.get(r, self.since) if s[0] == CALL else None)
                for r, s in enumerate(snapshot)}


def _how(proc) -> str:
    code = proc.exitcode
    if code is None:
        return "stopped responding"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _unpickle(data):
    if data is None:
        return None
    try:
        return pickle.loads(data)
    except Exception:
        return None


def _log_levels() -> dict[str, int]:
    levels = {"": logging.getLogger().getEffectiveLevel()}
    for name, logger in logging.root.manager.loggerDict.items():
        if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
            levels[name] = logger.level
    return levels


def _dispatch_log(rank: int, record: logging.LogRecord) -> None:
    record.rank = rank
    record.msg = f"[rank {rank}] {record.msg}"
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


def _shutdown(workers: list, arena: Arena, lifeline: tuple[int, int]) -> None:
    """Stop the workers (politely, then by force) and unmap the arena."""
    live = [w for w in workers if w is not None]
    for w in live:
        try:
            w.conn.send_bytes(pickle.dumps(("exit",)))
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + 2.0
    for w in live:
        w.process.join(max(0.0, deadline - time.monotonic()))
        if w.process.is_alive():
            w.process.kill()
            w.process.join(5.0)
        w.conn.close()
    arena.close()
    for fd in lifeline:
        os.close(fd)


def run(
    fn: Callable[..., Any],
    size: int,
    *args,
    backend: str = "sim",
    timeout: float = 60.0,
    start_method: str | None = None,
    slot_bytes: int | None = None,
    **kwargs,
) -> list[Any]:
    """Run ``fn(comm, *args, **kwargs)`` once on a new world of ``size`` ranks.

    The keyword arguments named like :class:`World`'s configure the world;
    all others are passed to ``fn``.
    """
    with World(size, backend=backend, timeout=timeout, start_method=start_method, slot_bytes=slot_bytes) as world:
        return world.run(fn, *args, **kwargs)
