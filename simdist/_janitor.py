"""Ending what a world started: now, or after its driver died.

A world starts processes (simulator workers, an MPI job) and may create
files (the MPI job's temporary directory, multiprocessing's directory for
the fork server's socket). Rank code may start processes of its own
(``os.fork``, ``subprocess``, ``multiprocessing``). Each simulator worker
leads a process group of its own and the MPI job runs in a session of its
own, so whatever a rank starts stays in that group or session, also after
its parent died and it was reparented: :func:`end_group` and
:func:`end_session` end all of it at once.

The driver ends them itself when a rank dies, is replaced, or the world
closes. A driver killed by a signal ends nothing, so every process that
opens a world has one janitor: this file, run as ``python -I -S`` (it
imports nothing of simdist, so it starts in about 10 ms), in a session of
its own (no signal sent to the driver's terminal or process group reaches
it). It reads what it must end from a pipe whose write end only the driver
holds (:mod:`simdist._inherited` closes it in forked children). When the
pipe reaches end-of-file -- the driver exited, however it exited -- the
janitor ends every group and session still registered, removes every path
still registered, and exits. A world unregisters what it ended itself, so
after a clean exit there is nothing left to do.

Group and session ids are process ids, which the kernel reuses only once
no process of the group or session is left; the driver ends a group or
session before it reaps its leader, so the id it signals is still theirs.

The messages are lines: ``+`` or ``-`` (register, unregister), a kind
(``group``, ``session``, ``path``) and a value.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

KINDS = ("group", "session", "path")
GATHER = 0.1  # seconds the janitor lets registrations gather between reads


# -- ending processes and removing files (driver and janitor) ------------------------
def end_group(pgid: int) -> None:
    """SIGKILL every process of the process group ``pgid`` (none left: fine)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def session_members(sid: int) -> list[int]:
    """The processes of session ``sid``, its leader first (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
            found.append(int(entry))
    return sorted(found, key=lambda pid: pid != sid)


def end_session(sid: int, within: float = 5.0) -> None:
    """SIGKILL every process of session ``sid``, again until none is left
    (a process may fork while it is being killed) or ``within`` seconds passed.

    A session collects every process started below its leader, wherever
    it was reparented, unless it made a session of its own.
    """
    deadline = time.monotonic() + within
    while True:
        members = session_members(sid)
        if not members or time.monotonic() > deadline:
            return
        for pid in members:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)


def remove_path(path: str) -> None:
    """Remove a file or a directory tree; one that is gone already is fine."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def clean(registered) -> None:
    """End every registered group and session, then remove every path."""
    for kind, value in sorted(registered, key=lambda item: KINDS.index(item[0])):
        if kind == "group":
            end_group(int(value))
        elif kind == "session":
            end_session(int(value))
        else:
            remove_path(value)


# -- the driver's side ------------------------------------------------------------------
class Janitor:
    """This process's janitor: started on first use, one per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._pipe: int | None = None  # the write end
        self._registered: set[tuple[str, str]] = set()
        self._unavailable = False  # it could not be started: not tried again

    def register(self, kind: str, *values) -> None:
        """Have the ``values`` ended (``kind``: group, session, path) if this process dies."""
        self._send("+", kind, [str(value) for value in values])

    def unregister(self, kind: str, *values) -> None:
        """The ``values`` have been ended (or moved on): forget them."""
        self._send("-", kind, [str(value) for value in values])

    def _send(self, sign: str, kind: str, values: list[str]) -> None:
        assert kind in KINDS and not any("\n" in value for value in values), (kind, values)
        with self._lock:
            for value in values:
                if sign == "+":
                    self._registered.add((kind, value))
                else:
                    self._registered.discard((kind, value))
            line = "".join(f"{sign}{kind} {value}\n" for value in values).encode()
            if self._pipe is None:
                if sign == "+":
                    self._start()  # sends every registration, this one included
                return
            try:
                os.write(self._pipe, line)
            except OSError:  # it died (killed from outside): start another
                self._forget()
                self._start()

    def _start(self) -> None:
        if self._unavailable:
            return
        try:
            self._spawn()
        except (OSError, NotImplementedError) as exc:  # no usable sys.executable, say
            import logging

            self._unavailable = True
            logging.getLogger("simdist").warning(
                "cannot start simdist's janitor (%s): what a world started may outlive a killed driver", exc)

    def _spawn(self) -> None:
        read, write = os.pipe()
        try:
            self._pid = os.posix_spawn(
                sys.executable,
                [sys.executable, "-I", "-S", os.path.abspath(__file__), "simdist-janitor"],
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
                setsid=True,
            )
        except BaseException:
            os.close(write)
            raise
        finally:
            os.close(read)
        self._pipe = write
        backlog = "".join(f"+{kind} {value}\n" for kind, value in sorted(self._registered))
        os.write(self._pipe, backlog.encode())

    def _forget(self) -> None:
        if self._pipe is not None:
            os.close(self._pipe)
        if self._pid is not None:
            try:
                os.waitpid(self._pid, os.WNOHANG)
            except ChildProcessError:
                pass
        self._pipe = self._pid = None

    def release_inherited(self, keep) -> None:
        """In a forked child: let go of the parent's janitor (the child
        starts its own if it opens a world)."""
        if self._pipe is not None:
            os.close(self._pipe)
        self._pipe = self._pid = None
        self._registered.clear()
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The janitor's process id (None until a first registration)."""
        return self._pid


_janitor: Janitor | None = None
_janitor_lock = threading.Lock()


def janitor() -> Janitor:
    """This process's janitor."""
    global _janitor
    with _janitor_lock:
        if _janitor is None:
            from . import _inherited

            _janitor = Janitor()
            _inherited.track(_janitor)
        return _janitor


# -- the janitor's side -------------------------------------------------------------------
def serve() -> None:
    """Read registrations until end-of-file, then clean what is registered."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.closerange(3, 65536)  # hold nothing of the driver's but the pipe
    registered: set[tuple[str, str]] = set()
    pending = b""
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        # Let lines gather before the next read: the driver writes one per
        # worker it starts or ends, and waking the janitor for each slowed
        # World(4) by about 4 ms on 2 busy CPUs.
        time.sleep(GATHER)
        pending += data
        *lines, pending = pending.split(b"\n")
        for line in lines:
            sign, rest = line[:1], line[1:].decode()
            kind, _, value = rest.partition(" ")
            if kind not in KINDS:
                continue
            if sign == b"+":
                registered.add((kind, value))
            else:
                registered.discard((kind, value))
    clean(registered)


if __name__ == "__main__":
    serve()
