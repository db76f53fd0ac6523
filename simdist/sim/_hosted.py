"""A hosted world: simulator ranks whose processes another launcher started.

``torchrun``, ``torch.multiprocessing.spawn`` and PyTorch's test harness
start the ranks themselves and give each its rank, the world's size and a
store to meet through. No driver forks them, so the world is *hosted*:

- rank 0 starts the host (``start``): a process of its own that creates the
  arena, as a driver does, and says where the ranks find it (``Hosted``:
  its pid, the arena's and the verdict's memfds, the layout), which rank 0
  hands the others through the launcher's store;
- every rank joins (``join``): it maps the arena through
  ``/proc/<host>/fd/<n>`` (nothing named is created, so nothing can be left
  behind), writes its pid in its status (``S_PID``) and gets a SimComm of
  the whole world. When its process exits, its state becomes RETURNED, as
  a driven rank's does when its function returns;
- the host watches the ranks as a driver does (``_watch``): a rank whose
  process ended without returning died (``RankDied``); ranks waiting in
  calls while none has moved for the timeout hang (``CollectiveTimeout``,
  or a ``Deadlock`` at once). It writes the error, pickled, to the verdict
  file, marks the dead rank FAILED or sets the abort word, and wakes every
  rank: a rank waiting in a call raises that error (``Arena.verdict``), in
  its own process, where the launcher prints it. A rank still in its own
  code ``timeout`` seconds after the verdict (computing for ever) is
  killed, as a driver stops the ranks of a failed run.

The host ends when every rank that joined has ended.
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from .._driver import GRACE, POLL, HangWatch, ProcessEnd
from .._errors import CollectiveTimeout, RankDied, SimdistError
from ._arena import Arena
from ._layout import ABORT_DRIVER, CALL, FAILED, H_ABORT, RETURNED, S_PID, S_STATE, USER, Layout

#: How long the ranks of a new hosted world have to join.
JOIN_LIMIT = 120.0
#: How long a rank that finds the run aborted waits for the host's verdict
#: (a rank that raised has it once that rank's process has exited).
VERDICT_WAIT = 30.0


@dataclass(frozen=True)
class Hosted:
    """Where a hosted world's ranks find it (what rank 0 sends the others)."""

    pid: int
    arena_fd: int
    verdict_fd: int
    layout: dict

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str | bytes) -> "Hosted":
        return cls(**json.loads(text))

    def path(self, fd: int) -> str:
        return f"/proc/{self.pid}/fd/{fd}"


_host: subprocess.Popen | None = None  # rank 0's host process (kept: reaped by subprocess later)


def start(size: int, timeout: float) -> Hosted:
    """Start the host of a world of ``size`` ranks (in rank 0); return where it is."""
    global _host
    _host = subprocess.Popen(
        [sys.executable, "-m", __name__, str(size), repr(float(timeout))],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, start_new_session=True)
    line = _host.stdout.readline()
    _host.stdout.close()
    if not line:
        raise SimdistError(f"the host of a simulated world of {size} ranks did not start "
                           f"(exit status {_host.wait()}); its error is above")
    return Hosted.loads(line)


def join(hosted: Hosted, rank: int, order: str = "fold"):
    """Join the hosted world as ``rank``; return its SimComm of the whole world."""
    from ._comm import SimComm
    from ._p2p import Mailboxes

    layout = Layout(**hosted.layout)
    if not 0 <= rank < layout.size:
        raise SimdistError(f"rank {rank} cannot join a simulated world of {layout.size} ranks")
    try:
        fd = os.open(hosted.path(hosted.arena_fd), os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        raise SimdistError(f"rank {rank} cannot reach the simulated world's host (process {hosted.pid}): "
                           f"{exc.strerror}; it must run on this machine, as the same user") from None
    arena = Arena(layout, fd, rank)
    arena.start_run()
    arena.verdict = _verdict_reader(hosted, rank)
    q = arena.q
    if q[layout.status_word(rank, S_PID)]:
        raise SimdistError(f"rank {rank} of the simulated world has joined already (process "
                           f"{q[layout.status_word(rank, S_PID)]}); each rank must have a rank of its own")
    q[layout.status_word(rank, S_STATE)] = USER
    q[layout.status_word(rank, S_PID)] = os.getpid()
    atexit.register(_leave, arena, rank)
    sys.excepthook = _failing(arena, rank, sys.excepthook)
    return SimComm(arena, Mailboxes(arena), list(range(layout.size)), 0, order=order)


def _leave(arena: Arena, rank: int) -> None:
    """At the rank's exit: end its run as a driven rank's function ends."""
    from .. import _worker

    try:
        _worker._function_ended(returned=True)
    finally:
        if arena.q[arena.layout.status_word(rank, S_STATE)] != FAILED:
            arena.q[arena.layout.status_word(rank, S_STATE)] = RETURNED
            arena.wake_all()


def _failing(arena: Arena, rank: int, excepthook):
    """``sys.excepthook`` of a joined rank: the rank has failed (its peers
    waiting for it stop waiting), then the traceback is printed."""

    def hook(kind, value, tb):
        arena.q[arena.layout.status_word(rank, S_STATE)] = FAILED
        arena.wake_all()
        excepthook(kind, value, tb)

    return hook


def _verdict_reader(hosted: Hosted, rank: int):
    """``Arena.verdict`` of a hosted rank: the host's error, read from its file."""
    path = hosted.path(hosted.verdict_fd)

    def verdict(reason: str) -> BaseException:
        deadline = time.monotonic() + VERDICT_WAIT
        while True:  # the host writes the verdict before it wakes anyone; a rank may look sooner
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                data = b""
            if data or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if data:
            return pickle.loads(data)
        return SimdistError(f"rank {rank}: {reason}, and the simulated world's host gave no report")

    return verdict


# -- the host ------------------------------------------------------------------


def _host_main(size: int, timeout: float) -> None:
    layout = Layout(size, None, ranks=size)
    arena = Arena.create(layout)
    verdict_fd = os.memfd_create("simdist-verdict")
    hosted = Hosted(os.getpid(), arena.fd, verdict_fd, layout.arguments())
    print(hosted.dumps(), flush=True)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())  # rank 0 reads up to the end of the line only
    _watch(arena, verdict_fd, timeout)


def _watch(arena: Arena, verdict_fd: int, timeout: float) -> None:
    """Watch the ranks until every one that joined has ended (see the module docstring)."""
    from ._driver import hang_verdict

    lay, q, size = arena.layout, arena.q, arena.size
    ends: dict[int, ProcessEnd] = {}
    gone: set[int] = set()
    watch = HangWatch(timeout)
    started = time.monotonic()
    judged = None  # when the verdict was given
    while True:
        for rank in range(size):
            pid = q[lay.status_word(rank, S_PID)]
            if pid and rank not in ends:
                ends[rank] = ProcessEnd(int(pid))
        died = {}
        for rank, end in ends.items():
            if rank not in gone and end.ended():
                gone.add(rank)
                state = q[lay.status_word(rank, S_STATE)]
                if state == FAILED:
                    died[rank] = "raised an exception (its traceback is in its output)"
                elif state != RETURNED:
                    died[rank] = "ended without returning (killed, or it exited at once)"
        if len(gone) == len(ends) and (len(ends) == size or time.monotonic() - started > JOIN_LIMIT):
            return  # every rank that joined has ended, and no other will join
        if judged is None and died:
            _give(verdict_fd, RankDied(died, " in the simulated world; its own output says why"))
            for rank in died:
                q[lay.status_word(rank, S_STATE)] = FAILED
            arena.wake_all()
            judged = time.monotonic()
        if judged is None:
            returned = [q[lay.status_word(r, S_STATE)] == RETURNED for r in range(size)]
            report = hang_verdict(arena, watch, list(range(size)), returned, {}, {r: end.pid for r, end in ends.items()})
            if report is not None:
                if isinstance(report, dict):
                    for rank in range(size):
                        if rank not in ends:
                            report[rank] = f"rank {rank} has not joined the world (its process made no process group)"
                    report = CollectiveTimeout(timeout, report)
                _give(verdict_fd, report)
                q[H_ABORT] = ABORT_DRIVER
                arena.wake_all()
                judged = time.monotonic()
        elif time.monotonic() - judged > max(GRACE, timeout):
            for rank, end in ends.items():  # computing for ever since the verdict: stopped, as a driver stops it
                if rank not in gone and q[lay.status_word(rank, S_STATE)] in (USER, CALL):
                    end.kill()  # (a rank that raised the verdict is FAILED, and may take its time to exit)
        time.sleep(POLL)


def _give(verdict_fd: int, error: BaseException) -> None:
    os.pwrite(verdict_fd, pickle.dumps(error), 0)


if __name__ == "__main__":
    _host_main(int(sys.argv[1]), float(sys.argv[2]))
