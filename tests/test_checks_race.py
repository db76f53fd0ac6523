"""``simdist run --check=race``: wildcard receives re-run with each other
admissible match, a changed result reported with the two schedules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from simdist.checks._races import Result, alternatives

ROOT = Path(__file__).parent.parent
PROGRAMS = Path(__file__).parent / "check_programs"


def _run(program: Path, ranks: int, tmp_path: Path, *extra: str) -> tuple[dict, subprocess.CompletedProcess]:
    report = tmp_path / f"findings-{len(list(tmp_path.iterdir()))}.json"
    cmd = [sys.executable, "-m", "simdist", "run", "-n", str(ranks), "--timeout", "30", "--check=race",
           "--check-json", str(report), *extra, str(program)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(report.read_text()), proc


def _program(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(textwrap.dedent(text))
    return path


def _decision(k, source, after, clock, tag=0):
    return {"k": k, "call": "recv(source=ANY_SOURCE, tag=0)", "site": ["p.py", 3], "ctx": 0, "tag": tag,
            "source": source, "world": source, "after": after, "clock": clock}


def test_only_the_first_free_message_of_each_other_sender_not_sent_after_the_receive_is_an_alternative():
    # arrivals: [world, ctx, source, tag, clock, consumed at]
    arrivals = [[1, 0, 1, 0, 1, 0],      # matched by decision 1
                [1, 0, 1, 0, 2, 1],      # rank 1 again: never an alternative of its own earlier message
                [2, 0, 2, 0, 1, 2],      # rank 2, concurrent: the alternative
                [2, 0, 2, 0, 2, None],   # rank 2's second message: behind its first (non-overtaking)
                [3, 0, 3, 0, 9, None],   # rank 3 sent it after the receive (clock after it)
                [4, 0, 4, 7, 1, None],   # another tag
                [5, 1, 5, 0, 1, None]]   # another communicator
    result = Result({}, 0, "", {0: [_decision(1, 1, after=1, clock=2)]}, {0: arrivals})
    assert [(rank, d["k"], s) for rank, d, s in alternatives(result)] == [(0, 1, 2)]


def test_a_message_consumed_before_the_decision_is_no_alternative():
    arrivals = [[2, 0, 2, 0, 1, 0], [1, 0, 1, 0, 1, 1]]  # rank 2's consumed first, then decision 1 took rank 1's
    result = Result({}, 0, "", {0: [_decision(1, 1, after=2, clock=3)]}, {0: arrivals})
    assert alternatives(result) == []


@pytest.mark.slow
def test_the_order_of_arrival_printed_is_a_race_with_both_schedules(tmp_path):
    found, proc = _run(PROGRAMS / "race_first_come.py", 3, tmp_path)
    assert proc.returncode == 3, proc.stderr
    [finding] = found["findings"]
    assert finding["kind"] == "race" and finding["details"]["sources"] == [1, 2]
    assert "'from 1' vs 'from 2'" in finding["message"]
    assert finding["calls"][0]["site"] == "race_first_come.py:11"
    assert "1 other admissible matches, 1 re-runs" in proc.stderr


@pytest.mark.slow
def test_the_same_program_gives_the_same_findings_every_time(tmp_path):
    first, _ = _run(PROGRAMS / "race_any_tag.py", 3, tmp_path)
    second, _ = _run(PROGRAMS / "race_any_tag.py", 3, tmp_path)
    assert first == second and first["count"] == 1


@pytest.mark.slow
def test_a_single_possible_sender_needs_no_rerun(tmp_path):
    found, proc = _run(PROGRAMS / "correct_single_sender.py", 3, tmp_path)
    assert found["count"] == 0 and proc.returncode == 0
    assert "3 wildcard matches, 0 other admissible matches, 0 re-runs" in proc.stderr


@pytest.mark.slow
def test_the_bound_limits_the_reruns(tmp_path):
    found, proc = _run(PROGRAMS / "race_first_come.py", 3, tmp_path, "--race-runs", "0")
    assert found["count"] == 0 and "0 re-runs (at most 0)" in proc.stderr


@pytest.mark.slow
def test_an_order_that_hangs_is_a_race(tmp_path):
    program = _program(tmp_path, """\
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            status = MPI.Status()
            comm.recv(source=MPI.ANY_SOURCE, tag=0, status=status)
            if status.Get_source() == 2:
                comm.recv(source=1, tag=5)  # rank 1 never sends tag 5
            comm.recv(source=MPI.ANY_SOURCE, tag=0)
        else:
            comm.send(comm.rank, dest=0, tag=0)
        """)
    found, proc = _run(program, 3, tmp_path)
    [finding] = found["findings"]
    assert finding["calls"][0]["site"] == "prog.py:5", proc.stderr
    assert "exit status 0 vs 1 (CollectiveMismatch: Wait for recv(source=1, tag=5)" in finding["message"]


@pytest.mark.slow
def test_a_message_sent_after_a_barrier_that_follows_the_receive_is_no_race(tmp_path):
    # The clock does not see the barrier's order; the re-run that waits for rank 2's message
    # never gets it and is dropped, not reported.
    program = _program(tmp_path, """\
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            a = comm.recv(source=MPI.ANY_SOURCE, tag=0)
            comm.Barrier()
            print(a, comm.recv(source=MPI.ANY_SOURCE, tag=0))
        elif comm.rank == 1:
            comm.send(1, dest=0, tag=0)
            comm.Barrier()
        else:
            comm.Barrier()
            comm.send(2, dest=0, tag=0)
        """)
    found, proc = _run(program, 3, tmp_path)
    assert found["count"] == 0 and "1 of them never got the message" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_output_that_differs_between_two_runs_with_the_same_matches_is_not_compared(tmp_path):
    program = _program(tmp_path, """\
        import time
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        if comm.rank == 0:
            print("started at", time.perf_counter_ns())
            print("sum", sum(comm.recv(source=MPI.ANY_SOURCE, tag=0) for _ in range(comm.size - 1)))
        else:
            comm.send(comm.rank, dest=0, tag=0)
        """)
    found, proc = _run(program, 3, tmp_path)
    assert found["count"] == 0 and "1 re-runs (at most 16) and a control run" in proc.stderr, proc.stderr
