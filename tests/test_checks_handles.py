"""``--check=handle-at-finalize``: the handles a program made and has not
freed when it ends (MPI.Finalize, or the end of its script), one finding per
line that made them, with their count; freed, predefined and library
handles are not the program's to free."""

from __future__ import annotations

import textwrap

import pytest

from simdist import checks
from simdist._script import run_script

pytestmark = pytest.mark.slow  # each runs a world of ranks (about 1 s)


def _held(tmp_path, source: str, size: int = 2, kinds: str = "handle-at-finalize"):
    """The run's outcome and its findings as (kind, rank, line, count, handle)."""
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent(source))
    outcome = run_script(str(program), [], size, timeout=60, checks=checks.parse(kinds))
    found = sorted((f.kind, c.rank, c.line, f.details.get("count"), f.details.get("handle"))
                   for f in outcome.findings for c in f.calls)
    return outcome, found


def test_each_kind_of_handle_held_at_finalize_is_counted_at_the_line_that_made_it(tmp_path):
    outcome, found = _held(tmp_path, """\
        from mpi4py import MPI
        import numpy as np
        world = MPI.COMM_WORLD
        halves = world.Split(world.rank % 2, world.rank)
        group = world.Get_group()
        pairs = [MPI.DOUBLE.Create_contiguous(2).Commit() for _ in range(3)]
        win = MPI.Win.Allocate(8, comm=world)
        op = MPI.Op.Create(lambda a, b, t: None, commute=True)
        freed = world.Dup()
        freed.Free()
        real = MPI.Datatype.Create_f90_real(6, 30)  # predefined: never the program's to free
        MPI.Finalize()
        """, size=1)
    assert found == [("handle-at-finalize", 0, 4, 1, "communicator"), ("handle-at-finalize", 0, 5, 1, "group"),
                     ("handle-at-finalize", 0, 6, 3, "datatype"), ("handle-at-finalize", 0, 7, 1, "window"),
                     ("handle-at-finalize", 0, 8, 1, "op")], outcome.error
    assert outcome.status == checks.FOUND
    assert "3 datatypes made by Create_contiguous" in outcome.findings[2].message


def test_without_finalize_the_end_of_the_script_counts_and_dropped_handles_count_too(tmp_path):
    """mpi4py finalizes at exit; a handle dropped unfreed is never freed either."""
    outcome, found = _held(tmp_path, """\
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        def size_of_a_copy():
            return world.Dup().Get_size()
        for step in range(2):
            size_of_a_copy()
        kept = world.Dup()
        """)
    assert found == [("handle-at-finalize", 0, 4, 2, "communicator"), ("handle-at-finalize", 0, 7, 1, "communicator"),
                     ("handle-at-finalize", 1, 4, 2, "communicator"), ("handle-at-finalize", 1, 7, 1, "communicator")], \
        outcome.error


def test_a_program_that_frees_what_it_makes_gives_no_finding(tmp_path):
    outcome, found = _held(tmp_path, """\
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        cart = world.Create_cart([world.size], periods=[True])
        row = cart.Sub([True])
        group = row.Get_group()
        vector = MPI.INT.Create_vector(2, 1, 2).Commit()
        for handle in (group, vector, row, cart):
            handle.Free()
        """, kinds="misuse")
    assert found == [] and outcome.status == 0, outcome.error


def test_handle_at_finalize_can_be_dropped_from_the_list(tmp_path):
    outcome, found = _held(tmp_path, """\
        from mpi4py import MPI
        kept = MPI.COMM_WORLD.Dup()
        """, kinds="misuse,-handle-at-finalize")
    assert found == [] and outcome.status == 0, outcome.error
