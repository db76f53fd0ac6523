"""Running an SPMD script on every rank, as ``mpiexec`` would (``simdist run``).

Each rank executes the script (or module) as ``__main__`` with the given
``sys.argv``; inside, :func:`simdist.comm` returns the rank's communicator.
The ranks' output goes straight to the terminal. A ``sys.exit(code)`` ends
the rank with that code; an exception fails the run with its traceback.
"""

from __future__ import annotations

import os
import runpy
import sys
from dataclasses import dataclass, field

from ._errors import CollectiveMismatch, CollectiveTimeout, RankDied, RankError, SimdistError
from ._world import World

#: Exit status of a run that hung (as ``timeout(1)``).
HUNG = 124


@dataclass
class ScriptOutcome:
    """How a script ran: ``status`` is the process exit status to use."""

    status: int
    codes: list = field(default_factory=list)  # each rank's exit code, when all ranks ended
    error: str = ""  # the failure report, empty on success


def _rank_main(comm, target: str, argv: list[str], module: bool) -> int:
    """Run the script as ``__main__`` on this rank; return its exit code."""
    old_argv = sys.argv[:]
    sys.argv = [target, *argv]
    for stream in (sys.stdout, sys.stderr):  # whole lines per write: ranks share the terminal
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True, write_through=False)
    if module and os.getcwd() not in sys.path:  # as `python -m` does
        sys.path.insert(0, os.getcwd())
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    finally:
        sys.argv = old_argv
        sys.stdout.flush()
        sys.stderr.flush()


def run_script(target: str, argv: list[str], size: int, *, module: bool = False, backend: str = "sim",
               timeout: float = 60.0) -> ScriptOutcome:
    """Run ``target`` (a path, or a module name with ``module=True``) on
    ``size`` ranks; return the outcome instead of raising."""
    if not module and not os.path.isfile(target):
        return ScriptOutcome(2, error=f"simdist run: no such script: {target}")
    try:
        with World(size, backend=backend, timeout=timeout) as world:
            codes = world.run(_rank_main, target, list(argv), module)
    except CollectiveTimeout as exc:
        return ScriptOutcome(HUNG, error=f"simdist run: the ranks hung: {exc}")
    except (RankError, CollectiveMismatch, RankDied) as exc:
        return ScriptOutcome(1, error=f"simdist run: {type(exc).__name__}: {exc}")
    except SimdistError as exc:  # the world could not start (e.g. no mpiexec)
        return ScriptOutcome(1, error=f"simdist run: {exc}")
    status = max(codes, key=lambda c: (c != 0, c))  # the first non-zero, as mpiexec reports
    return ScriptOutcome(status, codes)
