"""``--check=read-before-wait``: a nonblocking receive's buffer read before
the request completes gives another result when the message lands at the
completion; the finding names the post and the completion. Reads after the
completion, and a buffer longer than the message, give none."""

from __future__ import annotations

import textwrap

import pytest

from simdist import checks
from simdist._script import run_script

pytestmark = pytest.mark.slow  # each runs a world of ranks and re-runs it


#: The first lines of each program (its line numbers count them).
PRELUDE = "from mpi4py import MPI\nimport numpy as np\ncomm = MPI.COMM_WORLD\npeer = 1 - comm.rank\n"


def _late(tmp_path, source: str, size: int = 2):
    """The run's outcome and its findings as (rank, line) of each call."""
    program = tmp_path / "prog.py"
    program.write_text(PRELUDE + textwrap.dedent(source))
    outcome = run_script(str(program), [], size, timeout=60, checks=checks.parse("read-before-wait"))
    return outcome, [sorted((c.rank, c.line) for c in f.calls) for f in outcome.findings]


def test_of_two_receives_the_one_read_before_wait_is_found_with_its_post_and_completion(tmp_path):
    outcome, found = _late(tmp_path, """\
        early, late = np.zeros(4), np.zeros(4)
        first = comm.Irecv(early, source=peer, tag=0)
        second = comm.Irecv(late, source=peer, tag=1)
        comm.Send(np.full(4, 1.0 + comm.rank), dest=peer, tag=0)
        comm.Send(np.full(4, 3.0 + comm.rank), dest=peer, tag=1)
        comm.Barrier()
        print("early", early.sum())
        MPI.Request.Waitall([first, second])
        print("late", late.sum())
        """)
    assert found == [[(0, 6), (0, 12), (1, 6), (1, 12)]], outcome.error
    finding = outcome.findings[0]
    assert finding.kind == "read-before-wait" and finding.details["post"][1] == 6
    assert "'early 8.0' vs 'early nan'" in finding.message or "'early 4.0' vs 'early nan'" in finding.message
    assert outcome.status == checks.FOUND


def test_persistent_and_matched_receives_read_before_wait_are_found(tmp_path):
    outcome, found = _late(tmp_path, """\
        kept, taken = np.zeros(2, dtype="i4"), np.zeros(2, dtype="i4")
        persistent = comm.Recv_init(kept, source=peer, tag=0)
        persistent.Start()
        comm.Send(np.arange(2, dtype="i4") + 5, dest=peer, tag=0)
        comm.Send(np.arange(2, dtype="i4") + 7, dest=peer, tag=1)
        message = comm.Mprobe(source=peer, tag=1)
        request = message.Irecv(taken)
        comm.Barrier()
        print(kept.tolist(), taken.tolist())
        persistent.Wait()
        request.Wait()
        persistent.Free()
        """)
    assert sorted(f.details["post"][1] for f in outcome.findings) == [7, 11], outcome.error


def test_reads_after_the_completion_and_a_buffer_longer_than_the_message_give_no_finding(tmp_path):
    """The bytes past the message keep their old contents, as under MPI; an
    Isendrecv's message lands at its Wait; Isendrecv_replace sends its
    buffer as it was at the call."""
    outcome, found = _late(tmp_path, """\
        buf = np.arange(8.0)
        request = comm.Irecv(buf, source=peer, tag=0)
        comm.Send(np.full(2, -1.0), dest=peer, tag=0)
        while not request.Test():
            pass
        print(buf.tolist())
        pair, both = np.zeros(2), np.full(2, 1.0 + comm.rank)
        comm.Isendrecv(np.arange(2.0), dest=peer, sendtag=1, recvbuf=pair, source=peer, recvtag=1).Wait()
        comm.Isendrecv_replace(both, dest=peer, sendtag=2, source=peer, recvtag=2).Wait()
        print(pair.tolist(), both.tolist())
        """)
    assert found == [] and outcome.status == 0, outcome.error
