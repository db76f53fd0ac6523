"""The end of a rank's program as under ``mpiexec``: the rank waits for the
non-daemon threads the program started, then runs its ``atexit`` handlers,
before it leaves MPI (so they may still communicate), and ranks that wait
outside MPI after another rank has finished are a hang reported at the
timeout, never an endless wait."""

from __future__ import annotations

import atexit
import textwrap

import pytest

import simdist
from simdist._main import run_main
from test_cli_run import simdist_run

STOP_FROM_ATEXIT = """
    import atexit
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.rank == 0:
        def stop_workers():                 # as cluster launchers built on mpi4py do
            for r in range(1, comm.size):
                comm.send("stop", dest=r, tag=7)
        atexit.register(stop_workers)
        print("rank 0: main done", flush=True)
    else:
        print(f"rank {comm.rank} got {comm.recv(source=0, tag=7)}", flush=True)
"""

HANDLERS = """
    import atexit, sys

    def say(*args, **kwargs):
        print("say", *args, *sorted(kwargs.items()), flush=True)

    def boom():
        raise ValueError("boom in a handler")

    def gone():
        print("unregistered, yet run", flush=True)

    atexit.register(say, 1)
    atexit.register(boom)
    atexit.register(gone)
    atexit.register(say, 2, key="v")
    atexit.register(sys.exit, 5)           # SystemExit in a handler: printed, status unchanged
    atexit.unregister(gone)
    print("main done", flush=True)
"""

EVENT_LOOP = """
    import time
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.rank:                           # waits outside MPI for a stop that never comes
        while not comm.Iprobe(source=0, tag=99):
            time.sleep(0.01)
"""

THREAD_AFTER_MAIN = """
    import atexit, threading, time
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    atexit.register(print, f"rank {comm.rank}: handler", flush=True)

    def late():                                 # as dask-mpi's client thread, on after the main one
        time.sleep(0.2)
        print(f"rank {comm.rank}: thread got {comm.allreduce(comm.rank)}", flush=True)

    threading.Thread(target=late).start()
    print(f"rank {comm.rank}: main done", flush=True)
"""

THREADS_STOPPED_AT_EXIT = """
    import queue, threading
    from concurrent.futures import ThreadPoolExecutor
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    jobs = queue.Queue()

    def serve():
        while (job := jobs.get()) is not None:
            print(f"rank {comm.rank}: served {job}", flush=True)

    threading.Thread(target=serve).start()
    threading._register_atexit(jobs.put, None)  # as mpi4py.futures stops its pools' threads at exit
    jobs.put("a")
    pool = ThreadPoolExecutor(2)                # never shut down
    print(pool.submit(str, f"rank {comm.rank}: pooled").result(), flush=True)
"""

def _write(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(textwrap.dedent(source))
    return path


def test_a_handler_that_tells_the_others_to_stop_runs_before_the_rank_leaves_mpi(tmp_path):
    path = _write(tmp_path, "stop.py", STOP_FROM_ATEXIT)
    done = simdist_run("-n", 3, "--timeout", 20, path.name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["rank 0: main done", "rank 1 got stop", "rank 2 got stop"]


def test_the_rank_waits_for_the_threads_its_program_started_before_its_handlers_and_mpi_end(tmp_path):
    path = _write(tmp_path, "late.py", THREAD_AFTER_MAIN)
    done = simdist_run("-n", 2, "--timeout", 20, path.name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        mine = [line for line in done.stdout.splitlines() if line.startswith(f"rank {rank}:")]
        assert mine == [f"rank {rank}: main done", f"rank {rank}: thread got 1", f"rank {rank}: handler"]


def test_threads_that_the_interpreter_stops_at_exit_do_not_hold_the_rank(tmp_path):
    """A pool's threads that wait for work: mpi4py.futures' stop at its
    ``threading`` exit call, those of a ``concurrent.futures`` pool never
    shut down are not waited for (the interpreter's exit stops them)."""
    path = _write(tmp_path, "pools.py", THREADS_STOPPED_AT_EXIT)
    done = simdist_run("-n", 2, "--timeout", 20, path.name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["rank 0: pooled", "rank 0: served a", "rank 1: pooled",
                                                "rank 1: served a"]

def test_handlers_run_last_first_and_a_raising_one_is_printed_without_changing_the_status(tmp_path):
    path = _write(tmp_path, "handlers.py", HANDLERS)
    done = simdist_run("-n", 1, path.name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["main done", "say 2 ('key', 'v')", "say 1"]
    assert done.stderr.count("Exception ignored in atexit callback") == 2
    assert "SystemExit: 5" in done.stderr and "ValueError: boom in a handler" in done.stderr
    assert "simdist/_main.py" not in done.stderr  # the traceback starts in the handler, as Python's


def test_handlers_are_not_carried_to_the_next_program(tmp_path, capfd):
    registering = _write(tmp_path, "registers.py", "import atexit\natexit.register(print, 'handler ran')\n")
    quiet = _write(tmp_path, "quiet.py", "print('second program')\n")
    assert run_main(str(registering), [], module=False) == 0
    assert run_main(str(quiet), [], module=False) == 0
    assert capfd.readouterr().out.splitlines() == ["handler ran", "second program"]
    assert atexit.register.__module__ == "atexit"  # the interpreter's own again


def test_handlers_run_when_the_program_raises(tmp_path, capfd):
    path = _write(tmp_path, "raises.py", "import atexit\natexit.register(print, 'handler ran')\n1 / 0\n")
    with pytest.raises(ZeroDivisionError):
        run_main(str(path), [], module=False)
    assert capfd.readouterr().out == "handler ran\n"


@pytest.mark.slow
def test_ranks_waiting_outside_mpi_after_one_finished_are_a_hang_at_the_timeout(tmp_path):
    path = _write(tmp_path, "loop.py", EVENT_LOOP)
    done = simdist_run("-n", 3, "--timeout", 1, path.name, cwd=tmp_path)
    assert done.returncode == 124, done.stderr
    assert "no progress for 1 s" in done.stderr
    assert "rank 0: returned" in done.stderr
    assert "rank 1: running user code" in done.stderr and "rank 2: running user code" in done.stderr


def _one_rank_loops(comm):
    import time

    while comm.rank == 1:
        time.sleep(0.01)
    return comm.rank


@pytest.mark.slow
def test_a_world_run_whose_other_ranks_never_return_times_out():
    with simdist.World(2, timeout=1) as world:
        with pytest.raises(simdist.CollectiveTimeout) as caught:
            world.run(_one_rank_loops)
        assert world.run(lambda comm: comm.rank) == [0, 1]  # usable again
    assert "rank 0: returned" in str(caught.value) and "rank 1: running user code" in str(caught.value)
