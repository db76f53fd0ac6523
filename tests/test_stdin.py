"""The ranks' standard input, as under mpiexec: rank 0 reads the driver's,
the other ranks read end of file; on the simulator and on MPI alike, and
never an endless wait."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import mpiexec_or_skip

TEXT = "first line\nsecond line\n"
READER = textwrap.dedent("""
    import sys, simdist
    print(simdist.comm().rank, repr(sys.stdin.read()), flush=True)
""")


def _mpi(backend):
    if backend == "mpi":
        mpiexec_or_skip()
    return backend


BACKENDS = ["sim", pytest.param("mpi", marks=pytest.mark.slow)]


def simdist_run(tmp_path, backend, program, stdin, *options, timeout=120, **popen):
    script = tmp_path / "program.py"
    script.write_text(program)
    command = [sys.executable, "-m", "simdist", "run", "-n", "2", "--backend", _mpi(backend), *options, str(script)]
    return subprocess.run(command, stdin=stdin, capture_output=True, text=True, timeout=timeout, **popen)


def lines(done) -> list[str]:
    assert done.returncode == 0, done.stderr
    return sorted(done.stdout.splitlines())


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "input.txt"
    path.write_text(TEXT)
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_rank_0_reads_the_file_given_to_simdist_run_and_the_others_read_nothing(tmp_path, text_file, backend):
    with open(text_file) as stdin:
        done = simdist_run(tmp_path, backend, READER, stdin)
    assert lines(done) == [f"0 {TEXT!r}", "1 ''"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rank_0_reads_a_pipe_given_to_simdist_run_to_its_end(tmp_path, backend):
    script = tmp_path / "program.py"
    script.write_text(READER)
    command = [sys.executable, "-m", "simdist", "run", "-n", "2", "--backend", _mpi(backend), str(script)]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        try:
            out, err = proc.communicate(TEXT, timeout=120)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert sorted(out.splitlines()) == [f"0 {TEXT!r}", "1 ''"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stdin", ["/dev/null", "closed"])
def test_without_input_every_rank_reads_end_of_file(tmp_path, backend, stdin):
    # CI jobs run with /dev/null or no descriptor 0 at all (sys.stdin is None)
    if stdin == "closed":
        done = simdist_run(tmp_path, backend, READER, subprocess.DEVNULL, preexec_fn=lambda: os.close(0))
    else:
        done = simdist_run(tmp_path, backend, READER, subprocess.DEVNULL)
    assert lines(done) == ["0 ''", "1 ''"]


# A driver that reads the first line of its input itself (unbuffered), then
# lets rank 0 of a world read the rest.
DRIVER = textwrap.dedent("""
    import os, sys, simdist
    if __name__ == "__main__":
        first = os.read(0, len("first line\\n"))
        backend, start_method = sys.argv[1:]
        options = {"start_method": start_method} if backend == "sim" else {}
        with simdist.World(2, backend=backend, **options) as world:
            print(repr(first.decode()), world.run(lambda comm: sys.stdin.read()), flush=True)
""")


@pytest.mark.parametrize("backend, start_method", [("sim", "fork"),
                                                   pytest.param("sim", "forkserver", marks=pytest.mark.slow),
                                                   pytest.param("sim", "spawn", marks=pytest.mark.slow),
                                                   pytest.param("mpi", "-", marks=pytest.mark.slow)])
def test_world_run_gives_rank_0_the_drivers_input_from_where_the_driver_stands(tmp_path, text_file, backend,
                                                                                start_method):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    with open(text_file) as stdin:
        done = subprocess.run([sys.executable, str(script), _mpi(backend), start_method], stdin=stdin,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr("first line\n") + " " + repr(["second line\n", ""])


WAITER = textwrap.dedent("""
    import sys, simdist
    comm = simdist.comm()
    if comm.rank == 0:
        sys.stdin.read()
    comm.barrier()
""")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sim", "mpi"])
def test_rank_0_blocked_on_its_input_while_a_peer_waits_is_a_hang_at_the_timeout(tmp_path, backend):
    script = tmp_path / "program.py"
    script.write_text(WAITER)
    command = [sys.executable, "-m", "simdist", "run", "-n", "2", "--backend", _mpi(backend), "--timeout", "2",
               str(script)]
    report = tmp_path / "stderr.txt"
    started = time.monotonic()
    with open(report, "w") as stderr, subprocess.Popen(command, stdin=subprocess.PIPE, stderr=stderr) as proc:
        try:  # the input never ends: the test holds the pipe open (communicate() would close it)
            proc.wait(timeout=60)
        finally:
            proc.kill()
            proc.stdin.close()
    took = time.monotonic() - started
    err = report.read_text()
    assert proc.returncode == 124, err
    assert "rank 0: running user code" in err and "rank 1: waiting in barrier" in err, err
    assert took < 30, f"{took:.1f} s"
