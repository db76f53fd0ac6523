"""The simulator's driver: worker processes around one shared arena.

The driver owns the arena (``_arena``) and one pipe per worker. During a run
it watches three things at once: the pipes (results and log records), the
workers' ends (a pidfd per worker, see ``ProcessEnd``: a worker that died,
even while processes it started hold its pipes), and the arena's status
table (a rank that waits while no rank moves: a hang, which the run's
``HangWatch`` decides from the positions read there). To stop a failed run
it sets the abort word, which wakes every waiting rank; workers that have
not come back within the grace period are killed and replaced.

Each worker leads a process group of its own, which holds whatever its
rank's code starts (``os.fork``, ``subprocess``, ``multiprocessing``): when
a worker dies, is killed or replaced, or the world closes, the driver
SIGKILLs the whole group, and the janitor (``_janitor``) does it if the
driver itself is killed.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.process
import multiprocessing.reduction
import multiprocessing.util
import os
import pickle
import signal
import time
import weakref

from .. import _inherited
from .._driver import GRACE, Driver, ProcessEnd, finished
from .._interrupts import interrupts_deferred
from .._errors import Deadlock, RankDied, SimdistError
from .._janitor import end_group, janitor
from .._stdin import driver_stdin
from ._arena import Arena
from ._layout import (
    ABORT_DRIVER, CALL, H_ABORT, H_SYNC_SENDS, H_UNIVERSE_SIZE, S_CTX, S_P2P_KIND, S_P2P_PEER, S_POLLS, S_PROGRESS,
    S_STATE, USER, Layout,
)
from . import _spares as spares, _worker
from ._deadlock import deadlocked, release_buffered, wait_cycle
from ._p2p import SEND, SSEND
from ._report import call_location, short_call, whereabouts

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
    """One rank's worker process, its pipe, and its end (see ``ProcessEnd``)."""

    def __init__(self, process, conn):
        self.process = process
        self.conn = conn
        self.pid = process.pid
        self.end = ProcessEnd(process.pid)
        self.how: str | None = None  # how it ended, once stopped

    def stop(self) -> str:
        """End the worker and every process it started, reap it; return how it ended."""
        if self.how is None:
            end_group(self.pid)  # before reaping: the group's id is still the worker's
            self.end.kill()
            self.how = _reap(self.process, self.end)
            self.end.close()
            self.conn.close()
            janitor().unregister("group", self.pid)
        return self.how

    def release_inherited(self) -> None:
        self.conn.close()
        self.end.close()
        # Not the child's children: multiprocessing would SIGTERM them when
        # the child exits (it terminates the daemonic children it knows of).
        getattr(multiprocessing.process, "_children", set()).discard(self.process)


class SimDriver(Driver):
    def __init__(self, size: int, timeout: float, start_method: str, slot_bytes: int | None, order: str = "fold",
                 sync_sends: bool = False, universe: int | None = None):
        super().__init__()
        self.order = order
        self.size = size
        # The slots beyond the world's are spare: a rank's Spawn starts
        # processes there, during a run (``serve``).
        universe_size = 0  # MPI.UNIVERSE_SIZE: the slots
        if universe == spares.OVERSUBSCRIBE:
            universe, universe_size = size + spares.oversubscribed_spares(size), spares.host_slots()
        self.universe = universe or size
        self.timeout = timeout
        self.start_method = start_method
        self._mp = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            self._mp.set_forkserver_preload(["simdist.sim._worker"])
        self._layout = Layout(self.universe, slot_bytes, ranks=size)
        self.arena = Arena.create(self._layout)
        self.arena.q[H_SYNC_SENDS] = int(sync_sends)  # the ranks read it at each run
        self.arena.q[H_UNIVERSE_SIZE] = universe_size
        # Workers block on reading the lifeline; only the driver holds its
        # write end, so they see end-of-file when the driver dies, however
        # it dies and whatever their parent process is.
        self._lifeline = os.pipe()
        self._workers: list[_Worker | None] = [None] * self.universe
        self._spawned: list[int] = []  # the spare slots the current run has used, in order
        self._waiting_spawns: list[tuple] = []  # (rank, request, since): Spawns waiting for slots to free
        self.close = weakref.finalize(self, _shutdown, self._workers, self.arena, self._lifeline)
        _inherited.track(self)
        try:
            self._start(range(size))
            if start_method == "forkserver":  # the fork server's socket lives there
                janitor().register("path", multiprocessing.util.get_temp_dir())
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self._workers[: self.size]]

    def ranks(self) -> list[int]:
        return [*range(self.size), *self._spawned]

    def connection(self, rank: int):
        return self._workers[rank].conn

    def process_end(self, rank: int) -> ProcessEnd:
        return self._workers[rank].end

    def death(self, rank: int) -> str:
        return self._workers[rank].stop()

    def release_inherited(self, keep) -> None:
        """In a child forked from the driver (see ``_inherited``): keep only ``keep``."""
        if not self.close.detach():  # closed already: the numbers it held may be another's now
            return
        self.arena.release_inherited(keep)
        for fd in self._lifeline:
            _inherited.close_fd(fd, keep)
        for w in self._workers:
            if w is not None:
                w.release_inherited()

    def _start(self, ranks) -> None:
        lay = self._layout
        layout_args = lay.arguments()
        fd = _SharedFd(self.arena.fd)
        lifeline = _SharedFd(self._lifeline[0])
        # A forked child is born with SIGINT blocked until it ignores it; the
        # fork server's children are not (it serves other code too).
        started = []
        with interrupts_deferred(block=self.start_method != "forkserver"):
            for rank in ranks:
                parent, child = self._mp.Pipe()
                stdin = driver_stdin() if rank == 0 else None  # rank 0 reads the driver's, as under mpiexec
                proc = self._mp.Process(
                    target=_worker.main,
                    args=(rank, layout_args, fd, child, lifeline, self.order, None if stdin is None else _SharedFd(stdin)),
                    name=f"simdist-rank-{rank}",
                    daemon=True,
                )
                with _inherited.keeping((self.arena.fd, self._lifeline[0], child.fileno())):
                    proc.start()
                child.close()
                if stdin is not None:
                    os.close(stdin)
                self._workers[rank] = _Worker(proc, parent)
                started.append(rank)
            janitor().register("group", *(self._workers[rank].pid for rank in started))
        limit = max(self.timeout, 60.0)
        deadline = time.monotonic() + limit
        for rank in started:
            w = self._workers[rank]
            try:
                while not w.conn.poll(0.1):
                    if w.end.ended():
                        raise EOFError
                    if time.monotonic() > deadline:
                        raise SimdistError(f"rank {rank} did not start within {limit:.0f} s")
                msg = pickle.loads(w.conn.recv_bytes())
            except (EOFError, OSError):
                raise RankDied({rank: w.stop()}, " while the world was starting") from None
            assert msg[0] == "ready", msg

    # -- a run --------------------------------------------------------------------
    def run(self, payload_parts: tuple):
        return super().run((*payload_parts, list(range(self.size))))  # the world's members

    def prepare(self) -> None:
        gone = [r for r in range(self.size) if self._workers[r].end.ended()]
        if gone:  # died between runs: the last run had finished, so replace it
            for rank in gone:
                _log.warning("rank %d %s between runs; starting a new worker", rank, self._workers[rank].stop())
            self._start(gone)
        spares.end_run(self._workers, self._spawned)
        self._spawned, self._waiting_spawns = [], []
        self.arena.reset_control()
        spares.mark_spare(self.arena, range(self.size, self.universe))
        self._released = {}  # ranks released from a deadlock of the buffering check (``release_buffered``)

    def serve(self, rank: int, request: tuple, outcomes: dict) -> None:
        """A rank's ``Spawn``: start processes in spare slots (``_spares``),
        or wait for spawned processes to return and free theirs."""
        self._waiting_spawns.append((rank, request, time.monotonic()))
        self._serve_spawns(outcomes)

    def receive(self, outcomes: dict, dead: dict, timeout: float) -> None:
        super().receive(outcomes, dead, timeout)
        if self._waiting_spawns:
            self._serve_spawns(outcomes)

    def _serve_spawns(self, outcomes: dict) -> None:
        patience = min(self.timeout / 2, spares.PATIENCE)
        while self._waiting_spawns:
            rank, request, since = self._waiting_spawns[0]
            answer = spares.spawn(self, request, outcomes, waited=time.monotonic() - since >= patience)
            if answer is None:
                return
            del self._waiting_spawns[0]
            self._workers[rank].conn.send_bytes(pickle.dumps(answer))

    def start_spawned(self, slots: list[int], run_message: bytes) -> None:
        """Start a new worker in each of ``slots`` (spare, reset) and send it ``run_message``."""
        for slot in slots:
            if self._workers[slot] is not None:  # its last process has returned
                self._workers[slot].stop()
            self.arena.reset_rank(slot, USER)  # a rank now, before it starts: never a spare in a deadlock
            if slot not in self._spawned:
                self._spawned.append(slot)
        self._start(slots)
        for slot in slots:
            self._workers[slot].conn.send_bytes(run_message)

    def hang_report(self, outcomes):
        """A Deadlock as soon as no rank can move (``_deadlock``), else at the
        timeout: a Deadlock if the waiting ranks wait in a cycle, otherwise
        the report of a CollectiveTimeout."""
        returned = [finished(outcomes, r) for r in range(self.arena.size)]
        pids = {r: self._workers[r].pid for r in self.ranks()}
        return hang_verdict(self.arena, self.watch, self.ranks(), returned, self._released, pids)

    def abort(self, outcomes, dead) -> None:
        """Wake and unwind every rank still running; kill those that do not."""
        self.arena.q[H_ABORT] = ABORT_DRIVER
        self.arena.wake_all()
        deadline = time.monotonic() + GRACE
        while len(outcomes) + len(dead) < len(self.ranks()) and time.monotonic() < deadline:
            try:
                self.receive(outcomes, dead, 0.05)
            except KeyboardInterrupt:
                break
        stuck = [r for r in self.ranks() if r not in outcomes]
        for rank in stuck:
            self._workers[rank].stop()
        if restart := [r for r in stuck if r < self.size]:  # a spare slot starts again only when spawned
            self._start(restart)


def hang_verdict(arena: Arena, watch, ranks: list[int], returned: list[bool], released: dict, pids: dict):
    """What ``SimDriver.hang_report`` says, for the ranks ``ranks`` of
    ``arena`` (``returned[r]``: rank r has returned and waits for the rest;
    ``pids[r]``: its process): None, a Deadlock, or the per-rank report of a
    CollectiveTimeout."""
    positions = _positions(arena)
    at_once = deadlocked(arena)
    lay, q = arena.layout, arena.q
    running = {r: (pid, q[lay.status_word(r, S_POLLS)]) for r, pid in pids.items()
               if positions[r][0] == USER and not returned[r]}
    waited = watch.hung(positions, [p[0] == CALL or returned[r] for r, p in enumerate(positions)], running)
    if not at_once and waited is None:
        return None
    if at_once and release_buffered(arena, released):  # sends run synchronous for the buffering check
        return None
    if at_once:  # found within a poll of the last move: how long is not news
        waited = dict.fromkeys(ranks)
    chain, closed = wait_cycle(arena)
    if not at_once and not closed:
        # a rank that computes in its own code may still call: not a hang, as under mpiexec
        return None if watch.computing else {r: whereabouts(arena, r, w) for r, w in waited.items() if r in ranks}
    report = {r: whereabouts(arena, r, w) for r, w in waited.items() if r in ranks}
    cycle = [(r, short_call(arena, r)) for r in chain]
    locations = {r: where for r in chain if (where := call_location(arena, r))}
    return Deadlock(watch.timeout, report, cycle, closed, at_once, locations)


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
            sending = q[lay.status_word(r, S_P2P_KIND)] in (SEND, SSEND)
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


def _reap(proc, end: ProcessEnd, within: float = 5.0) -> str:
    """Wait for ``proc`` (being killed) to end, reap it; return how it ended.

    Not ``proc.join(timeout)``: that waits on multiprocessing's sentinel,
    which a process the worker started may hold open.
    """
    deadline = time.monotonic() + within
    while proc.is_alive():
        if time.monotonic() > deadline:
            return "stopped responding"
        if end.wait(0.05):  # ended; its parent (the fork server) may not have told yet
            time.sleep(0.001)
    proc.join()
    how = _how(proc)
    proc.close()
    return how


def _shutdown(workers: list, arena: Arena, lifeline: tuple[int, int]) -> None:
    """Stop the workers (politely, then by force) with whatever they
    started, and unmap the arena. A Ctrl-C meanwhile is delivered once all
    is stopped: a finalizer runs once, and one cut short would leave its
    processes behind."""
    with interrupts_deferred(block=False):
        live = [w for w in workers if w is not None and w.how is None]
        for w in live:
            try:
                w.conn.send_bytes(pickle.dumps(("exit",)))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 2.0
        for w in live:
            w.end.wait(max(0.0, deadline - time.monotonic()))
        for w in live:
            w.stop()
        arena.close()
        for fd in lifeline:
            os.close(fd)
