"""The lines that every program of the simulated mpi4py's tests starts
with, and running such a program under ``simdist run``."""

import textwrap

from simdist._script import run_script

PRELUDE = """\
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def error_class(call):
    try:
        call()
    except MPI.Exception as exc:
        return exc.Get_error_class()
    raise AssertionError("no MPI.Exception")
"""


def run_program(tmp_path, source: str, n: int = 2, *, timeout: float = 30.0, header: str = "",
                universe: int | None = None):
    """Run PRELUDE, ``header`` and ``source`` (dedented) as prog.py on ``n`` ranks: its outcome."""
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + header + textwrap.dedent(source))
    return run_script(str(path), [], n, timeout=timeout, universe=universe)


def passes(tmp_path, source: str, n: int = 2, **kwargs):
    """The same, asserting that every rank succeeded."""
    outcome = run_program(tmp_path, source, n, **kwargs)
    assert outcome.status == 0, outcome.error
    return outcome
