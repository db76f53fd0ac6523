"""Driverless SPMD: a program started by the user's own MPI launcher.

``mpiexec -n 4 python train.py`` (or ``mpirun``, ``srun``) starts every
process itself; there is no simdist driver. Such a process is recognised
by the variables its launcher sets (:data:`LAUNCHERS`), and MPI confirms
it: the world mpi4py finds must have the size the launcher announced (an
mpi4py of another MPI finds a world of one). There, :func:`comm` is the
contract's communicator over ``MPI_COMM_WORLD`` (a duplicate, with
``check_calls`` when ``SIMDIST_CHECK_CALLS=1``), and ``World(n,
backend="mpi")`` joins the job instead of starting one (:class:`JobDriver`),
so code written for ``World.run`` (``simdist train``) runs unchanged.

Failure semantics without a driver, as ``python -m mpi4py`` has them: an
exception that leaves the program (or a function of ``World.run``) on one
rank prints that rank's traceback and aborts the whole job
(``MPI_Abort``), so no peer waits forever, and the launcher exits non-zero.
A rank that waits in one call for ``SIMDIST_TIMEOUT`` seconds (default 60;
``World``'s ``timeout`` during its runs; 0: never) with no progress of its
own prints where it waits and aborts the job with status 124, the
simulator's rule seen from that rank alone.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager

from .. import _worker
from .._errors import InvalidValue, SimdistError
from .._whereabouts import CALL, FAILED, RETURNED, USER
from ._hosts import srun_remedy
from ._tracking import TrackedComm, Whereabouts

__all__ = ["comm", "launched", "launched_rank", "srun_plugin", "JobDriver", "LAUNCHERS"]

#: (variable only a launcher sets, variable with the job's size or None, launcher).
LAUNCHERS = (
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "Open MPI's mpiexec"),
    ("PMI_SIZE", "PMI_SIZE", "a PMI launcher (MPICH's or Intel MPI's mpiexec, srun --mpi=pmi2)"),
    ("PMIX_RANK", None, "a PMIx launcher (prterun, srun --mpi=pmix)"),
    ("SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_TASKS", "Slurm's srun"),
)
HUNG = 124  # the exit status of a job aborted for a hang (as timeout(1), and simdist run)
ABORT_GRACE = 0.25  # seconds the launcher gets to forward a report before the abort
_driven = False  # this process is a rank of simdist's own driver (mpi._worker), not the user's launcher's
_program = None  # comm() of this process, made on first use
_watch = None  # this process's _Watchdog
# The job's standard error as the launcher gave it, kept when the job's world
# is first used: a test harness in the rank (the property suite that `simdist
# check` runs in the job) may capture descriptor 2 when the rank aborts.
_launchers_stderr: int | None = None
_segments_gone = False  # the library's files in /dev/shm are unlinked (_forget_segments)


def driven() -> None:
    """Mark this process as a rank that simdist's driver started."""
    global _driven
    _driven = True


def srun_plugin() -> str | None:
    """The ``--mpi=`` plugin (``pmix``, ``pmi2``, ``none``) of the srun step
    that started this process itself; None when srun did not, also when it
    started a launcher that started this process (Hydra's proxies, Open
    MPI's daemons, whose ranks inherit the step's variables). Slurm's PMIx
    server names its namespace ``slurm.pmix.JOB.STEP``; its PMI-2 server
    sets ``PMI_JOBID`` to ``JOB.STEP``."""
    if "SLURM_STEP_NUM_TASKS" not in os.environ:
        return None
    env = os.environ
    step = f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}"
    if env.get("PMIX_NAMESPACE", "") == f"slurm.pmix.{step}":
        return "pmix"
    if env.get("PMI_JOBID", "") == step:
        return "pmi2"
    if not any(variable in env for variable in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")):
        return "none"
    return None


def launched() -> tuple[str, int | None] | None:
    """(launcher, size it announced or None) when an MPI launcher started
    this process, from its environment; None otherwise. Under srun the
    step's size is announced whichever plugin gives the ranks their
    places (PMIx announces none of its own)."""
    if _driven:
        return None
    plugin = srun_plugin()
    if plugin is not None:
        size = os.environ["SLURM_STEP_NUM_TASKS"]
        return ("Slurm's srun" + ("" if plugin == "none" else f" --mpi={plugin}"), int(size) if size.isdigit() else None)
    for variable, size_variable, launcher in LAUNCHERS:
        if variable in os.environ:
            size = os.environ.get(size_variable or "", "")
            return launcher, int(size) if size.isdigit() else None
    return None


#: Variables with this process's rank in the launcher's job, by launcher.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def launched_rank() -> int | None:
    """This process's rank in the launcher's job, from the launcher's
    environment (without starting MPI); None outside a launched job."""
    if launched() is None:
        return None
    for variable in RANK_VARIABLES:
        value = os.environ.get(variable, "")
        if value.isdigit():
            return int(value)
    return None


def _job_world():
    """``MPI.COMM_WORLD``, once MPI confirms the launcher's world."""
    from mpi4py import MPI

    global _segments_gone, _launchers_stderr
    if not _segments_gone:
        _segments_gone = True
        _forget_segments(MPI.COMM_WORLD)
    if _launchers_stderr is None:
        _launchers_stderr = os.dup(2)
    launcher, announced = launched()
    size = MPI.COMM_WORLD.Get_size()
    if announced is not None and announced != size:
        library = MPI.Get_library_version().splitlines()[0].split(",")[0].strip()
        if srun_plugin():
            remedy = f"does not take its rank from the step's PMI plugin; {srun_remedy(library)}"
        else:
            remedy = "is not the launcher's; start it with the mpiexec of that MPI"
        raise SimdistError(
            f"simdist: started by {launcher} for {announced} processes, but this process's mpi4py finds an MPI "
            f"world of {size}: its MPI ({library}) {remedy}"
        )
    return MPI.COMM_WORLD


def comm():
    """The communicator of the code running here.

    Inside a function run by ``World.run`` or a script run by ``simdist
    run``: the rank's communicator. In a process started by an MPI launcher
    (``mpiexec``, ``mpirun``, ``srun``): the contract's communicator over
    every process of the job, the same object on every call. Elsewhere it
    raises SimdistError.
    """
    try:
        return _worker.comm()
    except SimdistError as exc:
        if launched() is None:
            raise SimdistError(f"{exc}, or start it with an MPI launcher (mpiexec -n N python script.py)") from None
    return program_comm()


def program_comm():
    """The communicator :func:`comm` returns in a launched process."""
    global _program
    if _program is None:
        from ._comm import MpiComm

        world = _job_world()
        watch = _watchdog()
        _abort_on_uncaught(world)
        _program = TrackedComm(MpiComm.world(check_calls=_check_calls()), watch.where)
    return _program


def _check_calls() -> bool:
    return os.environ.get("SIMDIST_CHECK_CALLS", "") == "1"


def _forget_segments(world) -> None:
    """Remove the library's files in /dev/shm once every rank of a host maps
    them (as the driver's ranks do), so that an aborted job leaves none."""
    from ._segments import unlink_segments_once_mapped

    unlink_segments_once_mapped(world)


def _abort(world, status: int, text: str) -> None:
    """Print ``text`` and end every process of the job with ``status``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    text = text if text.endswith("\n") or not text else text + "\n"
    if _launchers_stderr is None:
        sys.stderr.write(text)
        sys.stderr.flush()
    else:
        os.write(_launchers_stderr, text.encode("utf-8", "replace"))
    # The launcher forwards the rank's output as it reads it; an abort at once
    # can end the job first and drop the last lines (Open MPI, under load).
    time.sleep(ABORT_GRACE)
    world.Abort(status)


def _abort_on_uncaught(world) -> None:
    """An exception that leaves the program prints its traceback and aborts
    the job (``python -m mpi4py``'s rule); MPI_Finalize at exit would
    otherwise wait for the peers, which wait for this rank."""
    if getattr(sys.excepthook, "simdist_aborts", False):
        return
    previous = sys.excepthook
    rank, size = world.Get_rank(), world.Get_size()

    def abort_the_job(kind, value, tb):
        sys.stderr.write(f"simdist: rank {rank} of {size} raised {kind.__name__}; aborting the MPI job\n")
        previous(kind, value, tb)
        _abort(world, 1, "")

    abort_the_job.simdist_aborts = True
    sys.excepthook = abort_the_job


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise InvalidValue(f"SIMDIST_TIMEOUT={value!r}: give seconds (0: never time out)") from None
    if seconds < 0:
        raise InvalidValue(f"SIMDIST_TIMEOUT={value!r}: give seconds >= 0 (0: never time out)")
    return seconds


class _Watchdog:
    """Aborts the job when this rank has waited in one call for ``limit``
    seconds without any progress (a thread; the main thread may be blocked
    inside MPI)."""

    def __init__(self, world):
        self.world = world
        self.where = Whereabouts()
        self.limit = _seconds(os.environ.get("SIMDIST_TIMEOUT", "60"))
        threading.Thread(target=self._watch, name="simdist-watchdog", daemon=True).start()

    @contextmanager
    def limited(self, seconds: float):
        before, self.limit = self.limit, seconds
        try:
            yield
        finally:
            self.limit = before

    def _watch(self) -> None:
        last, since = None, time.monotonic()
        while True:
            time.sleep(0.25)
            now, snapshot = time.monotonic(), self.where.snapshot()
            if snapshot != last:
                last, since = snapshot, now
            elif snapshot[0] == CALL and self.limit and now - since >= self.limit:
                rank, size = self.world.Get_rank(), self.world.Get_size()
                _abort(self.world, HUNG, f"simdist: rank {rank} of {size}: no progress for {self.limit:g} s; "
                       f"{Whereabouts.describe(snapshot, now - since)}; aborting the MPI job")


def _watchdog() -> _Watchdog:
    global _watch
    if _watch is None:
        _watch = _Watchdog(_job_world())
    return _watch


class JobDriver:
    """``World(size, backend="mpi")`` in a launched process: every process of
    the job is one rank of the world, and each runs the function itself.

    ``run`` is collective: every process must call it with the same
    function, as the program's other collectives. Each run gets a fresh
    duplicate of ``MPI_COMM_WORLD`` (as under the driver); the return
    values are then exchanged, so every rank gets the whole list. A rank
    whose function raises prints its traceback and aborts the job.
    """

    def __init__(self, size: int, timeout: float, *, check_calls: bool = False, sync_sends: bool = False):
        from ._comm import RunComms

        world = _job_world()
        if size != world.Get_size():
            launcher = launched()[0]
            raise InvalidValue(f"World(size={size}) in a job of {world.Get_size()} processes started by {launcher}: "
                               f"a World of the MPI backend joins that job; give size={world.Get_size()}")
        self._watch = _watchdog()
        _abort_on_uncaught(world)
        self.size = size
        self.timeout = timeout
        self._rank = world.Get_rank()
        self._runs = RunComms(check_calls=check_calls or _check_calls(), sync_sends=sync_sends)
        self._results = world.Dup()  # the runs' return values travel here, apart from the user's traffic
        self._pids = self._results.allgather(os.getpid())
        self._count = 0

    @property
    def pids(self) -> list[int]:
        return list(self._pids)

    def run(self, payload_parts: tuple) -> tuple[dict, dict, None]:
        where = self._watch.where
        self._count += 1

        def set_state(value):
            where.state = value

        with self._watch.limited(self.timeout):
            kind, data = _worker.execute(
                self._rank, lambda: TrackedComm(self._start(where), where), *payload_parts,
                started=lambda: set_state(USER), failed=lambda: set_state(FAILED), returned=lambda: set_state(RETURNED),
            )
            if kind != "ok":
                self._fail(kind, data)
            values = self._exchange(data, where)
        where.state = USER
        return {rank: ("ok", value) for rank, value in enumerate(values)}, {}, None

    def _start(self, where: Whereabouts):
        """The run's communicator, a duplicate of the world: its wait for a
        rank that never starts the run (its program went on elsewhere) is
        watched as a call, so it is a hang at the timeout."""
        where.current = ("the start of World.run", self._count, "waiting for every rank to start it")
        where.state = CALL
        return self._runs.start()

    def _fail(self, kind: str, data) -> None:
        text = data[0] if kind == "error" else f"{data[2]}{data[0]}\n"
        _abort(self._results, 1, f"simdist: rank {self._rank} of {self.size} failed in World.run; aborting the MPI "
               f"job:\n{text}")

    def _exchange(self, data: bytes, where: Whereabouts) -> list[bytes]:
        """Every rank's pickled return value. The wait for the slowest rank
        polls (MPI would spin a core) and is watched as a call."""
        where.current = ("the end of World.run", self._count, "waiting for every rank to return")
        where.state = CALL
        done = self._results.Ibarrier()
        while not done.Test():
            time.sleep(0.002)
        return self._results.allgather(data)

    def close(self) -> None:
        if self._results is not None:
            self._results.Free()
            self._results = None
