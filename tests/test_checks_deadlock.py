"""Deadlocks in MPI terms, unsafe buffering and ``World(check=...)``.

The simulated mpi4py waits for every MPI call in the transport's probe from
any rank; it states the MPI call and its peer (``Transport.waiting_in``), so
a deadlock names ``Recv(source=1, tag=0)`` and the user's line, not the
stand-in's probe. With the buffering check, standard sends run synchronous,
and those that only complete because MPI would buffer them are reported.
"""

from __future__ import annotations

import inspect
import os
import sys
import textwrap

import pytest

import simdist
from simdist import checks
from simdist._script import run_script

HERE = os.path.abspath(__file__)


def _line(fn, marker: str) -> int:
    """The line of ``fn``'s source that holds ``marker``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, text in enumerate(lines) if marker in text)


@pytest.fixture(scope="module")
def world():
    with simdist.World(2, timeout=30) as w:
        yield w


def _mpi(comm):
    from fake_backends.mpi4py import installed

    return installed(comm)


def recv_recv(comm):
    import numpy as np

    with _mpi(comm) as MPI:
        buf = np.zeros(4)
        MPI.COMM_WORLD.Recv(buf, source=1 - comm.rank, tag=0)  # here


def large_sends(comm):
    import numpy as np

    with _mpi(comm) as MPI:
        MPI.COMM_WORLD.Send(np.zeros(1 << 18), dest=1 - comm.rank, tag=3)  # here


def ssends(comm):
    import numpy as np

    with _mpi(comm) as MPI:
        MPI.COMM_WORLD.Ssend(np.zeros(2), dest=1 - comm.rank, tag=4)  # here


def irecv_wait(comm):
    import numpy as np

    with _mpi(comm) as MPI:
        req = MPI.COMM_WORLD.Irecv(np.zeros(2), source=1 - comm.rank, tag=5)
        req.Wait()  # here


def waitall(comm):
    import numpy as np

    with _mpi(comm) as MPI:
        reqs = [MPI.COMM_WORLD.Irecv(np.zeros(2), source=1 - comm.rank, tag=6)]
        MPI.Request.Waitall(reqs)  # here


def probe(comm):
    with _mpi(comm) as MPI:
        MPI.COMM_WORLD.Probe(source=1 - comm.rank, tag=7)  # here


def sendrecv(comm):
    import numpy as np

    with _mpi(comm) as MPI:  # the tags never match: each receive waits for the other rank
        MPI.COMM_WORLD.Sendrecv(np.zeros(2), dest=1 - comm.rank, sendtag=1, recvbuf=np.zeros(2),  # here
                                source=1 - comm.rank, recvtag=8)


CASES = [
    (recv_recv, "Recv(source={peer}, tag=0)"),
    (large_sends, "Send(dest={peer}, tag=3)"),
    (ssends, "Ssend(dest={peer}, tag=4)"),
    (irecv_wait, "Wait for Irecv(source={peer}, tag=5)"),
    (waitall, "Waitall for Irecv(source={peer}, tag=6)"),
    (probe, "Probe(source={peer}, tag=7)"),
    (sendrecv, "Sendrecv(source={peer}, tag=8)"),
]


@pytest.mark.parametrize("program, call", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_a_deadlock_of_mpi_calls_names_each_call_its_peer_and_line(world, program, call):
    with pytest.raises(simdist.Deadlock) as info:
        world.run(program)
    err = info.value
    line = _line(program, "# here")
    expected = [(r, f"{call.format(peer=1 - r)} at {os.path.basename(HERE)}:{line}") for r in (0, 1)]
    assert err.at_once and err.closed and err.cycle == expected, str(err)
    assert err.locations == {0: (HERE, line), 1: (HERE, line)}
    assert str(err).startswith(f"deadlock: rank 0 in {expected[0][1]} <- rank 1 in {expected[1][1]} <- rank 0")
    assert f"waiting in {expected[1][1]}, on rank 0" in err.report[1]


def barrier_against_recv(comm):
    import numpy as np

    with _mpi(comm) as MPI:
        if comm.rank == 0:
            MPI.COMM_WORLD.Barrier()  # here
        else:
            MPI.COMM_WORLD.Recv(np.zeros(1), source=0, tag=9)  # recv


def test_a_collective_waiting_for_a_rank_stuck_in_recv_closes_a_mixed_cycle(world):
    with pytest.raises(simdist.Deadlock) as info:
        world.run(barrier_against_recv)
    err = info.value
    assert err.closed and [r for r, _ in err.cycle] == [0, 1], str(err)
    assert err.cycle[1][1] == f"Recv(source=0, tag=9) at {os.path.basename(HERE)}:{_line(barrier_against_recv, '# recv')}"
    assert err.locations[0] == (HERE, _line(barrier_against_recv, "# here"))


def probe_any(comm):
    with _mpi(comm) as MPI:
        MPI.COMM_WORLD.Probe(source=MPI.ANY_SOURCE, tag=1)  # here


def test_a_receive_from_any_source_ends_the_chain_with_any_rank(world):
    with pytest.raises(simdist.Deadlock) as info:
        world.run(probe_any)
    err = info.value
    assert not err.closed and err.cycle[0][1].startswith("Probe(source=ANY_SOURCE, tag=1) at "), str(err)
    assert str(err).splitlines()[0].endswith("<- any rank")


def test_the_deadlock_finding_names_the_mpi_calls_with_their_files_and_lines(world):
    with pytest.raises(simdist.Deadlock) as info:
        world.run(recv_recv)
    finding = checks.deadlock_finding(info.value, {"deadlock"})
    line = _line(recv_recv, "# here")
    assert finding.kind == "deadlock"
    assert finding.calls == (checks.Call(0, "Recv(source=1, tag=0)", HERE, line),
                             checks.Call(1, "Recv(source=0, tag=0)", HERE, line))


def test_a_state_a_wait_ends_with_clears_the_mpi_call(world):
    """A stated call lasts only while the engine waits: a later hang of the
    contract's own calls is reported in its own terms."""
    def program(comm):
        import numpy as np

        import time

        with _mpi(comm) as MPI:
            peer = 1 - comm.rank
            if comm.rank == 0:
                MPI.COMM_WORLD.Recv(np.zeros(1), source=peer)  # waits: rank 1 sends late
            else:
                time.sleep(0.2)
                MPI.COMM_WORLD.Send(np.zeros(1), dest=peer)
        comm.recv(source=peer)

    with pytest.raises(simdist.Deadlock) as info:
        world.run(program)
    assert info.value.cycle[0][1].startswith("recv(source=1, tag=0) at "), str(info.value)


# -- unsafe buffering ---------------------------------------------------------------------------

EXCHANGE = """\
from mpi4py import MPI
import numpy as np
comm = MPI.COMM_WORLD
peer = 1 - comm.rank
out, into = np.full({n}, comm.rank, "f8"), np.empty({n})
for step in range(3):
    comm.Send(out, dest=peer, tag=step)  # send
    comm.Recv(into, source=peer, tag=step)
print("rank", comm.rank, "got", into[0])
"""


@pytest.mark.slow
@pytest.mark.parametrize("n", [128, 1 << 17])
def test_every_send_that_relies_on_buffering_is_reported_and_the_program_runs_on(tmp_path, capfd, n):
    path = tmp_path / "exchange.py"
    path.write_text(EXCHANGE.format(n=n))
    outcome = run_script(str(path), [], 2, timeout=30.0, checks=frozenset({"buffering"}))
    assert outcome.status == checks.FOUND, outcome.error
    line = EXCHANGE.splitlines().index(next(t for t in EXCHANGE.splitlines() if "# send" in t)) + 1
    assert [(f.kind, f.calls) for f in outcome.findings] == [
        ("buffering", (checks.Call(r, f"Send(dest={1 - r}, tag=0)", str(path), line),)) for r in (0, 1)]
    out = capfd.readouterr().out
    assert "rank 0 got 1.0" in out and "rank 1 got 0.0" in out


def test_without_the_buffering_check_a_small_exchange_passes(tmp_path):
    path = tmp_path / "exchange.py"
    path.write_text(EXCHANGE.format(n=128))
    outcome = run_script(str(path), [], 2, timeout=30.0, checks=frozenset({"deadlock"}))
    assert outcome.status == 0 and outcome.findings == [], outcome.error


def buffered_exchange(comm):
    import numpy as np

    with _mpi(comm) as MPI:
        MPI.COMM_WORLD.Send(np.zeros(4), dest=1 - comm.rank, tag=0)  # here
        MPI.COMM_WORLD.Recv(np.zeros(4), source=1 - comm.rank, tag=0)
    return comm.rank


def test_world_check_buffering_releases_mpi_sends_and_raises_with_the_results():
    with simdist.World(2, check="buffering", timeout=30) as world:
        with pytest.raises(simdist.ChecksFailed) as info:
            world.run(buffered_exchange)
    err = info.value
    line = _line(buffered_exchange, "# here")
    assert err.results == [0, 1]
    assert [(f.kind, f.calls) for f in err.findings] == [
        ("buffering", (checks.Call(r, f"Send(dest={1 - r}, tag=0)", HERE, line),)) for r in (0, 1)]
    assert "[buffering]" in str(err) and "fix: post the receive first" in str(err)


# -- World(check=...) on simdist's communicator ---------------------------------------------------

def unsafe_ring(comm):
    comm.send(comm.rank, dest=(comm.rank + 1) % comm.size)  # here
    return comm.recv(source=(comm.rank - 1) % comm.size)


def test_world_check_finds_a_ring_that_relies_on_buffered_sends():
    with simdist.World(2, check=["buffering"], timeout=30) as world:
        with pytest.raises(simdist.ChecksFailed) as info:
            world.run(unsafe_ring)
        assert world.run(lambda comm: comm.rank) == [0, 1]  # usable after
    err = info.value
    line = _line(unsafe_ring, "# here")
    assert isinstance(err.__cause__, simdist.Deadlock) and err.results is None
    assert [f.kind for f in err.findings] == ["buffering"]
    assert err.findings[0].calls == tuple(checks.Call(r, f"send(dest={1 - r}, tag=0)", HERE, line) for r in (0, 1))


def test_world_check_deadlock_alone_lets_buffered_sends_pass_and_reports_a_recv_cycle():
    def recv_first(comm):
        return comm.recv(source=1 - comm.rank)  # here

    with simdist.World(2, check="deadlock", timeout=30) as world:
        assert world.run(unsafe_ring) == [1, 0]
        with pytest.raises(simdist.ChecksFailed) as info:
            world.run(recv_first)
    assert [f.kind for f in info.value.findings] == ["deadlock"]
    assert info.value.findings[0].calls[0].line == _line(recv_first, "# here")


def test_world_check_collective_order_turns_a_mismatch_into_a_finding():
    import numpy as np

    def mismatched(comm):
        if comm.rank == 0:
            comm.barrier()
        else:
            comm.allreduce(np.ones(2))

    with pytest.raises(simdist.ChecksFailed) as info:
        simdist.run(mismatched, 2, check="collective-order", timeout=30)
    assert [f.kind for f in info.value.findings] == ["collective-order"]
    assert isinstance(info.value.__cause__, simdist.CollectiveMismatch)


@pytest.mark.parametrize("check, error", [("nope", simdist.InvalidValue), (3, simdist.InvalidType),
                                          (["deadlock", 1], simdist.InvalidType)])
def test_world_check_refuses_what_is_not_a_list_of_kinds(check, error):
    with pytest.raises(error, match="check"):
        simdist.World(2, check=check)


def test_checks_failed_pickles_with_its_findings():
    import pickle

    found = [checks.Finding("deadlock", "m", "f", (checks.Call(0, "Recv(source=1, tag=0)", HERE, 3),))]
    err = pickle.loads(pickle.dumps(simdist.ChecksFailed("text", found, [1, 2])))
    assert (str(err), err.findings, err.results) == ("text", found, [1, 2])


# -- simdist run --check -m pytest ---------------------------------------------------------------

@pytest.mark.slow
def test_simdist_run_check_runs_pytest_on_every_rank_and_reports_its_findings(tmp_path):
    import json
    import subprocess

    (tmp_path / "test_exchange.py").write_text(textwrap.dedent("""\
        from mpi4py import MPI
        import numpy as np

        def test_exchange():
            comm = MPI.COMM_WORLD
            peer = 1 - comm.rank
            comm.Send(np.zeros(8), dest=peer, tag=0)
            comm.Recv(np.zeros(8), source=peer, tag=0)
        """))
    report = tmp_path / "found.json"
    root = os.path.dirname(os.path.dirname(HERE))
    proc = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "2", "--check=buffering", "--check-json",
                           str(report), "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_exchange.py"],
                          capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": root})
    found = json.loads(report.read_text())
    assert proc.returncode == checks.FOUND, proc.stderr + proc.stdout
    assert "1 passed" in proc.stdout
    assert [(f["kind"], f["calls"][0]["site"]) for f in found["findings"]] == [("buffering", "test_exchange.py:7")] * 2


def test_a_rank_that_returns_while_a_peer_waits_in_a_collective_is_no_collective_order_finding():
    """It ends the run with its own CollectiveMismatch; no collective was called out of order."""
    def one_returns(comm):
        if comm.rank == 0:
            comm.barrier()

    with pytest.raises(simdist.CollectiveMismatch, match="has returned"):
        simdist.run(one_returns, 2, check="collective-order", timeout=30)
