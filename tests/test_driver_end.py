"""A driver that is killed, or interrupted while its worlds start, leaves nothing.

Each test runs a real driver in a subprocess, in a session of its own and
with a private temporary directory (``TMPDIR``), then kills it (SIGKILL,
SIGTERM) or sends its process group SIGINT, as a terminal's Ctrl-C does.
Afterwards no process may be left -- the workers, what the ranks' code
started, the MPI job, the janitor -- and no file in that directory: the
MPI job's directory and multiprocessing's ``pymp-*`` of the fork server.
"""

from __future__ import annotations

import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import SYSTEM_TMPDIR, mpiexec_or_skip, process_table, wait_gone
from ctrl_c_trials import INTERRUPTED_DRIVER

BACKENDS = ["fork", "forkserver", "spawn", "mpi"]

KILLED_DRIVER = """
import os, subprocess, sys, time
import simdist, simdist._janitor

def program(comm):
    sub = subprocess.Popen(["sleep", "60"])
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    return [os.getpid(), sub.pid, child]

if __name__ == "__main__":
    backend = sys.argv[1]
    options = {"backend": "mpi"} if backend == "mpi" else {"start_method": backend}
    world = simdist.World(2, timeout=600, **options)
    pids = [pid for pids in world.run(program) for pid in pids]
    job = world._driver._job.pid if backend == "mpi" else 0
    print("pids", job, simdist._janitor.janitor().pid, *pids, flush=True)
    time.sleep(600)
"""


def session(sid: int) -> list[str]:
    """The live processes of session ``sid``."""
    found = []
    for pid, (_, state, cmdline) in process_table().items():
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and state != "Z":
            found.append(f"{pid}: {cmdline[:100]}")
    return found


def wait_session_gone(sid: int, within: float = 5.0) -> list[str]:
    """Wait until session ``sid`` has no live process; return those left."""
    deadline = time.monotonic() + within
    while (left := session(sid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def kill_session(sid: int) -> None:
    for line in session(sid):
        try:
            os.kill(int(line.split(":")[0]), signal.SIGKILL)
        except ProcessLookupError:
            pass


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """The next line the driver prints, within ``timeout`` seconds."""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError(f"the driver printed nothing in {timeout} s")
    return proc.stdout.readline().strip()


@pytest.fixture
def tmp(tmp_path):
    """The drivers' TMPDIR: short, for the fork server's and Open MPI's
    socket paths (at most 107 bytes)."""
    path = tempfile.mkdtemp(prefix="t-", dir=SYSTEM_TMPDIR)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_driver(script: str, tmp_path, tmp: str, *args: str) -> subprocess.Popen:
    """A driver in a session of its own, with ``tmp`` as TMPDIR."""
    path = tmp_path / "driver.py"
    path.write_text(script)
    stderr = open(tmp_path / "stderr", "w")
    proc = subprocess.Popen(
        [sys.executable, str(path), *args], stdout=subprocess.PIPE, stderr=stderr, text=True,
        env=dict(os.environ, TMPDIR=str(tmp)), start_new_session=True,
    )
    stderr.close()
    return proc


def wait_empty(path: str, within: float = 5.0) -> list[str]:
    deadline = time.monotonic() + within
    while os.listdir(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return os.listdir(path)


JANITOR_DRIVER = """
import os, subprocess, sys
from simdist._janitor import janitor

doomed = subprocess.Popen(["sleep", "60"], start_new_session=True)
spared = subprocess.Popen(["sleep", "60"], start_new_session=True)
janitor().register("group", doomed.pid)
janitor().register("group", spared.pid)
janitor().unregister("group", spared.pid)  # ended by the driver itself, say
for path in sys.argv[1:]:
    janitor().register("path", path)
janitor().unregister("path", sys.argv[-1])
print(doomed.pid, spared.pid, janitor().pid, flush=True)
sys.stdin.read()  # until killed
"""


def test_the_janitor_ends_what_is_registered_when_its_driver_is_killed(tmp_path, tmp):
    paths = [os.path.join(tmp, name) for name in ("dir", "file", "kept")]
    os.mkdir(paths[0])
    open(os.path.join(paths[0], "inside"), "w").close()
    open(paths[1], "w").close()
    open(paths[2], "w").close()
    proc = subprocess.Popen([sys.executable, "-c", JANITOR_DRIVER, *paths], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    pids = []
    try:
        pids = [int(p) for p in read_line(proc, 30).split()]
        doomed, spared, janitor = pids
        proc.kill()
        proc.wait()
        assert wait_gone([doomed, janitor]) == []
        assert os.path.exists(f"/proc/{spared}") and os.listdir(tmp) == ["kept"]
    finally:
        proc.kill()
        proc.wait()
        for pid in pids:
            kill_session(pid)
        wait_gone(pids)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_driver_leaves_no_process_and_no_file(backend, sig, tmp_path, tmp):
    if backend == "mpi":
        mpiexec_or_skip()
    proc = start_driver(KILLED_DRIVER, tmp_path, tmp, backend)
    job, pids = 0, []
    try:
        words = read_line(proc, 120).split()
        assert words[:1] == ["pids"], (words, open(tmp_path / "stderr").read())
        job, pids = int(words[1]), [int(p) for p in words[2:]]
        if backend in ("forkserver", "mpi"):
            assert os.listdir(tmp), "nothing was created in TMPDIR: the test would prove nothing"
        proc.send_signal(sig)
        proc.wait(30)
        left = {
            "workers, processes their ranks started, the janitor": wait_gone(pids),
            "the driver's session": wait_session_gone(proc.pid),
            "the MPI job's session": wait_session_gone(job) if job else [],
            "files in TMPDIR": wait_empty(tmp),
        }
        assert {what: found for what, found in left.items() if found} == {}, "the killed driver left these behind"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        for sid in [proc.pid, job, *pids]:  # the driver's, the MPI job's and the janitor's sessions
            if sid:
                kill_session(sid)
        wait_gone(pids)


@pytest.mark.slow
@pytest.mark.parametrize("backend, trials", [("fork", 20), ("forkserver", 4), ("spawn", 4), ("mpi", 2)])
def test_ctrl_c_while_worlds_start_raises_keyboard_interrupt_and_leaves_nothing(backend, trials, tmp_path, tmp):
    if backend == "mpi":
        mpiexec_or_skip()
    rng = random.Random(19)
    for trial in range(trials):
        proc = start_driver(INTERRUPTED_DRIVER, tmp_path, tmp, backend, "4")
        janitor = None
        try:
            words = read_line(proc, 120).split()
            assert words[:1] == ["ready"], (words, open(tmp_path / "stderr").read())
            janitor = int(words[1])
            time.sleep(rng.uniform(0.0, 0.25))
            os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C goes to the whole group
            interrupted = time.monotonic()
            try:
                out, _ = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                out = "the driver went on: no exit within 30 s of Ctrl-C"
            assert out.strip() == "KeyboardInterrupt", f"trial {trial} of {trials}: {out.strip()}"
            took = time.monotonic() - interrupted
            assert took < 8, f"trial {trial} of {trials}: the driver exited {took:.1f} s after Ctrl-C"
            assert wait_gone([janitor]) == [], "the janitor outlived the driver"
            assert wait_session_gone(proc.pid) == [], f"trial {trial}: processes left after Ctrl-C"
            assert wait_empty(tmp) == [], f"trial {trial}: files left after Ctrl-C"
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
            kill_session(proc.pid)
            if janitor:
                kill_session(janitor)


INTERRUPTED_FINALIZER = """
import signal, sys, time, weakref
import simdist

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
try:
    with simdist.World(2, start_method="fork") as world:
        class Held:
            pass
        held = Held()
        weakref.finalize(held, signal.raise_signal, signal.SIGINT)  # Ctrl-C arrives in a finalizer
        del held
        deadline = time.monotonic() + 30  # it comes again soon, not necessarily before the next call returns
        while time.monotonic() < deadline:
            world.run(lambda comm: comm.rank)
    print("the driver went on", flush=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
"""


def test_ctrl_c_that_lands_in_a_finalizer_still_interrupts_the_driver():
    """Python drops a KeyboardInterrupt raised in a finalizer; a driver frees
    objects with finalizers (processes, pipes, weak sets) as worlds start
    and close, and a Ctrl-C landing there was lost: the program went on."""
    out = subprocess.run([sys.executable, "-c", INTERRUPTED_FINALIZER], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "KeyboardInterrupt", out.stderr
    assert "Exception ignored" not in out.stderr, out.stderr
