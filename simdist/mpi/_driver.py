"""The MPI backend's driver: one ``mpiexec`` job per world.

``mpiexec -n N python -m simdist.mpi._worker 127.0.0.1:PORT`` starts the
ranks; each connects back to the driver's loopback listener (an address
the nodes reach when the world has hosts: ``_hosts``) and the two
sides run ``multiprocessing``'s HMAC challenge both ways with a per-world
secret before anything is unpickled, so a peer without the secret is
refused. The job runs in a session of its own, which also holds whatever
the ranks' code starts (Open MPI and MPICH both put each rank in a process
group of its own, inside that session). The whole session is killed when
a run fails (a rank blocked inside MPI cannot be unwound, so a failed run
ends the job and the next run starts a new one), when the world closes,
and by the janitor (``_janitor``) when the driver dies; ``mpiexec`` also
dies with the driver (PDEATHSIG). A rank is dead when its process ends (a
pidfd on the pid it sent in its hello), also while processes it started
hold its connection open.

Hangs are found as on the simulator, by the run's hang watch -- a rank
waits in a call and no rank moves for ``timeout`` seconds -- from the
ranks' answers to "where are you?", asked every quarter second.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import pickle
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection

from .. import _inherited
from .. import _stdin as stdin
from .._driver import Driver, ProcessEnd, finished
from .._interrupts import interrupts_deferred
from .._errors import SimdistError
from .._janitor import end_session, janitor
from .._whereabouts import CALL, FAILED, RETURNED, USER
from ._segments import noted_segments
from ._handshake import Handshakes, Refused, authenticate, refused
from ._hosts import Placement, forwarded, host_options, listen_address, srun_remedy
from ._tracking import Whereabouts

_log = logging.getLogger("simdist")
_ASK_EVERY = 0.25  # seconds between "where are you?" during a run
MISMATCH_GRACE = 10.0  # seconds the ranks of a world of the wrong size get to greet before the job ends


def find_mpiexec() -> str:
    """``$SIMDIST_MPIEXEC``, else the ``mpiexec`` beside this Python (the
    ``mpi`` extra's Open MPI wheel), else the first on ``PATH``."""
    chosen = os.environ.get("SIMDIST_MPIEXEC")
    if chosen:
        return chosen
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec")
    if not found:
        raise SimdistError(
            "backend 'mpi': no mpiexec found; install the mpi extra (pip install 'simdist[mpi]') "
            "or set SIMDIST_MPIEXEC to an mpiexec"
        )
    return found


@functools.lru_cache(maxsize=None)
def flavor(mpiexec: str) -> str:
    """``openmpi``, ``mpich``, ``slurm`` (srun) or ``unknown``, from
    ``mpiexec --version`` (asked once per path)."""
    try:
        out = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if "Open MPI" in out or "OpenRTE" in out or "prte" in out.lower():
        return "openmpi"
    if "HYDRA" in out or "MPICH" in out:
        return "mpich"
    if out.startswith("slurm"):
        return "slurm"
    return "unknown"


def session_tmpdir() -> str:
    """A new directory for one MPI job's session files: the job runs with it
    as ``TMPDIR``, and the caller removes it when the job has ended.

    Open MPI's launcher keeps its session files in ``$TMPDIR/ompi.<its pid>``
    and removes them when it exits normally; a launcher that is killed (a
    hung job stopped with SIGKILL) leaves them. A later launcher whose
    process id is reused then cannot start ("The PMIx server's listener
    thread failed to start", exit status 213). A directory per job, removed
    by us, leaves nothing for a later job to trip over.
    """
    import tempfile

    return tempfile.mkdtemp(prefix="simdist-mpi-")


def launch_command(mpiexec: str, size: int) -> list[str]:
    """``mpiexec -n SIZE``, with ``--oversubscribe`` where Open MPI needs it
    (more ranks than usable CPUs; MPICH neither needs nor accepts it)."""
    cmd = [mpiexec, "-n", str(size)]
    if size > len(os.sched_getaffinity(0)) and flavor(mpiexec) == "openmpi":
        cmd.append("--oversubscribe")
    return cmd


def launch_environment(mpiexec: str, tmpdir: str) -> dict[str, str]:
    """This process's environment for an MPI job: its own ``TMPDIR`` (see
    :func:`session_tmpdir`) and, as root, Open MPI's consent to run."""
    env = dict(os.environ, TMPDIR=tmpdir)
    if os.geteuid() == 0 and flavor(mpiexec) == "openmpi":
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def _own_session_dying_with_us() -> None:  # runs in the child before exec
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked while it was forked


#: Variables the ranks need, passed by name to Open MPI's ranks on other hosts.
_FORWARDED = ("SIMDIST_AUTHKEY", "SIMDIST_CHECK_CALLS", "SIMDIST_SYNC_SENDS", "PYTHONPATH")


class _RemoteEnd:
    """The end of a rank on another host, which no pidfd can watch: it is
    seen only as its connection closing (``fd`` None: looked at every time)."""

    fd = None

    def ended(self) -> bool:
        return False

    def wait(self, timeout: float) -> bool:
        return False

    def close(self) -> None:
        pass


class MpiDriver(Driver):
    def __init__(self, size: int, timeout: float, mpiexec: str | None = None, *, check_calls: bool = False,
                 where: Placement = Placement(), sync_sends: bool = False):
        super().__init__()
        self.size = size
        self.timeout = timeout
        self.check_calls = check_calls
        self.sync_sends = sync_sends
        self.where = where
        if where.launcher:
            self.mpiexec = shutil.which(where.launcher[0]) or where.launcher[0]
        else:
            self.mpiexec = mpiexec or find_mpiexec()
        self.flavor = flavor(self.mpiexec)
        self._key = secrets.token_bytes(32)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a fixed port, again after a failed run
        self._listener.bind(listen_address(where))
        self._listener.listen(size + 16)
        self._host = socket.gethostname()
        self._local: list[bool] = [True] * size  # whether each rank runs on this host
        self._job: subprocess.Popen | None = None
        self._conns: list[Connection | None] = [None] * size
        self._pids: list[int | None] = [None] * size
        self._segments: set[str] = set()  # the job's files in /dev/shm, removed after it ends
        self._tmpdir: str | None = None  # the job's TMPDIR (see session_tmpdir), removed after it ends
        self._job_end: ProcessEnd | None = None  # mpiexec's
        self._ends: dict[int, ProcessEnd] = {}  # each rank's, opened when first waited on
        self._closed = False
        _inherited.track(self)
        try:
            self._launch()
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int | None]:
        return list(self._pids)

    def connection(self, rank: int):
        return self._conns[rank]

    def command(self, env: dict | None = None) -> list[str]:
        """The job's command line; ``env`` is the job's environment (for the
        variables Open MPI must be told to pass to other hosts)."""
        address, port = self._listener.getsockname()
        if self.where.spread:
            launch = [*(self.where.launcher or [self.mpiexec]), "-n", str(self.size), *host_options(self.flavor, self.where),
                      *forwarded(self.flavor, self.where, env if env is not None else os.environ, _FORWARDED)]
        else:
            launch = launch_command(self.mpiexec, self.size)
        return launch + [sys.executable, "-m", "simdist.mpi._worker", f"{address}:{port}"]

    def _environment(self) -> dict[str, str]:
        env = dict(launch_environment(self.mpiexec, self._tmpdir), SIMDIST_AUTHKEY=self._key.hex())
        # mpiexec gets /dev/null: rank 0 opens it itself, on this host only
        env[stdin.VARIABLE] = "" if self.where.spread else stdin.stdin_for_rank_0()
        if self.check_calls:
            env["SIMDIST_CHECK_CALLS"] = "1"
        if self.sync_sends:
            env["SIMDIST_SYNC_SENDS"] = "1"
        return env

    # -- the job ------------------------------------------------------------------
    def _launch(self) -> None:
        self._conns = [None] * self.size
        self._pids = [None] * self.size
        self._tmpdir = session_tmpdir()
        janitor().register("path", self._tmpdir)
        with interrupts_deferred():
            env = self._environment()
            command = self.command(env)
            try:
                self._job = subprocess.Popen(
                    command, env=env, stdin=subprocess.DEVNULL, preexec_fn=_own_session_dying_with_us
                )
            except OSError as exc:
                raise SimdistError(f"backend 'mpi': cannot start {self.mpiexec}: {exc.strerror}") from None
            self._job_end = ProcessEnd(self._job.pid)
            janitor().register("session", self._job.pid)
        limit = max(self.timeout, 60.0)
        deadline = time.monotonic() + limit
        handshakes = Handshakes(self._listener, self._key)  # concurrent: no peer delays the ranks
        # Ranks in a world of the wrong size (another MPI's mpiexec, srun's
        # other PMI plugin) are each a world of their own. Each removes its
        # segments before it says hello, so the job ends only once all have
        # (or after a grace): ranks killed inside MPI_Init leave theirs.
        mismatch, greeted, grace = None, 0, 0.0
        try:
            while None in self._conns:
                if mismatch is not None and (greeted >= self.size or time.monotonic() > grace
                                             or self._job.poll() is not None):
                    self._kill_job()
                    raise mismatch
                if self._job.poll() is not None:
                    raise SimdistError(
                        f"backend 'mpi': mpiexec exited with status {self._job.returncode} before every rank "
                        f"connected ({self._conns.count(None)} of {self.size} missing); command: {' '.join(command)}"
                    )
                if time.monotonic() > deadline:
                    self._kill_job()
                    raise SimdistError(f"backend 'mpi': the ranks did not connect within {limit:.0f} s")
                admitted = handshakes.take(0.2)
                if admitted is not None:
                    try:
                        self._enrol(*admitted)
                    except SimdistError as exc:
                        if mismatch is None:
                            mismatch, grace = exc, time.monotonic() + MISMATCH_GRACE
                        greeted += 1
        finally:
            handshakes.close()

    def _admit(self, sock: socket.socket) -> None:
        """The handshake of one connection, to its end (``_launch`` runs
        many at once): enrol a rank, refuse anything else."""
        try:
            admitted = authenticate(sock, self._key)
        except Refused as exc:
            refused(exc)
            return
        finally:
            sock.close()
        self._enrol(*admitted)

    def _enrol(self, hello: tuple, conn: Connection) -> None:
        """Take an authenticated rank's connection (or refuse it), or say
        why the job cannot work (it ends then)."""
        _, rank, pid, size, library, host = hello
        if size == self.size and (not 0 <= rank < size or self._conns[rank] is not None):
            conn.close()
            refused(Refused(f"unexpected greeting {hello!r}"))
            return
        if size != self.size:  # e.g. MPICH's mpiexec starting ranks whose mpi4py uses Open MPI
            conn.close()
            if self.flavor == "slurm":  # srun with a PMI plugin that this MPI does not speak
                raise SimdistError(
                    f"backend 'mpi': a rank started by {' '.join(self.where.launcher)} finds itself in an MPI world "
                    f"of {size} process(es), not {self.size}: its mpi4py uses {library}; {srun_remedy(library)}"
                )
            raise SimdistError(
                f"backend 'mpi': a rank started by {self.mpiexec} ({self.flavor}) finds itself in an MPI world of "
                f"{size} process(es), not {self.size}: its mpi4py uses {library}, which is not the MPI of that "
                "mpiexec; pass the mpiexec of that MPI (World(mpiexec=...) or SIMDIST_MPIEXEC)"
            )
        self._conns[rank] = conn
        self._pids[rank] = pid
        self._local[rank] = host == self._host

    def _job_status(self) -> int | None:
        """mpiexec's exit status as Popen gives it (negative: killed by that
        signal), None while it runs. It is not reaped, so that its session
        keeps its id until :meth:`_kill_job` has ended every process of it."""
        if self._job.returncode is not None:
            return self._job.returncode
        try:
            info = os.waitid(os.P_PID, self._job.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self._job.poll()
        if info is None:
            return None
        return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status

    def _kill_job(self) -> None:
        """End the job's session -- mpiexec, its daemons, the ranks and
        whatever their code started -- then reap mpiexec."""
        job = self._job
        if job is None or self._job_end is None:  # ended already
            return
        if self.flavor in ("openmpi", "slurm") and self._job_status() is None:
            # Open MPI's launcher stops its ranks on SIGTERM. MPICH's would
            # print a "BAD TERMINATION" banner on the user's terminal for
            # every run stopped on purpose: its session is killed at once.
            try:
                os.killpg(job.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self._job_end.wait(2.0)
        end_session(job.pid)  # mpiexec first
        job.wait()
        self._job_end.close()
        self._job_end = None
        janitor().unregister("session", job.pid)

    def _end_job(self) -> None:
        self._kill_job()
        for conn in self._conns:
            if conn is not None:
                conn.close()
        self._conns = [None] * self.size
        for end in self._ends.values():
            end.close()
        self._ends.clear()
        # A killed MPI job cannot clean up after itself: remove its segments,
        # those its ranks reported and those they noted before a peer could stop them.
        if self._tmpdir is not None:
            self._segments |= noted_segments(self._tmpdir)
        for path in self._segments:
            try:
                os.unlink(path)
            except OSError:
                pass
            janitor().unregister("path", path)
        self._segments.clear()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            janitor().unregister("path", self._tmpdir)
            self._tmpdir = None

    def release_inherited(self, keep) -> None:
        """In a child forked from the driver (see ``_inherited``): let go of
        the listener and the connections; the world is not the child's."""
        if self._closed:  # closed already: the numbers it held may be another's now
            return
        self._closed = True
        self._listener.close()
        for conn in self._conns:
            if conn is not None:
                conn.close()
        for end in [self._job_end, *self._ends.values()]:
            if end is not None:
                end.close()

    # -- a run --------------------------------------------------------------------
    def prepare(self) -> None:
        if self._job_status() is not None:
            _log.warning("backend 'mpi': the MPI job ended between runs (status %s); starting a new one", self._job_status())
            self._end_job()
            self._launch()
        self._where: dict[int, tuple] = {}
        self._asked = 0.0

    def death(self, rank: int) -> str:
        code = self._job_status()
        if code is None:
            if not self._local[rank]:
                return "lost its connection to the driver (its process on another host ended, or the network failed)"
            if self.process_end(rank).wait(0.5):  # a closed connection comes first
                return "exited or was killed (its process has ended)"
            return "lost its connection to the driver"
        if code < 0:
            return f"ended with the MPI job (mpiexec killed by {signal.Signals(-code).name})"
        return f"ended with the MPI job (mpiexec exited with status {code})"

    def process_end(self, rank: int) -> ProcessEnd:
        if rank not in self._ends:
            self._ends[rank] = ProcessEnd(self._pids[rank]) if self._local[rank] else _RemoteEnd()
        return self._ends[rank]

    def handle(self, rank, msg, outcomes) -> None:
        if msg[0] == "where":
            self._where[rank] = msg[2]
        elif msg[0] == "segments":  # files the ranks could not remove early (this host's only)
            for path in msg[1] if self._local[rank] else ():
                if path.startswith("/dev/shm/") and path not in self._segments:
                    self._segments.add(path)
                    janitor().register("path", path)
        else:
            super().handle(rank, msg, outcomes)

    def hang_report(self, outcomes):
        now = time.monotonic()
        if now - self._asked >= _ASK_EVERY:
            self._asked = now
            ask = pickle.dumps(("where", self.run_id))
            for rank in range(self.size):
                if rank not in outcomes:
                    try:
                        self._conns[rank].send_bytes(ask)
                    except OSError:
                        pass
        positions = [self._position(rank, outcomes) for rank in range(self.size)]
        waited = self.watch.hung(positions, [p[0] == CALL or finished(outcomes, r) for r, p in enumerate(positions)])
        if waited is None:
            return None
        return {rank: Whereabouts.describe(p, waited[rank]) for rank, p in enumerate(positions)}

    def _position(self, rank: int, outcomes: dict) -> tuple:
        """``rank``'s last answer to "where are you?" (a Whereabouts snapshot)."""
        if rank in outcomes:
            return (RETURNED if outcomes[rank][0] == "ok" else FAILED), None, ()  # its count is not sent back
        return self._where.get(rank, (USER, 0, ()))

    def abort(self, outcomes, dead) -> None:
        """A rank blocked in MPI cannot be unwound: end the job, start anew."""
        self._end_job()
        self._launch()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        told = 0  # ranks that were told to exit
        for conn in self._conns:
            if conn is not None:
                try:
                    conn.send_bytes(pickle.dumps(("exit",)))
                    told += 1
                except OSError:
                    pass
        if self._job_end is not None and told == self.size:  # else (Ctrl-C while it started) it would not end
            self._job_end.wait(10.0)
        self._end_job()
        self._listener.close()

    def __del__(self):
        if not getattr(self, "_closed", True):
            self.close()
