"""The simulator's driver: worker processes around one shared arena.

The driver owns the arena (``_arena``) and one pipe per worker. During a run
it watches three things at once: the pipes (results and log records), the
process sentinels (a worker that died), and the arena's status table (a
rank that waits while no rank moves: a hang, which the run's
``HangWatch`` decides from the positions read there). To stop a failed run
it sets the abort word, which wakes every waiting rank; workers that have
not come back within the grace period are killed and replaced.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.reduction
import os
import pickle
import signal
import time
import weakref

from .._driver import GRACE, Driver
from .._errors import RankDied, SimdistError
from .._stdin import driver_stdin
from ._arena import Arena
from ._layout import ABORT_DRIVER, CALL, H_ABORT, S_CTX, S_P2P_KIND, S_P2P_PEER, S_PROGRESS, S_STATE, Layout
from . import _worker
from ._p2p import SEND
from ._report import whereabouts

_log = logging.getLogger("simdist")
START_METHODS = ("fork", "forkserver", "spawn")


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


class SimDriver(Driver):
    def __init__(self, size: int, timeout: float, start_method: str, slot_bytes: int | None, order: str = "fold"):
        super().__init__()
        self.order = order
        self.size = size
        self.timeout = timeout
        self.start_method = start_method
        self._mp = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            self._mp.set_forkserver_preload(["simdist.sim._worker"])
        self._layout = Layout(size, slot_bytes)
        self.arena = Arena.create(self._layout)
        # Workers block on reading the lifeline; only the driver holds its
        # write end, so they see end-of-file when the driver dies, however
        # it dies and whatever their parent process is.
        self._lifeline = os.pipe()
        self._workers: list[_Worker | None] = [None] * size
        self.close = weakref.finalize(self, _shutdown, self._workers, self.arena, self._lifeline)
        try:
            self._start(range(size))
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self._workers]

    def connection(self, rank: int):
        return self._workers[rank].conn

    def death(self, rank: int) -> str:
        proc = self._workers[rank].process
        proc.join(1.0)
        return _how(proc)

    def _start(self, ranks) -> None:
        lay = self._layout
        layout_args = {"size": lay.size, "slot_bytes": lay.slot_bytes, "ring_bytes": lay.ring_bytes, "contexts": lay.contexts}
        fd = _SharedFd(self.arena.fd)
        lifeline = _SharedFd(self._lifeline[0])
        inherited = self._lifeline[1] if self.start_method == "fork" else None
        started = []
        for rank in ranks:
            parent, child = self._mp.Pipe()
            stdin = driver_stdin() if rank == 0 else None  # rank 0 reads the driver's, as under mpiexec
            proc = self._mp.Process(
                target=_worker.main,
                args=(rank, layout_args, fd, child, lifeline, inherited, self.order, None if stdin is None else _SharedFd(stdin)),
                name=f"simdist-rank-{rank}",
                daemon=True,
            )
            proc.start()
            child.close()
            if stdin is not None:
                os.close(stdin)
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

    # -- a run --------------------------------------------------------------------
    def prepare(self) -> None:
        gone = [r for r, w in enumerate(self._workers) if not w.process.is_alive()]
        if gone:  # died between runs: the last run had finished, so replace it
            for rank in gone:
                self._workers[rank].process.join(1.0)
                self._workers[rank].conn.close()
                _log.warning("rank %d %s between runs; starting a new worker", rank, _how(self._workers[rank].process))
            self._start(gone)
        self.arena.reset_control()

    def receive(self, outcomes, dead, timeout) -> None:
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
            self.drain(rank, outcomes, block=ready is w.conn)
            if rank not in outcomes and not w.process.is_alive():
                dead[rank] = self.death(rank)

    def hang_report(self, outcomes):
        positions = _positions(self.arena)
        waited = self.watch.hung(positions, [p[0] == CALL for p in positions])
        if waited is None:
            return None
        return {r: whereabouts(self.arena, r, w) for r, w in waited.items()}

    def abort(self, outcomes, dead) -> None:
        """Wake and unwind every rank still running; kill those that do not."""
        self.arena.q[H_ABORT] = ABORT_DRIVER
        self.arena.wake_all()
        deadline = time.monotonic() + GRACE
        while len(outcomes) + len(dead) < self.size and time.monotonic() < deadline:
            try:
                self.receive(outcomes, dead, 0.05)
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


def _positions(arena: Arena) -> list[tuple]:
    """Each rank's position for the hang watch: its state, its calls
    completed, its current call's context and what moves in that call."""
    lay, q = arena.layout, arena.q
    positions = []
    for r in range(arena.size):
        ctx = q[lay.status_word(r, S_CTX)]
        if ctx >= 0:  # a phase of a collective completes
            moved = q[lay.arrive_word(r, ctx)]
        else:  # bytes of a message stream through a ring
            peer = q[lay.status_word(r, S_P2P_PEER)]
            sending = q[lay.status_word(r, S_P2P_KIND)] == SEND
            moved = q[lay.pair_word(r, peer)] if sending else q[lay.pair_word(peer, r) + 1]
        positions.append((q[lay.status_word(r, S_STATE)], q[lay.status_word(r, S_PROGRESS)], ctx, moved))
    return positions


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
