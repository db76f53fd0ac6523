"""``World(backend="mpi")``: the same functions on real MPI (mpiexec + mpi4py).

These tests launch real ``mpiexec`` jobs. They are skipped only where no MPI
is installed, and never in CI (``CI`` set), where a missing MPI is a failure.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

import numpy as np
import pytest

import simdist
import simdist.mpi._driver
from conftest import alive, descendants, mpiexec_or_skip, wait_gone

MPIEXEC = mpiexec_or_skip()

TIMEOUT = 20.0


@pytest.fixture(scope="module")
def world():
    with simdist.World(3, backend="mpi", timeout=TIMEOUT) as w:
        yield w


def test_mpi_world_runs_closures_and_returns_values_by_rank(world):
    offset = 10
    assert world.run(lambda comm: (comm.rank, comm.size, comm.rank + offset)) == [(r, 3, r + offset) for r in range(3)]


def test_mpi_allreduce_of_exactly_summable_floats_equals_the_simulator_bit_for_bit(world):
    def program(comm):
        x = np.arange(1000, dtype=np.float32) * (comm.rank + 1)
        return comm.allreduce(x), comm.allreduce(x, op="mean"), comm.allgather(x[:3])

    on_mpi = world.run(program)
    on_sim = simdist.run(program, 3)
    for a, b in zip(on_mpi, on_sim):
        for x, y in zip(a, b):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


@pytest.mark.slow
def test_mpi_rank_error_carries_the_traceback_and_the_world_recovers():
    def program(comm):
        if comm.rank == 1:
            raise ValueError("bad value on rank 1")
        comm.barrier()  # the others block in MPI; the job is ended after the grace period

    with simdist.World(3, backend="mpi", timeout=TIMEOUT) as world:
        with pytest.raises(simdist.RankError) as info:
            world.run(program)
        assert list(info.value.failures) == [1]
        assert "ValueError: bad value on rank 1" in info.value.failures[1]
        assert world.run(lambda comm: comm.allreduce(np.array([comm.rank]))) == [np.array([3])] * 3


@pytest.mark.slow
def test_mpi_rank_error_is_not_hidden_by_a_hang_report_when_the_timeout_is_short():
    # The peers wait for the failed rank in MPI; with a timeout shorter than
    # the grace period after a failure, that wait must not become a
    # CollectiveTimeout without the failed rank's traceback.
    def program(comm):
        if comm.rank == 1:
            raise ValueError("bad value on rank 1")
        comm.barrier()

    with simdist.World(3, backend="mpi", timeout=1.5) as world:  # < the grace period (2 s)
        with pytest.raises(simdist.RankError) as info:
            world.run(program)
        assert "ValueError: bad value on rank 1" in info.value.failures[1]


@pytest.mark.slow
def test_mpi_hang_raises_collective_timeout_with_each_ranks_whereabouts():
    with simdist.World(2, backend="mpi", timeout=2.0) as w:
        def program(comm):
            if comm.rank == 0:
                time.sleep(60)
            comm.allreduce(np.ones(4, np.float32))

        started = time.monotonic()
        with pytest.raises(simdist.CollectiveTimeout) as info:
            w.run(program)
        assert time.monotonic() - started < 30
        report = info.value.report
        assert report[0].startswith("running user code")
        assert report[1].startswith("waiting in allreduce #1 (float32 (4,), op=sum)")
        assert w.run(lambda comm: comm.rank) == [0, 1]


@pytest.mark.slow
def test_mpi_rank_that_exits_raises_rank_died_and_the_next_run_works():
    def program(comm):
        if comm.rank == 2:
            os._exit(3)
        comm.barrier()

    with simdist.World(3, backend="mpi", timeout=TIMEOUT) as world:
        with pytest.raises(simdist.RankDied) as info:
            world.run(program)
        assert 2 in info.value.ranks
        assert world.run(lambda comm: comm.size) == [3, 3, 3]


def test_mpi_log_records_reach_the_driver_tagged_with_the_rank(world, caplog):
    caplog.set_level(logging.INFO)
    world.run(lambda comm: logging.getLogger("app").info("step %d done", comm.rank))
    records = sorted((r.rank, r.getMessage()) for r in caplog.records if r.name == "app")
    assert records == [(r, f"[rank {r}] step {r} done") for r in range(3)]


def test_peer_without_the_secret_is_refused_before_anything_is_unpickled(world):
    driver = world._driver
    ours, theirs = socket.socketpair()
    unpickled = []

    class Trap:
        def __reduce__(self):
            return unpickled.append, ("unpickled!",)

    def impostor():
        conn = Connection(theirs.detach())
        try:
            answer_challenge(conn, b"not the secret")
            deliver_challenge(conn, b"not the secret")
            conn.send_bytes(pickle.dumps(("hello", 0, 1, Trap())))
        except Exception:
            pass
        finally:
            conn.close()

    thread = threading.Thread(target=impostor)
    thread.start()
    before = list(driver._conns)
    driver._admit(ours)
    thread.join(10)
    assert driver._conns == before
    assert unpickled == []
    assert world.run(lambda comm: comm.rank) == [0, 1, 2]


def test_a_rank_in_a_world_of_another_size_is_an_mpiexec_of_another_mpi(world):
    # An mpiexec of one MPI starting ranks whose mpi4py uses another: each
    # rank is a singleton. The driver says so at the first hello instead of
    # waiting for ranks that never come.
    driver = world._driver
    ours, theirs = socket.socketpair()

    def singleton():
        conn = Connection(theirs.detach())
        try:
            answer_challenge(conn, driver._key)
            deliver_challenge(conn, driver._key)
            conn.send_bytes(pickle.dumps(("hello", 0, os.getpid(), 1, "Some Other MPI v1.0", socket.gethostname())))
        finally:
            conn.close()

    thread = threading.Thread(target=singleton)
    thread.start()
    before = list(driver._conns)
    with pytest.raises(simdist.SimdistError, match=r"MPI world of 1 process\(es\), not 3: its mpi4py uses Some Other "
                                                  r"MPI v1.0, which is not the MPI of that mpiexec"):
        driver._admit(ours)
    thread.join(10)
    assert driver._conns == before
    assert world.run(lambda comm: comm.rank) == [0, 1, 2]


# A driver whose rank 0 computes forever while rank 1 waits in a barrier; it
# prints the ranks' pids and mpiexec's, and "interrupted" on Ctrl-C.
STUCK_DRIVER = textwrap.dedent("""
    import os, simdist
    w = simdist.World(2, backend="mpi", timeout=600)
    os.write(1, (" ".join(map(str, w.pids + [w._driver._job.pid])) + "\\n").encode())
    def program(comm):
        if comm.rank == 0:
            while True:
                pass
        comm.barrier()
    try:
        w.run(program)
    except KeyboardInterrupt:
        os.write(1, b"interrupted\\n")
        w.close()
""")


@pytest.fixture
def driver_tmpdir():
    """The stuck driver's TMPDIR: a killed driver cannot remove its MPI job's
    session directory, so the test removes the directory that holds it."""
    path = tempfile.mkdtemp(prefix="simdist-test-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_stuck_driver(tmp_path, tmpdir):
    """The STUCK_DRIVER process (with Ctrl-C's default action) and its pids."""
    script = tmp_path / "driver.py"
    script.write_text(STUCK_DRIVER)
    restore_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, cwd=tmp_path,
                              env=dict(os.environ, TMPDIR=tmpdir), preexec_fn=restore_sigint)
    return driver, [int(p) for p in driver.stdout.readline().split()]


@pytest.mark.slow
def test_mpi_ranks_and_mpiexec_die_with_a_killed_driver(tmp_path, driver_tmpdir):
    driver, pids = start_stuck_driver(tmp_path, driver_tmpdir)
    try:
        assert len(pids) == 3 and all(alive(p) for p in pids)
        time.sleep(0.5)
        tree = descendants(driver.pid)  # mpiexec and below: MPICH's hydra_pmi_proxy, Open MPI's daemons
        assert set(pids) <= set(tree)
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        left = wait_gone(tree, within=15)
        assert left == [], [tree[p] for p in left]
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


@pytest.mark.slow
def test_ctrl_c_in_the_driver_leaves_no_mpi_process(tmp_path, driver_tmpdir):
    driver, pids = start_stuck_driver(tmp_path, driver_tmpdir)
    try:
        time.sleep(0.5)
        driver.send_signal(signal.SIGINT)
        assert driver.stdout.readline().strip() == b"interrupted"
        assert driver.wait(30) == 0
        assert wait_gone(pids, within=15) == []
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


@pytest.mark.slow
def test_runs_stopped_on_purpose_print_nothing_from_mpiexec(tmp_path):
    # After a failure the driver ends the job itself; mpiexec must not add its
    # own report of killed ranks (MPICH's hydra prints a "BAD TERMINATION"
    # banner when its ranks are sent SIGTERM) to the user's output.
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import sys, time, numpy as np, simdist
        def raises(comm):
            if comm.rank == 1:
                raise ValueError("on purpose")
            comm.barrier()
        def hangs(comm):
            if comm.rank == 0:
                time.sleep(60)
            comm.allreduce(np.ones(2))
        with simdist.World(3, backend="mpi", timeout=2) as w:
            for fn, error in ((raises, simdist.RankError), (hangs, simdist.CollectiveTimeout)):
                try:
                    w.run(fn)
                except error:
                    print(error.__name__, flush=True)
            print(w.run(lambda comm: comm.rank), flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "RankError\nCollectiveTimeout\n[0, 1, 2]\n", "")


def test_the_mpi_librarys_dev_shm_files_are_removed_once_every_rank_maps_them(world):
    # Nothing may stay in /dev/shm after a SIGKILL of the whole job, so the
    # ranks unlink the library's segments right after MPI_Init: Open MPI's one
    # per rank, MPICH's one per node (UCX, under MPICH, unlinks its own).
    def mapped(comm):
        with open("/proc/self/maps") as maps:
            return sorted({line.split(None, 5)[5].strip() for line in maps if " /dev/shm/" in line})

    files = world.run(mapped)
    assert [[f for f in paths if not f.endswith(" (deleted)")] for paths in files] == [[]] * 3
    assert world._driver._segments == set()


@pytest.mark.slow
def test_segments_of_a_job_killed_before_its_ranks_removed_them_are_noted_for_the_driver(tmp_path):
    # A rank killed while its peers unlink the segments together leaves them
    # mapped by nobody: each rank notes its files in the job's TMPDIR first.
    from simdist.mpi._segments import noted_segments

    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent("""
        import glob, os, time
        from mpi4py import MPI
        from simdist.mpi._segments import unlink_segments_once_mapped
        if MPI.COMM_WORLD.Get_rank() == 1:
            while not glob.glob(os.path.join(os.environ["TMPDIR"], "simdist-segments-*")):
                time.sleep(0.01)
            os._exit(3)
        unlink_segments_once_mapped(MPI.COMM_WORLD)
    """))
    tmpdir = simdist.mpi._driver.session_tmpdir()
    env = simdist.mpi._driver.launch_environment(MPIEXEC, tmpdir)
    try:
        subprocess.run(simdist.mpi._driver.launch_command(MPIEXEC, 2) + [sys.executable, str(script)], env=env,
                       capture_output=True, timeout=120)
        noted = noted_segments(tmpdir)
        assert noted and all(path.startswith("/dev/shm/") for path in noted), noted
    finally:
        for path in noted_segments(tmpdir):
            if os.path.exists(path):
                os.unlink(path)
        shutil.rmtree(tmpdir, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("order, algorithm", [("ring", 4), ("recursive_doubling", 3)])
def test_simulator_in_a_named_order_equals_open_mpi_pinned_to_that_algorithm(monkeypatch, order, algorithm):
    if simdist.mpi._driver.flavor(MPIEXEC) != "openmpi":
        pytest.skip("the algorithm numbers are Open MPI's")
    monkeypatch.setenv("OMPI_MCA_coll_tuned_use_dynamic_rules", "1")
    monkeypatch.setenv("OMPI_MCA_coll_tuned_allreduce_algorithm", str(algorithm))

    def program(comm):  # mixed magnitudes: every association gives other bits
        rng = np.random.default_rng(comm.rank)
        x = (rng.standard_normal(1001) * 10.0 ** rng.integers(-6, 6, 1001)).astype(np.float32)
        return comm.allreduce(x)

    on_mpi = simdist.run(program, 5, backend="mpi", timeout=TIMEOUT)
    in_order = simdist.run(program, 5, order=order)
    canonical = simdist.run(program, 5)
    assert all(a.tobytes() == in_order[0].tobytes() for a in on_mpi + in_order)
    assert canonical[0].tobytes() != in_order[0].tobytes()


def _stale_session_dir(mpiexec: str, where: str) -> str:
    """The session directory a killed Open MPI launcher leaves behind: start
    a job with TMPDIR=``where``, SIGKILL it, return what it left."""
    env = dict(os.environ, TMPDIR=where, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    job = subprocess.Popen([mpiexec, "-n", "1", sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not any(name.startswith("ompi.") for name in os.listdir(where)):
            assert time.monotonic() < deadline, "the launcher made no session directory"
            time.sleep(0.05)
        time.sleep(1.0)  # let it write its files
    finally:
        tree = descendants(job.pid)
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        wait_gone(tree, within=10)
    return os.path.join(where, next(n for n in os.listdir(where) if n.startswith("ompi.")))


@pytest.mark.slow
def test_stale_session_directories_of_killed_jobs_do_not_stop_a_world():
    """A launcher killed with SIGKILL leaves $TMPDIR/ompi.<its pid>; a later
    launcher that gets the same pid fails ("The PMIx server's listener thread
    failed to start", exit 213) unless its session files live elsewhere. Plant
    such a directory under the next few hundred pids in the default temporary
    directory: the world's job, with a session directory of its own, starts."""
    mpiexec = mpiexec_or_skip()
    if simdist.mpi._driver.flavor(mpiexec) != "openmpi":
        pytest.skip("the session directories are Open MPI's")
    own = tempfile.mkdtemp(prefix="simdist-test-")
    planted = []
    try:
        template = _stale_session_dir(mpiexec, own)
        old_pid = template.rsplit(".", 1)[1]
        base = os.getpid()
        for pid in range(base + 1, base + 600):
            target = os.path.join(tempfile.gettempdir(), f"ompi.{pid}")
            if os.path.exists(target):
                continue
            shutil.copytree(template, target, symlinks=True)
            planted.append(target)
            for name in os.listdir(target):
                if old_pid in name:
                    os.rename(os.path.join(target, name), os.path.join(target, name.replace(old_pid, str(pid))))
        with simdist.World(2, backend="mpi", timeout=TIMEOUT) as world:
            assert world.run(lambda comm: comm.rank) == [0, 1]
    finally:
        for path in planted:
            shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(own, ignore_errors=True)
