"""The program corpus of ``simdist run --check`` (tests/check_programs):
each buggy program gives exactly its finding, each correct one none."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "check_programs"
FAST = {"deadlock_recv_recv.py", "correct_ring.py"}


def _header(path: Path) -> dict:
    head = {}
    for line in path.read_text().splitlines()[:6]:
        match = re.match(r"#\s*(ranks|checks|expect):\s*(.+?)\s*$", line)
        if match:
            head[match[1]] = match[2]
    return head


def _cases():
    for path in sorted(PROGRAMS.glob("*.py")):
        marks = () if path.name in FAST else (pytest.mark.slow,)
        yield pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.parametrize("program", list(_cases()))
def test_the_checks_find_exactly_what_the_program_holds(program, tmp_path):
    head = _header(program)
    assert {"ranks", "expect"} <= head.keys(), f"{program.name}: give '# ranks:' and '# expect:' in its first lines"
    report = tmp_path / "findings.json"
    cmd = [sys.executable, "-m", "simdist", "run", "-n", head["ranks"], "--timeout", "30",
           f"--check={head.get('checks', 'all')}", "--check-json", str(report), str(program)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    found = json.loads(report.read_text())
    kinds = sorted({f["kind"] for f in found["findings"]})
    expected = [] if head["expect"] == "none" else sorted(k.strip() for k in head["expect"].split(","))
    assert kinds == expected, f"{program.name}: found {kinds}, expected {expected}\n{proc.stderr}"
    assert (proc.returncode == 0) == (not expected), proc.stderr
    for finding in found["findings"]:
        sites = [c["site"] for c in finding["calls"]]
        assert any(s.startswith(program.name + ":") for s in sites), f"{finding} names no line of {program.name}"


#: Correct programs of the mpi4py program set that exercise what the checks
#: look at: point to point in every mode, wildcards, requests, communicators
#: made and freed, derived datatypes, nonblocking collectives.
NO_FALSE_ALARMS = ("tutorial_p2p_nonblocking.py", "demo_ring.py", "csc_msg_chain.py", "simdist_requests.py",
                   "simdist_freed_messages.py", "simdist_nonblocking_collectives.py", "simdist_derived_datatypes.py",
                   "demo_jacobi_sendrecv.py", "simdist_communicators.py", "tutorial_p2p_pickle.py")


def _first_case(name: str):
    from test_mpi4py_programs import PROGRAMS, cases_of

    case = next(c for c in cases_of(PROGRAMS / name) if not c.unsupported and not c.known_difference)
    return PROGRAMS / name, case


@pytest.mark.slow
@pytest.mark.parametrize("name", NO_FALSE_ALARMS)
def test_correct_programs_of_the_mpi4py_set_give_no_finding(name, tmp_path):
    path, case = _first_case(name)
    report = tmp_path / "findings.json"
    cmd = [sys.executable, "-m", "simdist", "run", "-n", str(case.size), "--timeout", "60", "--check",
           "--check-json", str(report), str(path), *case.args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
    found = json.loads(report.read_text())
    assert found["findings"] == [], proc.stderr[-3000:]
    assert proc.returncode == case.status, proc.stderr[-3000:]
