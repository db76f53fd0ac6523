"""The processes and descriptors of a world.

- A rank is dead when its process ends, also while processes it started
  (``os.fork``, ``subprocess``, ``multiprocessing``) hold its pipes open.
- Whatever a rank starts ends with the rank: when it dies, when it is
  killed after the grace period or replaced, and when the world closes.
- A process forked by rank code that leaves the rank's function exits; it
  does not go on as a second copy of the rank.
- ``multiprocessing.Pool``, ``ProcessPoolExecutor`` and a World inside a
  rank work under every start method.
- A world's workers hold nothing of another world (its memfd and mapping,
  its lifeline, its MPI listener), and a child forked from the driver
  cannot run the driver's worlds nor harm them.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import simdist
from conftest import alive, mpiexec_or_skip, wait_gone

START_METHODS = ["fork", "forkserver", "spawn"]
SLOW_STARTS = [pytest.param(m, marks=pytest.mark.slow) if m != "fork" else m for m in START_METHODS]


# -- rank code that starts processes ------------------------------------------------
def start_processes(comm, with_multiprocessing: bool = True) -> list[int]:
    """Start a subprocess, a forked child and a multiprocessing child, each
    living a minute; return their pids."""
    sub = subprocess.Popen(["sleep", "60"])
    forked = os.fork()
    if forked == 0:
        time.sleep(60)
        os._exit(0)
    if not with_multiprocessing:
        return [sub.pid, forked]
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,), daemon=True)
    child.start()
    return [sub.pid, forked, child.pid]


def fork_then_die(comm, pid_file: str) -> int:
    """Rank 1 forks a child that holds its pipes for 30 s, then dies."""
    if comm.rank == 1:
        child = os.fork()
        if child == 0:
            time.sleep(30)
            os._exit(0)
        with open(pid_file, "w") as fh:
            fh.write(str(child))
        os._exit(3)
    return comm.rank


@pytest.mark.parametrize("start_method", SLOW_STARTS)
def test_a_rank_that_forks_then_dies_is_reported_dead_at_once(start_method, tmp_path):
    pid_file = str(tmp_path / "child")
    with simdist.World(2, start_method=start_method, timeout=60) as world:
        started = time.monotonic()
        with pytest.raises(simdist.RankDied) as info:
            world.run(fork_then_die, pid_file)
        assert time.monotonic() - started < 10, "the death was seen only when the forked child ended"
        assert info.value.ranks == {1: "exited with status 3"}
        assert wait_gone([int(open(pid_file).read())], within=2.0) == [], "the dead rank's child lives on"
        assert world.run(lambda comm: comm.rank) == [0, 1]


def test_what_a_rank_started_ends_when_the_world_closes():
    world = simdist.World(2)
    try:
        started = [pid for pids in world.run(start_processes) for pid in pids]
        assert all(alive(pid) for pid in started)
    finally:
        world.close()
    assert wait_gone(started, within=2.0) == []


def test_what_a_rank_started_ends_when_the_rank_dies():
    def program(comm):
        pids = start_processes(comm)
        print(*pids, file=open(f"{tmp}/{comm.rank}", "w"), flush=True)
        comm.barrier()
        if comm.rank == 1:
            os._exit(5)
        return comm.allreduce(np.ones(1))

    with simdist.World(2) as world, _tmpdir() as tmp:
        with pytest.raises(simdist.RankDied, match="rank 1 exited with status 5"):
            world.run(program)
        started = [int(p) for p in open(f"{tmp}/1").read().split()]
        assert wait_gone(started, within=2.0) == []
        mine = [int(p) for p in open(f"{tmp}/0").read().split()]
        assert all(alive(pid) for pid in mine), "rank 0 was not replaced: what it started lives on"
    assert wait_gone(mine, within=2.0) == []


def test_what_a_rank_started_ends_when_the_rank_is_replaced_between_runs():
    with simdist.World(2) as world:
        started = world.run(start_processes)[1]
        victim = os.pidfd_open(world.pids[1])
        os.kill(world.pids[1], 9)
        select.select([victim], [], [], 5.0)  # readable once every thread of it has ended
        os.close(victim)
        assert world.run(lambda comm: comm.rank) == [0, 1]
        assert wait_gone(started, within=2.0) == []


@pytest.mark.slow
def test_what_a_rank_started_ends_when_the_rank_is_killed_after_the_grace_period():
    def program(comm):
        if comm.rank == 0:
            raise ValueError("rank 0 fails")
        print(*start_processes(comm), file=open(f"{tmp}/1", "w"), flush=True)
        while True:  # never returns: killed after the grace period
            time.sleep(0.05)

    with simdist.World(2) as world, _tmpdir() as tmp:
        with pytest.raises(simdist.RankError):
            world.run(program)
        assert wait_gone([int(p) for p in open(f"{tmp}/1").read().split()], within=2.0) == []


@pytest.mark.slow
def test_an_mpi_rank_that_forks_then_dies_is_reported_dead_at_once(tmp_path):
    mpiexec_or_skip()
    pid_file = str(tmp_path / "child")
    with simdist.World(3, backend="mpi", timeout=60) as world:
        started = time.monotonic()
        with pytest.raises(simdist.RankDied) as info:
            world.run(fork_then_die, pid_file)
        assert time.monotonic() - started < 15, "the death was seen only when the forked child ended"
        assert 1 in info.value.ranks
        assert wait_gone([int(open(pid_file).read())], within=2.0) == [], "the dead rank's child lives on"
        assert world.run(lambda comm: comm.rank) == [0, 1, 2]


@pytest.mark.slow
def test_what_an_mpi_rank_started_ends_with_the_job_and_the_world():
    mpiexec_or_skip()

    def fails(comm):
        if comm.rank == 0:
            raise ValueError("rank 0 fails")
        comm.barrier()  # waits for rank 0 until the job is ended

    with simdist.World(2, backend="mpi", timeout=60) as world:
        started = [pid for pids in world.run(start_processes, False) for pid in pids]
        with pytest.raises(simdist.RankError):
            world.run(fails)  # ends the job
        assert wait_gone(started, within=2.0) == [], "processes of a rank outlived its MPI job"
        started = [pid for pids in world.run(start_processes, False) for pid in pids]
    assert wait_gone(started, within=2.0) == [], "processes of a rank outlived World.close"


class _tmpdir:
    """A directory under the session's temporary directory, removed after."""

    def __enter__(self):
        import tempfile

        self.path = tempfile.mkdtemp(prefix="test-processes-")
        return self.path

    def __exit__(self, *exc):
        import shutil

        shutil.rmtree(self.path, ignore_errors=True)


# -- a forked child leaving the rank's function ------------------------------------------
def fork_and_leave(comm, how: str):
    pid = os.fork()
    if pid == 0:  # the child leaves the function as the rank would
        if how == "raise":
            raise ValueError("raised in the forked child")
        if how == "exit":
            sys.exit(5)
        return "the child"
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("how, status", [("return", 0), ("raise", 1), ("exit", 5)])
def test_a_process_forked_by_a_rank_that_leaves_the_function_exits(how, status, capfd):
    with simdist.World(2, timeout=10) as world:
        assert world.run(fork_and_leave, how) == [status, status]
        assert world.run(lambda comm: comm.allreduce(np.int64(comm.rank)).item()) == [1, 1]
    if how == "raise":
        assert "ValueError: raised in the forked child" in capfd.readouterr().err


# -- processes inside a rank: Pool, ProcessPoolExecutor, a World ------------------------
def pool_in_rank(comm):
    with multiprocessing.Pool(2) as pool:
        return pool.map(abs, [-comm.rank, -10])


def executor_in_rank(comm):
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as executor:
        return list(executor.map(abs, [-comm.rank, -10]))


def world_in_rank(comm):
    offset = 10 * comm.rank
    return simdist.run(lambda inner: inner.allreduce(np.int64(inner.rank + offset)).item(), 2)


@pytest.mark.parametrize("start_method", SLOW_STARTS)
@pytest.mark.parametrize("program, expected", [
    (pool_in_rank, [[0, 10], [1, 10]]),
    (executor_in_rank, [[0, 10], [1, 10]]),
    (world_in_rank, [[1, 1], [21, 21]]),
])
def test_a_rank_may_start_a_pool_an_executor_or_a_world(start_method, program, expected):
    with simdist.World(2, start_method=start_method, timeout=60) as world:
        assert world.run(program) == expected


def kept_pool(comm) -> list[int]:
    import builtins

    builtins._simdist_kept_pool = pool = multiprocessing.Pool(2)  # never closed
    return [p.pid for p in pool._pool]


def test_a_pool_a_rank_keeps_open_ends_with_the_world():
    with simdist.World(2) as world:
        started = [pid for pids in world.run(kept_pool) for pid in pids]
        assert all(alive(pid) for pid in started)
    assert wait_gone(started, within=2.0) == []


# -- what a world's workers inherit -----------------------------------------------------
def holders(fd: int):
    """A function listing the processes that hold the file open at ``fd``
    now -- by a descriptor or a mapping -- also once ``fd`` is closed."""
    st = os.fstat(fd)
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"

    def find() -> list[str]:
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    try:
                        other = os.stat(f"/proc/{pid}/fd/{fd}")
                    except OSError:
                        continue
                    if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                        found.append(f"{pid} fd {fd} -> {os.readlink(f'/proc/{pid}/fd/{fd}')}")
                with open(f"/proc/{pid}/maps") as maps:
                    found += [f"{pid} maps it" for line in maps if line.split()[3:5] == [dev, str(st.st_ino)]]
            except OSError:
                continue
        return found

    return find


@pytest.mark.parametrize("start_method", SLOW_STARTS)
def test_a_closed_world_is_held_by_no_worker_of_another_world(start_method):
    a = simdist.World(2, slot_bytes=128 << 20)  # 256 MiB of slots, allocated up front
    a_pids = a.pids
    memfd, lifeline = holders(a._driver.arena.fd), holders(a._driver._lifeline[1])
    try:
        with simdist.World(2, start_method=start_method) as b:
            assert b.run(lambda comm: comm.rank) == [0, 1]
            a.close()
            assert wait_gone(a_pids) == []
            # no descriptor and no mapping of it anywhere: the kernel has freed it (the
            # machine's Shmem total is no measure: other tests run beside this one)
            assert memfd() == [], "a worker of B holds A's shared memory"
            assert lifeline() == [], "a worker of B holds A's lifeline"
    finally:
        a.close()


def listening(port: int) -> bool:
    """Whether a TCP socket listens on ``port`` (from /proc/net/tcp)."""
    with open("/proc/net/tcp") as fh:
        rows = [line.split() for line in fh.readlines()[1:]]
    return any(int(row[1].split(":")[1], 16) == port and row[3] == "0A" for row in rows)


@pytest.mark.slow
def test_a_closed_mpi_world_leaves_no_listener_in_another_worlds_workers():
    mpiexec_or_skip()
    a = simdist.World(2, backend="mpi")
    listener, port = holders(a._driver._listener.fileno()), a._driver._listener.getsockname()[1]
    try:
        with simdist.World(2) as b:  # its workers are forked while A listens
            assert b.run(lambda comm: comm.rank) == [0, 1]
            a.close()
            assert listener() == [], "a worker of B holds A's listening socket"
            assert not listening(port), f"A's port {port} still listens"
    finally:
        a.close()


def files_a_subprocess_inherits(comm) -> list[str]:
    """What a program started by the rank's code, without closing any
    descriptor (``close_fds=False``), holds open."""
    listing = textwrap.dedent("""
        import os
        for fd in os.listdir("/proc/self/fd"):
            try:
                print(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:  # the directory listing's own
                pass
    """)
    done = subprocess.run([sys.executable, "-c", listing], close_fds=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("start_method", SLOW_STARTS)
def test_a_program_a_rank_runs_inherits_none_of_the_worlds_descriptors(start_method):
    with simdist.World(2, start_method=start_method) as world:
        for files in world.run(files_a_subprocess_inherits):
            assert not [f for f in files if "memfd:simdist" in f], files


def test_a_closed_world_still_referenced_closes_nothing_in_later_workers(tmp_path):
    a = simdist.World(2)
    numbers = list(a._driver._lifeline)
    a.close()  # ``a`` stays referenced; its descriptor numbers go to other files
    files = []
    while not all(any(f.fileno() == n for f in files) for n in numbers) and len(files) < 100:
        files.append(open(tmp_path / f"file{len(files)}", "w"))
    def identity(fd):
        try:
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            return None
        return st.st_dev, st.st_ino

    try:
        ours = [identity(n) for n in numbers]
        with simdist.World(2) as b:
            held = b.run(lambda comm: [identity(n) for n in numbers])
            assert held == [ours, ours], "a forked worker closed another object's descriptor"
    finally:
        for f in files:
            f.close()


def test_a_child_forked_from_the_driver_cannot_run_the_world_nor_stop_its_workers(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        import simdist

        with simdist.World(2) as world:
            pids = world.pids
            child = os.fork()
            if child == 0:
                try:
                    world.run(lambda comm: comm.rank)
                except simdist.SimdistError as exc:
                    print("child:", exc, flush=True)
                sys.exit(0)  # a normal exit: atexit handlers run in the child
            os.waitpid(child, 0)
            time.sleep(0.2)
            print("parent:", world.run(lambda comm: comm.rank), world.pids == pids, flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("child: World.run: this world belongs to process") for line in lines), done.stdout
    assert "parent: [0, 1] True" in lines, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "between runs" not in done.stderr, done.stderr
