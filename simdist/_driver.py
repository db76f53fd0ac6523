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

A run is hung when a rank waits in a call and no rank has moved for
``timeout`` seconds: each run has a :class:`HangWatch`, to which the
backend's ``hang_report`` shows the ranks' positions as it reads them.
"""

from __future__ import annotations

import logging
import pickle
import time
from typing import Sequence

GRACE = 2.0  # seconds the other ranks get after a failure
POLL = 0.05  # seconds between looks for a hang


class HangWatch:
    """Decides when a run is hung: a rank waits in a call and no rank has
    moved for ``timeout`` seconds.

    A rank's position is any value that changes whenever the rank moves (its
    state, its calls completed, the progress of its current call); the
    backend reads them and passes them to :meth:`hung` at every look.
    """

    def __init__(self, timeout: float):
        self.timeout = timeout
        self.last: list | None = None
        self.since = time.monotonic()  # when any rank last moved
        self.rank_since: dict[int, float] = {}  # when each rank last moved

    def hung(self, positions: Sequence, waiting: Sequence[bool]) -> dict[int, float | None] | None:
        """None while the run is not hung; else, for every rank, the seconds
        it has waited in its call (None for a rank that does not wait).

        ``positions`` holds each rank's position now and ``waiting`` whether
        each rank waits in a call.
        """
        now = time.monotonic()
        positions = list(positions)
        if positions != self.last:
            previous = self.last or [None] * len(positions)
            for rank, (old, new) in enumerate(zip(previous, positions)):
                if old != new:
                    self.rank_since[rank] = now
            self.last, self.since = positions, now
            return None
        if now - self.since < self.timeout or not any(waiting):
            return None
        return {rank: now - self.rank_since.get(rank, self.since) if wait else None
                for rank, wait in enumerate(waiting)}


class Driver:
    """Base class of the simulator's and the MPI backend's drivers."""

    size: int
    timeout: float

    def __init__(self) -> None:
        self.run_id = 0
        self.watch: HangWatch | None = None  # the current run's

    # -- for subclasses ---------------------------------------------------------
    def connection(self, rank: int):
        raise NotImplementedError

    def prepare(self) -> None:
        """Before a run: replace ranks that died since the last one."""

    def receive(self, outcomes: dict, dead: dict, timeout: float) -> None:
        """Wait up to ``timeout`` for messages; record outcomes and deaths."""
        raise NotImplementedError

    def hang_report(self, outcomes: dict) -> dict[int, str] | None:
        """A per-rank report if the run is hung (``self.watch`` says), else None."""
        raise NotImplementedError

    def abort(self, outcomes: dict, dead: dict) -> None:
        """Stop every rank without an outcome, so the next run starts clean."""
        raise NotImplementedError

    # -- the run ------------------------------------------------------------------
    def run(self, payload_parts: tuple) -> tuple[dict, dict, dict | None]:
        """Send a run to every rank; return (outcomes, dead, hang report)."""
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
            while len(outcomes) + len(dead) < self.size:
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
        if dead or len(outcomes) < self.size:  # replace the dead, stop the rest
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
