"""A world's processes, shared memory and logging, from start to close.

No process or memfd outlives a world: not after close, not after Ctrl-C in
the driver, not after SIGKILL of the driver (workers use PDEATHSIG). Log
records emitted in ranks reach the driver's loggers tagged with the rank.
Some tests run a real driver in a subprocess and watch its workers by pid.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest

import simdist

START_METHODS = ["fork", "forkserver", "spawn"]


# -- a driver in a subprocess ---------------------------------------------------------

DRIVER = """
# marker: {marker}
import faulthandler, os, signal, sys, time
import numpy as np
import simdist

faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks for a failing test
# Ctrl-C raises KeyboardInterrupt, as in a terminal, however the suite was
# started: a shell starts background jobs (`bash .ci/run &`) with SIGINT and
# SIGQUIT ignored, their children inherit that, and Python keeps it.
signal.signal(signal.SIGINT, signal.default_int_handler)

def say(*words):  # one write per line: ranks share the driver's stdout
    os.write(1, (" ".join(map(str, words)) + "\\n").encode())

def program(comm):
    say("rank", comm.rank, os.getpid())
    if comm.rank == 0:
        {rank0}                        # busy in user code
    comm.allreduce(np.ones(4))         # the other ranks wait here

if __name__ == "__main__":
    with simdist.World(3, timeout=600, start_method=sys.argv[1]) as world:
        say("pids", *world.pids)
        try:
            world.run(program)
        except KeyboardInterrupt:
            say("interrupted")
            raise
"""


class Driver:
    """A driver script in a subprocess; its stdout lines arrive on a queue."""

    def __init__(self, script: str, *args: str):
        self.marker = uuid.uuid4().hex
        # stderr goes to a file: leaked workers would hold a pipe open forever
        self._stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script.replace("{marker}", self.marker), *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.lines: queue.Queue = queue.Queue()
        self.stderr = ""
        self.pids: list[int] = []  # workers seen, killed by cleanup() if they outlive the test
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, prefix: str, timeout: float = 60.0) -> list[str]:
        """The next line starting with ``prefix``, split into words."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the driver printed no {prefix!r} line in {timeout} s:\n{self.stacks()}") from None
            if line is None:
                self.proc.wait()
                raise AssertionError(f"the driver exited ({self.proc.returncode}) before printing {prefix!r}: {self._read_stderr()}")
            if line.startswith(prefix):
                return line.split()

    def worker_pids(self) -> list[int]:
        """Wait until the run started on every rank; return the worker pids."""
        self.pids = [int(p) for p in self.expect("pids")[1:]]
        ranks = {int(words[1]): int(words[2]) for words in (self.expect("rank ") for _ in self.pids)}
        assert sorted(ranks.values()) == sorted(self.pids)
        return self.pids

    def stacks(self) -> str:
        """Ask the driver and its workers for their Python stacks; return stderr."""
        for pid in [self.proc.pid, *self.pids]:
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass
        time.sleep(1.0)
        return self._read_stderr()

    def _signal_state(self) -> str:
        """The driver's blocked, ignored and caught signals (masks from /proc)."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as fh:
                return ", ".join(line.strip() for line in fh if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
        except OSError as exc:
            return f"no status: {exc}"

    def _read_stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read()

    def finish(self, timeout: float = 30.0) -> int:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the driver did not exit within {timeout} s ({self._signal_state()}):\n"
                                 f"{self.stacks()}") from None
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self.stderr = self._read_stderr()
        return self.proc.returncode

    def cleanup(self, procs) -> None:
        """Kill the driver and whatever of its workers a failed test left alive."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.pids + [int(line.split(":")[0]) for line in self.marked_processes(procs)]:
            if procs.alive(pid):
                os.kill(pid, signal.SIGKILL)
        self._stderr.close()

    def marked_processes(self, procs) -> list[str]:
        """Live processes whose command line holds this driver's marker
        (the driver and fork-started workers; zombies have none)."""
        return [f"{pid}: {cmd[:80]}" for pid, (_, state, cmd) in procs.table().items() if self.marker in cmd and state != "Z"]


@pytest.fixture
def drivers(procs):
    """Start drivers with ``drivers(script, *args)``; cleaned up after the test."""
    started = []
    yield lambda *args: started.append(Driver(*args)) or started[-1]
    for driver in started:
        driver.cleanup(procs)


@pytest.mark.slow
def test_ctrl_c_in_the_driver_stops_every_worker(procs, drivers):
    driver = drivers(DRIVER.replace("{rank0}", "time.sleep(600)"), "fork")
    pids = driver.worker_pids()
    time.sleep(0.5)  # ranks 1 and 2 are now waiting in the allreduce
    driver.proc.send_signal(signal.SIGINT)
    returncode = driver.finish()
    assert returncode != 0
    assert "KeyboardInterrupt" in driver.stderr
    assert driver.expect("interrupted", timeout=5)
    assert procs.wait_gone(pids) == []
    assert driver.marked_processes(procs) == []


@pytest.mark.slow
@pytest.mark.parametrize("start_method", START_METHODS)
def test_sigkill_of_the_driver_kills_every_worker(procs, drivers, start_method):
    driver = drivers(DRIVER.replace("{rank0}", "while True: pass"), start_method)
    pids = driver.worker_pids()
    time.sleep(0.3)
    driver.proc.kill()
    driver.finish()
    assert procs.wait_gone(pids, within=5.0) == [], f"workers outlived their driver ({start_method})"
    assert driver.marked_processes(procs) == []


def test_driver_exiting_without_close_leaves_no_worker(procs, drivers):
    script = """
# marker: {marker}
import simdist, numpy as np
world = simdist.World(3)
print("pids", *world.pids, flush=True)
print("sum", world.run(lambda comm: float(comm.allreduce(np.float64(comm.rank))))[0], flush=True)
"""
    driver = drivers(script)
    pids = driver.pids = [int(p) for p in driver.expect("pids")[1:]]
    assert driver.expect("sum") == ["sum", "3.0"]
    assert driver.finish() == 0, driver.stderr
    assert procs.wait_gone(pids) == []
    assert driver.marked_processes(procs) == []


# -- worlds in this process ---------------------------------------------------------------


def test_close_stops_every_worker_and_releases_the_memory(procs):
    held = procs.memfds()
    world = simdist.World(3)
    pids = world.pids
    assert all(procs.alive(p) for p in pids)
    assert sum(procs.memfds().values()) > sum(held.values())
    world.run(lambda comm: comm.barrier())
    world.close()
    assert procs.wait_gone(pids, within=1.0) == []
    assert procs.memfds() == held
    world.close()  # idempotent
    assert "closed" in repr(world)
    with pytest.raises(simdist.SimdistError, match="closed"):
        world.run(lambda comm: None)


def _keep_the_communicator(comm):
    import builtins

    builtins._simdist_kept_comm = comm  # outlives the run, in the rank's process
    return comm.allreduce(np.ones(2)).tolist()


def test_a_communicator_kept_past_its_run_closes_quietly(procs, capfd):
    held = procs.memfds()
    world = simdist.World(2)
    pids = world.pids
    assert world.run(_keep_the_communicator) == [[2.0, 2.0]] * 2
    world.close()
    assert procs.wait_gone(pids) == []
    assert procs.memfds() == held
    err = capfd.readouterr().err
    assert "Traceback" not in err and "BufferError" not in err, err


def test_a_world_that_is_garbage_collected_stops_its_workers(procs):
    held = procs.memfds()
    world = simdist.World(2)
    pids = world.pids
    del world
    gc.collect()
    assert procs.wait_gone(pids) == []
    assert procs.memfds() == held


def test_worker_killed_mid_collective_leaves_nothing_after_close(procs):
    held = procs.memfds()
    with simdist.World(2, timeout=30) as world:
        first = world.pids

        def program(comm, victim):
            if comm.rank == 0:
                threading.Timer(0.2, os.kill, (victim, signal.SIGKILL)).start()
            x = np.ones(3 << 20, np.float32)  # larger than a slot: chunked
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                comm.allreduce(x)

        with pytest.raises(simdist.RankDied):
            world.run(program, first[1])
        replaced = world.pids
    assert procs.wait_gone(first + replaced) == []
    assert procs.memfds() == held


@pytest.mark.parametrize("start_method", START_METHODS)
def test_every_start_method_runs_collectives(start_method, procs):
    with simdist.World(2, start_method=start_method) as world:
        pids = world.pids
        results = world.run(lambda comm: comm.allreduce(np.arange(5.0) * (comm.rank + 1)))
        for got in results:
            np.testing.assert_array_equal(got, np.arange(5.0) * 3)
    assert procs.wait_gone(pids) == []


@pytest.mark.slow
def test_world_started_with_small_dev_shm_runs_a_large_allreduce(tmp_path):
    """A 64 MiB /dev/shm (a container's default) must not bound the world."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare is not installed")
    probe = subprocess.run(
        ["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=64m tmpfs /dev/shm"],
        capture_output=True, text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a private /dev/shm here (unshare --mount): {probe.stderr.strip()}")
    script = textwrap.dedent("""
        import json, os, numpy as np, simdist
        st = os.statvfs("/dev/shm")
        shm_bytes = st.f_blocks * st.f_frsize
        assert shm_bytes <= 64 << 20, shm_bytes

        def program(comm):
            x = np.full(64 << 20, comm.rank + 1, np.float32)  # 256 MiB
            y = comm.allreduce(x)
            return y.shape, str(y.dtype), int(np.count_nonzero(y != 3.0)), os.listdir("/dev/shm")

        with simdist.World(2) as world:
            results = world.run(program)
        print(json.dumps({"shm_bytes": shm_bytes, "results": results}))
    """)
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" -c "$1"',
         sys.executable, script],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["shm_bytes"] <= 64 << 20
    for shape, dtype, wrong, shm_entries in report["results"]:
        assert shape == [64 << 20] and dtype == "float32"
        assert wrong == 0
        assert shm_entries == []  # the arena is not in /dev/shm


# -- logging from ranks ------------------------------------------------------------------

APP = "tests.rank_app"


@pytest.fixture
def world2():
    with simdist.World(2) as world:
        yield world


def rank_records(caplog, name=APP):
    return [r for r in caplog.records if r.name == name]


def test_rank_log_records_reach_the_driver_tagged_with_the_rank(caplog, world2):
    caplog.set_level(logging.INFO)

    def program(comm):
        log = logging.getLogger(APP)
        log.info("step %d of %s", 3, "training")
        log.warning("loss is %.1f", 2.5)

    world2.run(program)
    records = rank_records(caplog)  # already here when run returns
    for rank in (0, 1):
        mine = [r for r in records if r.rank == rank]
        assert [(r.levelno, r.getMessage()) for r in mine] == [
            (logging.INFO, f"[rank {rank}] step 3 of training"),
            (logging.WARNING, f"[rank {rank}] loss is 2.5"),
        ]
    assert len(records) == 4
    assert "[rank 1] loss is 2.5" in caplog.text


def test_rank_log_records_keep_their_exception_text(caplog, world2):
    caplog.set_level(logging.INFO)

    def program(comm):
        try:
            1 / 0
        except ZeroDivisionError:
            logging.getLogger(APP).exception("step failed on %d", comm.rank)

    world2.run(program)
    records = rank_records(caplog)
    assert sorted(r.rank for r in records) == [0, 1]
    for record in records:
        assert record.levelno == logging.ERROR
        assert record.getMessage() == f"[rank {record.rank}] step failed on {record.rank}"
        assert "ZeroDivisionError: division by zero" in record.exc_text
    assert "Traceback (most recent call last)" in caplog.text


def test_rank_log_records_respect_the_driver_level(caplog, world2):
    caplog.set_level(logging.INFO)

    def program(comm):
        logging.getLogger(APP).debug("hidden %d", comm.rank)
        logging.getLogger(APP).info("shown %d", comm.rank)

    world2.run(program)
    assert sorted(r.getMessage() for r in rank_records(caplog)) == ["[rank 0] shown 0", "[rank 1] shown 1"]

    caplog.clear()
    caplog.set_level(logging.DEBUG, logger=APP)
    world2.run(program)
    assert len([r for r in rank_records(caplog) if r.levelno == logging.DEBUG]) == 2


def test_rank_log_levels_follow_the_driver_from_run_to_run(caplog, world2):
    caplog.set_level(logging.INFO)

    def program(comm):
        logging.getLogger(APP).info("from %d", comm.rank)

    caplog.set_level(logging.ERROR, logger=APP)
    world2.run(program)
    assert rank_records(caplog) == []

    caplog.set_level(logging.NOTSET, logger=APP)  # back to the root's INFO
    world2.run(program)
    assert sorted(r.getMessage() for r in rank_records(caplog)) == ["[rank 0] from 0", "[rank 1] from 1"]


def test_records_logged_before_a_rank_fails_still_arrive(caplog, world2):
    caplog.set_level(logging.INFO)

    def program(comm):
        logging.getLogger(APP).warning("about to fail on %d", comm.rank)
        if comm.rank == 1:
            raise RuntimeError("failing")
        comm.barrier()

    with pytest.raises(simdist.RankError):
        world2.run(program)
    assert sorted(r.getMessage() for r in rank_records(caplog)) == ["[rank 0] about to fail on 0", "[rank 1] about to fail on 1"]


# -- placement ------------------------------------------------------------------------


def _cpus(comm):
    return sorted(os.sched_getaffinity(0))


def test_ranks_get_a_cpu_each_or_are_dealt_round_robin():
    cpus = sorted(os.sched_getaffinity(0))
    c = len(cpus)
    with simdist.World(2 * c) as world:  # a multiple of the CPUs: rank r on CPU r mod C
        assert world.run(_cpus) == [[cpus[r % c]] for r in range(2 * c)]
    if c > 1:
        with simdist.World(c + 1) as world:  # not a multiple: the scheduler places them
            assert world.run(_cpus) == [cpus] * (c + 1)
        with simdist.World(c) as world:  # a CPU each
            assert world.run(_cpus) == [[cpu] for cpu in cpus]
