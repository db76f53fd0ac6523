"""A call of the mpi4py stand-in that raises leaves nothing behind in the
matching engine: no posted receive, no half-sent message, no started
collective (issue 24).

``mpi4py_programs/simdist_failed_calls.py`` calls every point-to-point call
and every collective with each bad argument in turn, then makes a correct
exchange on the same communicator; here it runs under ``simdist run`` on
1 to 3 ranks with the cases mpi4py itself gets wrong included
(test_mpi4py_programs.py compares the rest with Open MPI). The issue's
reproducers run as they were filed.
"""

from __future__ import annotations

import pathlib
import textwrap

import pytest

from simdist._script import run_script

PROGRAM = pathlib.Path(__file__).resolve().parent / "mpi4py_programs" / "simdist_failed_calls.py"


def run(tmp_path, source: str, n: int):
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(source))
    return run_script(str(path), [], n, timeout=20.0)


@pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow)])
def test_every_call_with_a_bad_argument_is_followed_by_a_correct_exchange(n, capfd):
    outcome = run_script(str(PROGRAM), ["--beyond-mpi4py"], n, timeout=20.0)
    out = capfd.readouterr().out.splitlines()
    assert outcome.status == 0, outcome.error
    assert not [line for line in out if "WRONG" in line or "no error" in line]
    cases = {line.rsplit(": ", 1)[0].split(" ", 2)[2] for line in out}
    # every kind of call, on COMM_WORLD, COMM_SELF and a Dup
    for call in ("Sendrecv(recvbuf", "Sendrecv_replace(dest", "sendrecv(sendobj", "sendrecv(source",
                 "Startall(", "Send_init(buf", "Recv_init(tag", "Mprobe(source", "Bcast(root", "allgather(sendobj"):
        for comm in ("COMM_WORLD", "COMM_SELF", "Dup"):
            assert any(case.startswith(f"{comm} {call}") for case in cases), (comm, call)
    assert len(out) == n * len(cases) and len(cases) > 500


def test_a_sendrecv_whose_send_buffer_is_refused_posts_no_receive(tmp_path, capfd):
    outcome = run(tmp_path, """
        from mpi4py import MPI
        import numpy as np
        stale = np.zeros(3)
        try:
            MPI.COMM_SELF.Sendrecv(np.ones([3, 2])[:, 0], 0, 0, stale, 0, 0)
        except BufferError:
            pass
        r = np.zeros(3)
        req = MPI.COMM_SELF.Irecv(r, 0, 0)
        MPI.COMM_SELF.Send(np.full(3, 7.0), 0, 0)
        print(req.Test(), r, stale)
    """, 1)
    assert outcome.status == 0, outcome.error
    assert capfd.readouterr().out == "True [7. 7. 7.] [0. 0. 0.]\n"


def test_a_sendrecv_of_an_unpicklable_object_posts_no_receive(tmp_path, capfd):
    outcome = run(tmp_path, """
        import threading
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        peer = 1 - comm.rank
        try:
            comm.sendrecv(threading.Lock(), peer, 0, None, peer, 0)
        except TypeError:
            pass
        req = comm.irecv(source=peer, tag=0)
        comm.send(f"from {comm.rank}", peer, 0)
        print(req.wait())
    """, 2)
    assert outcome.status == 0, outcome.error
    assert sorted(capfd.readouterr().out.splitlines()) == ["from 0", "from 1"]
