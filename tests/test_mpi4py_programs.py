"""mpi4py programs print the same lines under real ``mpiexec`` and under ``simdist run``.

Each program in ``tests/mpi4py_programs/`` (mpi4py's tutorial and demos,
public examples, and a few written here; README.md there lists them) says in
comment lines how it is run and compared:

    # simdist-run: N [ARGS ...] [-> STATUS ["TEXT"]]
        mpiexec -n N python PROGRAM ARGS   and   simdist run -n N PROGRAM ARGS;
        both must exit with STATUS (default 0), and both standard errors
        must contain TEXT if given
    # simdist-run-mpi4py: N [ARGS ...] [-> STATUS ["TEXT"]]
        the same, but under mpiexec as ``python -m mpi4py PROGRAM ARGS``, which
        aborts the job when a rank raises or exits early (plain ``python``
        would leave the other ranks waiting); simdist run always does that
    # simdist-options: OPTIONS
        options of simdist run alone (``--universe U``: the spare slots that
        Spawn needs; under mpiexec the slots are its own)
    # simdist-sub: REGEX => REPLACEMENT
        applied (re.sub) to every line either run prints, for what differs
        from run to run or machine to machine (host names, which worker got
        which task)
    # simdist-unsupported: TEXT
        the program uses a call simdist does not simulate: simdist run must
        fail (status 1) with TEXT in its report, which names the call
    # simdist-known-difference: nN REASON
        the runs on N ranks differ for REASON: the case is expected to fail
        (strictly: once it passes, the line must go)

Both runs must exit with the same status and print the same multiset of
lines: ranks' lines interleave differently under the two, so the sorted
lines are compared. The mpiexec half is Open MPI (or MPICH) as installed
beside this Python, with the flags and environment simdist's own MPI
backend uses (``--oversubscribe`` beyond the usable CPUs; Open MPI's
run-as-root variables when root); it skips where MPI is missing, except in CI.
Both halves run as subprocesses in sessions of their own, killed whole on a
timeout, so no process is left behind.

A last test runs a small pytest suite that uses mpi4py
(``mpi4py_programs/pytest_suite/``) as ``mpiexec -n 2 python -m pytest``
and as ``simdist run -n 2 -m pytest``, as docs/mpi4py.md tells users to.
"""

from __future__ import annotations

import collections
import os
import pathlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from conftest import descendants, dev_shm, mpiexec_or_skip
from simdist.mpi._driver import session_tmpdir

pytestmark = pytest.mark.slow  # about 40 mpiexec jobs of 1-3 s each

PROGRAMS = pathlib.Path(__file__).resolve().parent / "mpi4py_programs"
RUN = re.compile(r"^# simdist-run(-mpi4py)?:\s*(.*?)\s*$", re.M)
SUB = re.compile(r"^# simdist-sub:\s*(.*?)\s+=>\s+(.*?)\s*$", re.M)
OPTIONS = re.compile(r"^# simdist-options:\s*(.*?)\s*$", re.M)
UNSUPPORTED = re.compile(r"^# simdist-unsupported:\s*(.*?)\s*$", re.M)
KNOWN = re.compile(r"^# simdist-known-difference:\s*n(\d+)\s+(.*?)\s*$", re.M)
TIMEOUT = 180.0  # seconds for one run (either half); the slowest takes about 4 s


@dataclass(frozen=True)
class Case:
    """One way to run one program: on ``size`` ranks with ``args``."""

    program: str
    size: int
    args: tuple[str, ...] = ()
    status: int = 0
    stderr: str = ""  # text both runs' standard error must contain
    via_mpi4py: bool = False  # under mpiexec: python -m mpi4py PROGRAM
    subs: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    unsupported: str = ""  # simdist run must fail with this text in its report
    known_difference: str = ""  # why this case is expected to fail
    options: tuple[str, ...] = ()  # of simdist run alone

    @property
    def id(self) -> str:
        extra = "-".join(a.lstrip("-") for a in self.args)
        return f"{self.program[:-3]}-n{self.size}" + (f"-{extra}" if extra else "")


def cases_of(path: pathlib.Path) -> list[Case]:
    """The runs a program's ``# simdist-run`` lines ask for."""
    text = path.read_text()
    subs = tuple(SUB.findall(text))
    unsupported = " ".join(UNSUPPORTED.findall(text))
    known = {int(size): reason for size, reason in KNOWN.findall(text)}
    options = tuple(shlex.split(" ".join(OPTIONS.findall(text))))
    found = []
    for via_mpi4py, spec in RUN.findall(text):
        spec, _, expect = spec.partition("->")
        size, *args = shlex.split(spec)
        status, *stderr = shlex.split(expect) or ["0"]
        found.append(Case(path.name, int(size), tuple(args), int(status), " ".join(stderr), bool(via_mpi4py), subs,
                          unsupported, known.get(int(size), ""), options))
    return found


def all_programs() -> list[pathlib.Path]:
    return sorted(PROGRAMS.glob("*.py"))


def params() -> list:
    return [pytest.param(case, id=case.id, marks=[pytest.mark.xfail(strict=True, reason=case.known_difference)]
                         if case.known_difference else [])
            for path in all_programs() for case in cases_of(path)]


@dataclass
class Ran:
    command: list[str]
    status: int
    stdout: str
    stderr: str

    def tail(self, lines: int = 25) -> str:
        return "\n".join(self.stderr.splitlines()[-lines:])


def start(command: list[str], *, env: dict | None = None, cwd: pathlib.Path) -> subprocess.Popen:
    """Start ``command`` in a session of its own, so that it can be killed whole
    (mpiexec with its daemons and ranks, or simdist run with its ranks)."""
    return subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(proc: subprocess.Popen) -> Ran:
    """Wait for ``proc``; on a timeout kill it with everything below it and fail."""
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        kill(proc)
        pytest.fail(f"timed out after {TIMEOUT:.0f} s: {shlex.join(proc.args)}")
    return Ran(proc.args, proc.returncode, out, err)


def kill(proc: subprocess.Popen) -> None:
    """Kill ``proc``, its session and every process below it (a launcher may
    put its ranks in process groups of their own), and reap it."""
    if proc.poll() is None:
        for pid in [*descendants(proc.pid), proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()


def mpiexec_command(size: int, target: list[str], tmpdir: str) -> tuple[list[str], dict]:
    """``mpiexec -n SIZE python TARGET``, with the flags and environment
    simdist's MPI backend starts its jobs with (TMPDIR: ``tmpdir``); and that environment."""
    from simdist.mpi._driver import launch_command, launch_environment

    mpiexec = mpiexec_or_skip()
    env = launch_environment(mpiexec, tmpdir)
    env["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"  # what a rank spawns takes slots too (Open MPI 5)
    return [*launch_command(mpiexec, size), sys.executable, *target], env


def simdist_command(size: int, target: list[str]) -> list[str]:
    """``simdist run -n SIZE TARGET`` (TARGET: a script or ``-m module``, and arguments)."""
    return [sys.executable, "-m", "simdist", "run", "-n", str(size), *target]


def run_both(size: int, mpiexec_target: list[str], simdist_target: list[str], cwd: pathlib.Path) -> tuple[Ran, Ran]:
    """Run under mpiexec and under simdist run, side by side (what the programs
    print does not depend on timing, and this overlaps mpiexec's start-up)."""
    mpiexec_or_skip()
    tmpdir = session_tmpdir()  # no stale session files of a killed job in the way
    command, env = mpiexec_command(size, mpiexec_target, tmpdir)
    shm_before = dev_shm()
    procs = []
    try:
        procs.append(start(command, env=env, cwd=cwd))
        procs.append(start(simdist_command(size, simdist_target), cwd=cwd))
        return finish(procs[0]), finish(procs[1])
    except BaseException:  # a timeout, or Ctrl-C: leave nothing behind
        for proc in procs:
            kill(proc)
        remove_orphaned_segments(dev_shm() - shm_before)
        raise
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def remove_orphaned_segments(names: set[str]) -> None:
    """Remove the files MPI ranks killed by :func:`kill` left in /dev/shm
    (Open MPI removes its segments only when its ranks end normally), unless
    a live process still maps them."""
    mapped = ""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:  # a process may end between the listing and the read
            with open(f"/proc/{pid}/maps") as maps:
                mapped += maps.read()
        except OSError:
            pass
    for name in names:
        if f"/dev/shm/{name}" not in mapped:
            pathlib.Path("/dev/shm", name).unlink(missing_ok=True)


def normalised(case: Case, stdout: str) -> list[str]:
    lines = stdout.splitlines()
    for pattern, replacement in case.subs:
        lines = [re.sub(pattern, replacement, line) for line in lines]
    return sorted(lines)


def differences(expected: list[str], got: list[str]) -> str:
    missing = collections.Counter(expected) - collections.Counter(got)
    extra = collections.Counter(got) - collections.Counter(expected)
    shown = [f"  only under mpiexec ({n}x): {line!r}" for line, n in sorted(missing.items())]
    shown += [f"  only under simdist run ({n}x): {line!r}" for line, n in sorted(extra.items())]
    return "\n".join(shown[:40]) + (f"\n  ... and {len(shown) - 40} more" if len(shown) > 40 else "")


@pytest.mark.parametrize("case", params())
def test_simdist_run_prints_what_mpiexec_prints(case, tmp_path):
    program = [str(PROGRAMS / case.program), *case.args]
    via = ["-m", "mpi4py"] if case.via_mpi4py else []
    reference, simulated = run_both(case.size, [*via, *program], [*case.options, *program], tmp_path)
    assert reference.status == case.status and case.stderr in reference.stderr, (
        f"the program itself is wrong: under mpiexec it exited with {reference.status}, "
        f"not {case.status}, or its stderr lacks {case.stderr!r}\n{reference.tail()}")
    expected = normalised(case, reference.stdout)
    assert expected or case.status, "the program printed nothing under mpiexec"

    if case.unsupported:
        assert simulated.status == 1 and case.unsupported in simulated.stderr, (
            f"simdist run should refuse the program with {case.unsupported!r}, but it exited with "
            f"{simulated.status}\n{simulated.tail()}")
        return
    assert case.stderr in simulated.stderr, f"simdist run's stderr lacks {case.stderr!r}:\n{simulated.tail()}"
    got = normalised(case, simulated.stdout)
    assert (simulated.status, got) == (case.status, expected), (
        f"simdist run exited with {simulated.status} (mpiexec: {case.status}); printed lines that differ:\n"
        f"{differences(expected, got)}\n--- simdist run's stderr (end):\n{simulated.tail()}")


def test_a_pytest_suite_using_mpi4py_runs_under_simdist_run_as_under_mpiexec(tmp_path):
    """``simdist run -n 2 -m pytest FILE`` runs a project's mpi4py tests as
    ``mpiexec -n 2 python -m pytest FILE`` does: same outcomes on each rank,
    same exit status (1: one test fails on rank 1, on purpose)."""
    (tmp_path / "test_mpi4py_checks.py").write_text((PROGRAMS / "pytest_suite" / "mpi4py_checks.py").read_text())
    suite = ["-m", "pytest", "test_mpi4py_checks.py", "-q", "-p", "no:cacheprovider", "--color=no"]
    reference, simulated = run_both(2, suite, suite, tmp_path)
    # Each rank's summary, wherever it lands: pytest flushes its progress dots
    # as it goes, so one rank's dots may start the line of the other's
    # summary, under either launcher.
    summaries = sorted(re.findall(r"(?<!\d)(?:\d+ failed, )?\d+ passed\b", reference.stdout))
    assert (reference.status, summaries) == (1, ["1 failed, 5 passed", "6 passed"]), reference.stdout[-3000:]
    got = sorted(re.findall(r"(?<!\d)(?:\d+ failed, )?\d+ passed\b", simulated.stdout))
    assert (simulated.status, got) == (1, summaries), simulated.stdout[-3000:] + simulated.tail()
    assert "AssertionError: rank 1 fails on purpose" in simulated.stdout


def test_a_suite_that_turns_warnings_into_errors_runs_under_simdist_run_as_under_mpiexec(tmp_path):
    """A project whose pytest configuration says ``filterwarnings = error``
    (schwimmbad's does) runs under ``simdist run``: pytest finds simdist's
    packages imported before it starts and must not warn that it cannot
    rewrite them (the warning, an error there, ended every rank's pytest)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (tmp_path / "test_ones.py").write_text(
        "from mpi4py import MPI\n\n\ndef test_sum_of_ones_is_the_size():\n"
        "    assert MPI.COMM_WORLD.allreduce(1) == MPI.COMM_WORLD.Get_size()\n")
    suite = ["-m", "pytest", "test_ones.py", "-q", "-p", "no:cacheprovider", "--color=no"]
    reference, simulated = run_both(2, suite, suite, tmp_path)
    assert (reference.status, reference.stdout.count("1 passed")) == (0, 2), reference.stdout[-3000:]
    assert (simulated.status, simulated.stdout.count("1 passed")) == (0, 2), simulated.stdout[-3000:] + simulated.tail()


def test_every_program_says_what_it_exercises_where_it_comes_from_and_how_it_runs():
    programs = all_programs()
    assert len(programs) >= 15, [p.name for p in programs]
    for path in programs:
        head = path.read_text()[:3000]
        assert "Calls:" in head or head.startswith('"""'), f"{path.name}: no description of the calls it exercises"
        assert "Origin:" in head, f"{path.name}: no 'Origin:'"
        assert cases_of(path), f"{path.name}: no '# simdist-run: N' line"
    readme = (PROGRAMS / "README.md").read_text()
    missing = [p.name for p in programs if f"`{p.name}`" not in readme]
    assert not missing, f"README.md does not list {missing}"
