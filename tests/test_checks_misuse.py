"""The misuse checks of ``simdist run --check`` on the simulated mpi4py:
type-mismatch, buffer-in-use, request-leak, handle-leak, unreceived and
finalize-pending, each on a program that holds the bug next to code that
does not, so that a missing finding and a false one both fail."""

from __future__ import annotations

import textwrap

import pytest

from simdist import checks
from simdist._script import run_script

pytestmark = pytest.mark.slow  # each runs a world of ranks (about 1 s)


def _run(tmp_path, source: str, size: int = 2, kinds: str = "misuse"):
    """The findings of a run of ``source``, as (kind, [(rank, line), ...])."""
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent(source))
    outcome = run_script(str(program), [], size, timeout=60, checks=checks.parse(kinds))
    found = sorted((f.kind, sorted((c.rank, c.line) for c in f.calls)) for f in outcome.findings)
    return outcome, found


def test_a_truncation_that_ends_the_program_names_both_sides(tmp_path):
    outcome, found = _run(tmp_path, """\
        from mpi4py import MPI
        import numpy as np
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            comm.Send(np.arange(8.0), dest=1, tag=0)
        else:
            comm.Recv(np.zeros(4), source=0, tag=0)
        """)
    assert found == [("type-mismatch", [(0, 5), (1, 7)])], outcome.error
    assert "64 bytes" in outcome.findings[0].message and outcome.status == 1


def test_a_truncation_the_program_handles_is_its_business(tmp_path):
    """Open MPI raises ERR_TRUNCATE; a program that catches it (as a test of
    error handling does) made no mistake."""
    outcome, found = _run(tmp_path, """\
        from mpi4py import MPI
        import numpy as np
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            comm.Send(np.arange(8.0), dest=1, tag=0)
            comm.Send(np.arange(8, dtype=np.int32), dest=1, tag=1)
        else:
            try:
                comm.Recv(np.zeros(4), source=0, tag=0)
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_TRUNCATE
            comm.Recv(np.zeros(4), source=0, tag=1)
        """)
    assert found == [("type-mismatch", [(0, 6), (1, 12)])], outcome.error


def test_reinterpreted_bytes_are_found_and_matching_signatures_are_not(tmp_path):
    """A derived datatype matches its basic elements; MPI.BYTE matches
    anything; an int64 array received as float64 is a reinterpretation."""
    outcome, found = _run(tmp_path, """\
        from mpi4py import MPI
        import numpy as np
        comm = MPI.COMM_WORLD
        pair = MPI.DOUBLE.Create_contiguous(2).Commit()
        if comm.rank == 0:
            comm.Send([np.arange(4.0), 2, pair], dest=1, tag=0)
            comm.Send(np.arange(4.0), dest=1, tag=1)
            comm.Send(np.arange(4), dest=1, tag=2)
        else:
            comm.Recv(np.zeros(4), source=0, tag=0)
            comm.Recv([bytearray(32), MPI.BYTE], source=0, tag=1)
            comm.Recv(np.zeros(4), source=0, tag=2)
        pair.Free()
        """)
    assert found == [("type-mismatch", [(0, 8), (1, 12)])], outcome.error
    assert "int64" in outcome.findings[0].message and "float64" in outcome.findings[0].message


def test_a_receive_buffer_written_before_wait_is_in_use(tmp_path):
    outcome, found = _run(tmp_path, """\
        from mpi4py import MPI
        import numpy as np
        comm = MPI.COMM_WORLD
        buf = np.zeros(4)
        if comm.rank == 0:
            comm.Send(np.arange(4.0), dest=1, tag=0)
            comm.Send(np.arange(4.0), dest=1, tag=1)
        else:
            request = comm.Irecv(buf, source=0, tag=0)
            while not request.Get_status():
                pass
            buf[1] = -1.0
            request.Wait()
            request = comm.Irecv(buf, source=0, tag=1)
            request.Wait()
            buf[1] = -1.0
        """)
    assert found == [("buffer-in-use", [(1, 9)])], outcome.error


def test_persistent_requests_must_be_freed_and_a_completed_sendrecv_leaks_nothing(tmp_path):
    outcome, found = _run(tmp_path, """\
        from mpi4py import MPI
        import numpy as np
        comm = MPI.COMM_WORLD
        peer = 1 - comm.rank
        out, got = np.arange(2.0), np.zeros(2)
        send = comm.Send_init(out, dest=peer, tag=0)
        recv = comm.Recv_init(got, source=peer, tag=0)
        MPI.Prequest.Startall([send, recv])
        MPI.Request.Waitall([send, recv])
        recv.Free()
        comm.Isendrecv(out, peer, 1, got, peer, 1).Wait()
        MPI.Request.Waitall([comm.Isend(out, dest=peer, tag=2), comm.Irecv(got, source=peer, tag=2)])
        """)
    assert found == [("request-leak", [(0, 6)]), ("request-leak", [(1, 6)])], outcome.error


def test_a_message_sent_just_before_its_sender_ends_is_found_unreceived(tmp_path):
    """Rank 0 ends at once; rank 2 sends to it late: the end of the run
    takes every message still in flight before it reports."""
    outcome, found = _run(tmp_path, """\
        from mpi4py import MPI
        import time
        comm = MPI.COMM_WORLD
        if comm.rank == 2:
            time.sleep(0.5)
            comm.send("late", dest=0, tag=3)
        if comm.rank == 1:
            comm.send("received", dest=2, tag=4)
        if comm.rank == 2:
            assert comm.recv(source=1, tag=4) == "received"
        """, size=3)
    assert found == [("unreceived", [(2, 6)])], outcome.error
    assert "from rank 2 to rank 0 (tag=3)" in outcome.findings[0].message


def test_finalize_with_a_pending_send_is_found_and_the_program_still_ends(tmp_path):
    outcome, found = _run(tmp_path, """\
        from mpi4py import MPI
        import numpy as np
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            request = comm.Issend(np.arange(4.0), dest=1, tag=0)
        MPI.Finalize()
        """)
    assert found == [("finalize-pending", [(0, 5)]), ("unreceived", [(0, 5)])], outcome.error
    assert outcome.status == checks.FOUND


def test_handles_dropped_in_a_loop_leak_and_one_dropped_once_or_kept_to_the_end_do_not(tmp_path):
    outcome, found = _run(tmp_path, """\
        from mpi4py import MPI
        world = MPI.COMM_WORLD
        kept = world.Dup()
        for step in range(3):
            group = world.Get_group()
            MPI.Datatype.Create_f90_real(6, 30)  # a predefined datatype: never freed
        kept.Barrier()
        def once():
            return world.Split(0, world.rank).Get_size()  # dropped once: a bounded leak
        once()
        """, kinds="handle-leak")
    assert found == [("handle-leak", [(0, 5)]), ("handle-leak", [(1, 5)])], outcome.error


def test_a_handle_or_request_a_library_makes_is_not_the_programs(tmp_path):
    """An installed package's handles and requests are its own business."""
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "helperlib.py").write_text(textwrap.dedent("""\
        from mpi4py import MPI
        def total(value):
            MPI.COMM_WORLD.Isend(b"x", dest=MPI.COMM_WORLD.rank, tag=9).Free()
            MPI.COMM_WORLD.Recv(bytearray(1), source=MPI.COMM_WORLD.rank, tag=9)
            return MPI.COMM_WORLD.Dup().allreduce(value)
        """))
    outcome, found = _run(tmp_path, f"""\
        import sys
        sys.path.insert(0, {str(library)!r})
        import helperlib
        from mpi4py import MPI
        for step in range(3):
            helperlib.total(step)
            MPI.COMM_WORLD.Dup().Barrier()
        """)
    assert found == [("handle-at-finalize", [(0, 7)]), ("handle-at-finalize", [(1, 7)]),
                     ("handle-leak", [(0, 7)]), ("handle-leak", [(1, 7)])], outcome.error
