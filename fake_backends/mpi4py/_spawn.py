"""Spawning processes: ``Intracomm.Spawn``, ``Spawn_multiple`` and ``Comm.Get_parent``.

A run started with spare slots (``simdist run --universe U``) can start
processes during the run, as MPI_Comm_spawn does: the root asks the
simulator for fresh processes in spare slots (``Transport.spawn``), each
running one of the given Python programs as ``__main__`` in a world of its
own (its ``MPI.COMM_WORLD``), and the spawning group and the new world meet
as Accept and Connect meet, at a port the root opened. ``Spawn`` returns
the intercommunicator once every new process has joined; in a spawned
process ``Comm.Get_parent()`` is its end until it is disconnected.

Only Python programs can run in a slot: ``sys.executable`` (or any
``python``) with a script, ``-m module`` or ``-c code`` and its options, or
an executable script whose ``#!`` line names Python. Anything else is
refused with ``MPI.ERR_SPAWN`` naming the command, as is a spawn that needs
more free slots than the universe has left. The children's outcome counts
in the run: one that raises, or exits with a status other than 0, fails it.
"""

from __future__ import annotations

import operator
import os
import re
import sys

from simdist._errors import SimdistError

from . import _runtime
from ._dynproc import Close_port, Open_port
from ._errors import ERR_ARG, ERR_SPAWN, Exception as MPIException
from ._buffers import is_integral
from ._pointtopoint import c_int
from ._thread_failures import failed_in_a_thread

#: The interpreter options that take a value (``-X dev``, ``-W error``).
_VALUED = ("-X", "-W")
_PYTHON = re.compile(r"python[0-9.]*$")


def spawn(self, command, args=None, maxprocs: int = 1, info=None, root: int = 0, errcodes=None):
    """MPI_Comm_spawn (collective): ``maxprocs`` processes running
    ``command`` with ``args`` (significant at ``root`` only); ``maxprocs``
    is converted as mpi4py converts a C int, on every rank (True is 1)."""
    maxprocs = c_int(maxprocs, "maxprocs")
    return _spawn(self, "Spawn", lambda: [(command, args, maxprocs)], root, errcodes)


def spawn_multiple(self, command, args=None, maxprocs=None, info=None, root: int = 0, errcodes=None):
    """MPI_Comm_spawn_multiple (collective): for each command, its count of
    processes (``maxprocs``: one each by default, or one count for all).
    Arguments of the wrong shape raise ValueError at the root, as mpi4py's
    do before MPI is called."""
    def apps():
        if isinstance(command, str) or not isinstance(command, (list, tuple)):
            raise ValueError(f"Spawn_multiple: expecting a sequence of commands, got {command!r}")
        n = len(command)
        argvs = _per_command(args, n, "args", lambda a: a is None or isinstance(a, str))
        counts = [operator.index(count)  # as mpi4py reads them: a bool is 0 or 1, a float a TypeError
                  for count in _per_command(maxprocs if maxprocs is not None else 1, n, "maxprocs", is_integral)]
        _per_command(info, n, "info", lambda i: not isinstance(i, (list, tuple)))
        return list(zip(command, argvs, counts))

    return _spawn(self, "Spawn_multiple", apps, root, errcodes)


def _per_command(value, n: int, name: str, single) -> list:
    """``value`` for each of ``n`` commands: one ``single`` value for all, or a sequence of ``n``."""
    if single(value):
        return [value] * n
    values = list(value)
    if len(values) != n:
        raise ValueError(f"Spawn_multiple: {name}: expecting {n} items, got {len(values)}")
    return values


def get_parent(cls):
    """The intercommunicator to the processes that spawned this one;
    MPI.COMM_NULL if none did, or once it is disconnected."""
    from ._comm import INTERCOMM_CLASS

    handle = INTERCOMM_CLASS[0]()
    rt = _runtime.current
    parent = None if rt is None else rt.parent
    if parent is not None and not parent.freed:
        handle._state = parent
    return handle


def run_spawned(comm, programs: list, port: str) -> int:
    """A spawned process (the function its slot runs): its program (one per
    rank of its world, in ``programs``: (appnum, (kind, target, argv))) runs
    as ``__main__`` once the process has joined its parents at ``port``
    (collective over the new world), which ends their ``Spawn``. An exit
    status other than 0 fails the run, as under mpiexec."""
    from simdist._environ import as_under_mpiexec
    from simdist._main import run_main

    from ._comm import COMM_WORLD

    appnum, (kind, target, argv) = programs[comm.rank]
    rt = _runtime.get()  # the stand-in, installed on this world until the function returns
    parent = COMM_WORLD.Connect(port, root=0)
    rt.parent, rt.appnum = parent._st(), appnum
    rt.parent.name = "parent of MPI_COMM_WORLD"
    with as_under_mpiexec(comm.rank, comm.size):  # the new world's ranks, as mpiexec gives spawned processes
        code = run_main(target, argv, kind == "module", code=kind == "code")
    if code:
        raise SimdistError(f"rank {comm.rank} of the processes spawned to run {target!r} exited with status {code}")
    return code


def _spawn(comm, call: str, apps, root: int, errcodes):
    st = comm._st()
    root = comm._root(st, root, call)
    outcome = None
    if st.rank == root:  # a ValueError of the arguments' shape is raised here only, as in mpi4py
        outcome = _start(st, call, apps())
    ok, found = comm.bcast(outcome, root)
    if not ok:
        error = MPIException(ERR_SPAWN, found)
        failed_in_a_thread(error)
        raise error
    port, counts = found
    try:
        child = comm.Accept(port, root=root)
        child._st().name = f"{call} of {st.name}"  # as reports name it
    finally:
        if st.rank == root:
            Close_port(port)
    if errcodes is not None:  # MPI.SUCCESS for each process: every one started
        errcodes[:] = [[0] * n for n in counts] if call == "Spawn_multiple" else [0] * sum(counts)
    return child


def _start(st, call: str, apps) -> tuple:
    """At the root: (True, (port, processes per command)) once the
    simulator started them, or (False, why)."""
    try:
        programs, counts = [], []
        for appnum, (command, argv, count) in enumerate(apps):
            program = _program(command, argv, call)
            if count < 1:  # an int: Spawn and Spawn_multiple convert their counts as mpi4py does
                raise MPIException(ERR_ARG, f"{call}: maxprocs={count!r} for {command!r}: give a count >= 1")
            programs += [(appnum, program)] * count
            counts.append(count)
    except MPIException as exc:
        return False, exc.detail or str(exc)
    port = Open_port()
    try:
        st.rt.world.transport.spawn(len(programs), run_spawned, (programs, port))
    except SimdistError as exc:
        Close_port(port)
        return False, f"{call}: {exc}"
    return True, (port, counts)


def _program(command, argv, call: str) -> tuple[str, str, list[str]]:
    """What a spawned process runs: ("path" | "module" | "code", target, sys.argv[1:])."""
    if not isinstance(command, (str, os.PathLike)):
        raise MPIException(ERR_ARG, f"{call}: command={command!r}: expected a str")
    command = os.fspath(command)
    argv = [] if argv is None else [os.fspath(a) for a in ([argv] if isinstance(argv, str) else argv)]
    if _is_python(command):
        return _python_program(command, argv, call)
    if _python_script(command):
        return "path", command, argv
    raise MPIException(ERR_SPAWN, f"{call}: {command!r} is not a Python program; the simulator runs Python "
                                  "programs only in its processes (sys.executable with a script, -m or -c, or a "
                                  "script whose #! line names python)")


def _is_python(command: str) -> bool:
    return (os.path.realpath(command) == os.path.realpath(sys.executable)
            or bool(_PYTHON.match(os.path.basename(command))))


def _python_script(command: str) -> bool:
    try:
        with open(command, "rb") as fh:
            first = fh.readline(256)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def _python_program(command: str, argv: list[str], call: str) -> tuple[str, str, list[str]]:
    """Read the interpreter's options as ``python`` does, up to the program."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-c", "-m"):
            if i + 1 == len(argv):
                raise MPIException(ERR_ARG, f"{call}: {command} {' '.join(argv)}: {arg} needs an argument")
            kind = "code" if arg == "-c" else "module"
            return kind, argv[i + 1], argv[i + 2:]
        if arg in _VALUED:
            i += 2
        elif arg.startswith("-") and arg != "-":
            i += 1
        else:
            return "path", arg, argv[i + 1:]
    raise MPIException(ERR_SPAWN, f"{call}: {command} {' '.join(argv)}: no script, -m or -c; an interactive "
                                  "interpreter cannot run in a simulated process")
