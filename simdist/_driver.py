"""What every backend's driver does during a run.

A driver owns ``size`` rank processes, each reachable over a connection
(a ``multiprocessing`` Connection). A run sends one message to every rank
and then collects, rank by rank, an outcome ``(kind, data)`` -- ``ok``,
``error``, ``mismatch`` or ``aborted`` -- while handing the log records the
ranks send to the driver's loggers. Backends differ in how they notice a
dead rank, a hang, and how they stop a run that failed: the methods left to
subclasses.

Once a rank has failed, the others get a grace period (``GRACE``) to finish
on their own; ranks still running then are stopped. So a failure never hangs
the driver, even when a peer of the failed rank computes forever.

A run is hung when a rank waits in a call, or every rank waits outside
MPI, and no rank has moved for ``timeout`` seconds: each run has a
:class:`HangWatch`, to which the backend's ``hang_report`` shows the
ranks' positions as it reads them. A rank running its own code moves
while it computes (``CpuUse``): a peer that waits for it is not hung, as
under ``mpiexec``, while one that sleeps, blocks, polls or waits outside
any call is still found.

A rank is dead when its process has ended (:class:`ProcessEnd`), not when
its pipes close: processes that the rank's code started hold copies of
them. Worlds belong to the process that opened them: a child forked from
it cannot run them (see :mod:`simdist._inherited`).
"""

from __future__ import annotations

import logging
import multiprocessing.connection
import os
import pickle
import select
import signal
import time
from typing import Sequence

from ._errors import SimdistError
from ._interrupts import keep_interrupts

GRACE = 2.0  # seconds the other ranks get after a failure
POLL = 0.05  # seconds between looks for a hang
#: A rank running its own code computes (moves) while it uses at least this
#: share of a CPU between two looks at its CPU time...
COMPUTING = 0.1
#: ...which are this many seconds apart at least: the kernel counts CPU time
#: in ticks (10 ms), and an event loop that polls and sleeps uses far less.
CPU_LOOK = 1.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def finished(outcomes: dict, rank: int) -> bool:
    """Whether ``rank`` has returned from the run's function: it then waits
    for the others, as an MPI rank at the end of its program waits in
    ``MPI_Finalize``, so the hang watch counts it as waiting."""
    return rank in outcomes and outcomes[rank][0] == "ok"


def cpu_seconds(pid: int) -> float | None:
    """The CPU time ``pid`` has used, all its threads (None where /proc cannot tell)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
    except (OSError, IndexError, ValueError):
        return None


class CpuUse:
    """Tells a rank that computes in its own code from one that sleeps,
    blocks, waits outside any call or polls: all look the same to the hang
    watch otherwise. ``computed(pid, polls)`` counts the looks, ``every``
    seconds apart or more, between which the process used at least
    ``COMPUTING`` of a CPU and made no poll (``polls``, the backend's count
    of the rank's looks for mail without waiting, did not change): a number
    that changes while it computes. A rank that polls in a loop waits in
    disguise, for a message that may never come."""

    def __init__(self, every: float = CPU_LOOK):
        self.every = every
        self._seen: dict[int, tuple[float, float, int, int]] = {}  # pid: (when, CPU seconds, polls, count)

    def computed(self, pid: int, polls: int = 0) -> int | None:
        """The count for ``pid``; None where its CPU time cannot be read."""
        now = time.monotonic()
        seen = self._seen.get(pid)
        if seen is not None and now - seen[0] < self.every:
            return seen[3]
        cpu = cpu_seconds(pid)
        if cpu is None:
            return None
        count = 0
        if seen is not None:
            count = seen[3] + (cpu - seen[1] >= COMPUTING * (now - seen[0]) and polls == seen[2])
        self._seen[pid] = (now, cpu, polls, count)
        return count


class HangWatch:
    """Decides when a run is hung: no rank has moved for ``timeout`` seconds
    while a rank waits in a call (or has returned, see ``finished``) or,
    where the backend shows the ranks' processes, while every rank runs its
    own code and none computes (they all sleep, block or poll: they wait
    outside MPI).

    A rank's position is any value that changes whenever the rank moves (its
    state, its calls completed, the progress of its current call); the
    backend reads them and passes them to :meth:`hung` at every look, with
    the processes of the ranks running their own code. After a verdict,
    ``computing`` says whether one of those computed (``CpuUse``) in the
    last ``timeout`` seconds: the backend then waits on, unless the waiting
    ranks wait for each other in a cycle, which no computation can end.
    """

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.last: list | None = None
        self.since = time.monotonic()  # when any rank last moved
        self.rank_since: dict[int, float] = {}  # when each rank last moved
        self.cpu = CpuUse(min(CPU_LOOK, timeout / 2))  # a computing rank is seen within a timeout
        self.computed: dict[int, int | None] = {}
        self.computed_at = self.since  # when a rank running its own code was last seen computing
        self.computing = False

    def hung(self, positions: Sequence, waiting: Sequence[bool],
             running: dict[int, tuple[int, int]] | None = None) -> dict[int, float | None] | None:
        """None while the run is not hung; else, for every rank, the seconds
        it has waited in its call (None for a rank that does not wait).

        ``positions`` holds each rank's position now, ``waiting`` whether
        each rank waits in a call, and ``running`` the pid and the polls
        (``CpuUse``) of each rank that runs its own code, where the backend
        knows them.
        """
        now = time.monotonic()
        computed = {rank: self.cpu.computed(pid, polls) for rank, (pid, polls) in (running or {}).items()}
        if computed != self.computed:
            self.computed, self.computed_at = computed, now
        positions = list(positions)
        if positions != self.last:
            previous = self.last or [None] * len(positions)
            for rank, (old, new) in enumerate(zip(previous, positions)):
                if old != new:
                    self.rank_since[rank] = now
            self.last, self.since = positions, now
            return None
        if now - self.since < self.timeout:
            return None
        self.computing = now - self.computed_at < self.timeout
        if not any(waiting) and (self.computing or not computed or None in computed.values()):
            return None  # every rank runs its own code: hung only once none computes, as far as can be seen
        return {rank: now - self.rank_since.get(rank, self.since) if wait else None
                for rank, wait in enumerate(waiting)}


class ProcessEnd:
    """Tells when one process has ended, from the process itself.

    A rank's pipes, and multiprocessing's sentinel, stay open as long as any
    process that inherited them lives: a rank that forked and then died
    would look alive for as long as its child. A pidfd (Linux 5.3 and
    later) becomes readable when the process exits, and ``fd`` can be
    waited on together with connections. Without pidfds ``fd`` is None and
    :meth:`ended` reads /proc, which the drivers do at every look. Either
    way the process is not reaped (its parent does that), so a process
    group it leads keeps its id until then.
    """

    def __init__(self, pid: int):
        self.pid = pid
        try:
            self.fd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.fd = None

    def ended(self) -> bool:
        if self.fd is not None:
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            return bool(poller.poll(0))
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as fh:
                return fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
        except (OSError, IndexError):
            return True

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the end; True if it has ended."""
        deadline = time.monotonic() + timeout
        while not self.ended():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.fd is not None:
                poller = select.poll()
                poller.register(self.fd, select.POLLIN)
                poller.poll(left * 1000)
            else:
                time.sleep(min(left, 0.01))
        return True

    def kill(self) -> None:
        """SIGKILL the process, unless it has ended (its pid may be another's by now)."""
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, signal.SIGKILL)
            elif not self.ended():
                os.kill(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Driver:
    """Base class of the simulator's and the MPI backend's drivers."""

    size: int
    timeout: float

    def __init__(self) -> None:
        self.run_id = 0
        self.watch: HangWatch | None = None  # the current run's
        self.owner = os.getpid()  # the process that opened the world
        keep_interrupts()  # a driver frees objects with finalizers, where Python drops a Ctrl-C

    # -- for subclasses ---------------------------------------------------------
    def connection(self, rank: int):
        raise NotImplementedError

    def prepare(self) -> None:
        """Before a run: replace ranks that died since the last one."""

    def ranks(self) -> list[int]:
        """The ranks of the current run: the world's, and those the run spawned."""
        return list(range(self.size))

    def serve(self, rank: int, request: tuple, outcomes: dict) -> None:
        """Answer a request ``rank`` made during the run (``simdist.sim._requests.ask_driver``)."""
        raise SimdistError(f"rank {rank} asked the driver for {request[0]!r}, which this backend does not serve")

    def process_end(self, rank: int) -> ProcessEnd:
        """The end of ``rank``'s process."""
        raise NotImplementedError

    def receive(self, outcomes: dict, dead: dict, timeout: float) -> None:
        """Wait up to ``timeout`` for messages and for ranks' ends; record
        outcomes and deaths (of ranks without an outcome)."""
        waiting = {}
        for rank in self.ranks():
            if rank not in outcomes and rank not in dead:
                waiting[self.connection(rank)] = rank
                if self.process_end(rank).fd is not None:
                    waiting[self.process_end(rank).fd] = rank
        ready = multiprocessing.connection.wait(list(waiting), timeout)
        for rank in sorted(set(waiting.values())):
            end = self.process_end(rank)
            woke = [x for x in ready if waiting[x] == rank]
            if not woke and end.fd is not None:
                continue  # without a pidfd, every look checks every rank
            connected = self.drain(rank, outcomes, block=self.connection(rank) in woke)
            if rank not in outcomes and (not connected or end.ended()):
                dead[rank] = self.death(rank)

    def hang_report(self, outcomes: dict) -> dict[int, str] | None:
        """A per-rank report if the run is hung (``self.watch`` says), else None."""
        raise NotImplementedError

    def abort(self, outcomes: dict, dead: dict) -> None:
        """Stop every rank without an outcome, so the next run starts clean."""
        raise NotImplementedError

    # -- the run ------------------------------------------------------------------
    def run(self, payload_parts: tuple) -> tuple[dict, dict, dict | None]:
        """Send a run to every rank; return (outcomes, dead, hang report)."""
        if os.getpid() != self.owner:
            raise SimdistError(
                f"World.run: this world belongs to process {self.owner}, which opened it; "
                f"process {os.getpid()} was forked from it and cannot run it: open a World there"
            )
        self.prepare()
        self.run_id += 1
        self.watch = HangWatch(self.timeout)
        message = pickle.dumps(("run", self.run_id, *payload_parts))
        dead: dict[int, str] = {}
        for rank in range(self.size):
            try:
                self.connection(rank).send_bytes(message)
            except OSError:  # it died since prepare()
                dead[rank] = self.death(rank)
        return self.collect(dead)

    def death(self, rank: int) -> str:
        """How ``rank`` died, e.g. ``"was killed by SIGKILL"``."""
        return "died"

    def collect(self, dead: dict) -> tuple[dict, dict, dict | None]:
        outcomes: dict[int, tuple] = {}
        report = None
        failed_at = None
        try:
            while len(outcomes) + len(dead) < len(self.ranks()):
                self.receive(outcomes, dead, POLL)
                if dead:
                    break
                if failed_at is None and any(kind != "ok" for kind, _ in outcomes.values()):
                    failed_at = time.monotonic()
                if failed_at is None:
                    report = self.hang_report(outcomes)
                    if report is not None:
                        break
                elif time.monotonic() - failed_at > GRACE:
                    # Its peers may wait for the failed rank forever; the run
                    # ends with that rank's error, which a hang report would hide.
                    break
        except BaseException:  # Ctrl-C in the driver: stop the ranks, then re-raise
            self.abort(outcomes, dead)
            raise
        if dead or len(outcomes) < len(self.ranks()):  # replace the dead, stop the rest
            self.abort(outcomes, dead)
        return outcomes, dead, report

    def drain(self, rank: int, outcomes: dict, block: bool = False) -> bool:
        """Handle every message waiting on ``rank``'s connection; False if
        the connection has closed."""
        conn = self.connection(rank)
        try:
            while rank not in outcomes and (block or conn.poll()):
                block = False
                self.handle(rank, pickle.loads(conn.recv_bytes()), outcomes)
        except (EOFError, OSError):
            return False
        return True

    def handle(self, rank: int, msg: tuple, outcomes: dict) -> None:
        if msg[0] == "log":
            dispatch_log(rank, msg[1])
        elif msg[0] == "done" and msg[1] == self.run_id:  # not a stale answer
            outcomes[rank] = msg[2:]
        elif msg[0] == "request":
            self.serve(rank, msg[1], outcomes)


def dispatch_log(rank: int, record: logging.LogRecord) -> None:
    """Hand a rank's record to the driver's logger of the same name."""
    record.rank = rank
    record.msg = f"[rank {rank}] {record.msg}"
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


def log_levels() -> dict[str, int]:
    """The driver's logger levels, which the ranks mirror."""
    levels = {"": logging.getLogger().getEffectiveLevel()}
    for name, logger in logging.root.manager.loggerDict.items():
        if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
            levels[name] = logger.level
    return levels
