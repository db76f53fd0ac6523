"""Spawning processes in the simulated mpi4py: ``Intracomm.Spawn``,
``Spawn_multiple`` and ``Comm.Get_parent`` in the spare slots of a universe
(``simdist run --universe U``, ``World(universe=U)``).

What a spawned run prints is compared with Open MPI in
``mpi4py_programs/simdist_spawn.py`` (``test_mpi4py_programs``); here: the
failures, each named, the reuse of slots, and that the simulator's
deadlock check still decides at once when spare slots run nothing.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

import simdist
from simdist._script import HUNG, run_script

PARENT = """\
import sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
"""


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path, monkeypatch):
    """The programs name their children by relative paths, as users do."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "child_state.py").write_text("count = 0\n")


def run(tmp_path, source: str, n: int = 1, universe: int | None = None, child: str = "", timeout: float = 30.0):
    (tmp_path / "child.py").write_text(textwrap.dedent(child))
    path = tmp_path / "prog.py"
    path.write_text(PARENT + textwrap.dedent(source))
    return run_script(str(path), [], n, timeout=timeout, universe=universe)


CHILD = """\
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
parent.send(MPI.COMM_WORLD.rank, dest=0)
parent.Disconnect()
"""


def test_a_spawn_beyond_the_spare_slots_fails_naming_the_universe(tmp_path):
    outcome = run(tmp_path, """
        try:
            comm.Spawn(sys.executable, ["child.py"], 3)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_SPAWN, exc
            assert "the universe has 3 slots, 1 for the world" in exc.__notes__[0], exc.__notes__
        else:
            raise AssertionError("spawned 3 processes into 2 spare slots")
        """, universe=3, child=CHILD)
    assert outcome.status == 0, outcome.error


def test_spawn_without_spare_slots_says_how_to_get_them(tmp_path):
    outcome = run(tmp_path, 'comm.Spawn(sys.executable, ["child.py"], 1)\n', universe=1, child=CHILD)
    assert outcome.status == 1
    for text in ("MPI_ERR_SPAWN", "Spawn of 1 process:", "the universe has 1 slot,", "--universe"):
        assert text in outcome.error, outcome.error


def test_spawn_needs_no_option_as_under_mpiexec_oversubscribe(tmp_path):
    # each of 2 ranks spawns 4 processes at once: more than the host's CPUs, as Open MPI oversubscribes them
    outcome = run(tmp_path, """
        children = MPI.COMM_SELF.Spawn(sys.executable, ["child.py"], 4)
        got = sorted(children.recv(source=r) for r in range(4))
        children.Disconnect()
        assert got == [0, 1, 2, 3], got
        """, n=2, child=CHILD)
    assert outcome.status == 0, outcome.error


def test_spawn_converts_maxprocs_as_mpi4py_converts_a_c_int(tmp_path):
    """Under mpi4py over Open MPI ``maxprocs=True`` spawns 1 process,
    ``2.0`` spawns 2 and ``"1"`` is a TypeError; ``Spawn_multiple``
    reads its list of counts as integers: ``[True, 1]`` spawns 2, a float
    in it is a TypeError."""
    outcome = run(tmp_path, """
        def spawned(children, n):
            assert sorted(children.recv(source=r) for r in range(n)) == list(range(n))
            children.Disconnect()

        for maxprocs, n in ((True, 1), (2.0, 2)):
            spawned(MPI.COMM_SELF.Spawn(sys.executable, ["child.py"], maxprocs), n)
        spawned(MPI.COMM_SELF.Spawn_multiple([sys.executable] * 2, [["child.py"]] * 2, [True, 1]), 2)
        for call, bad in ((lambda: MPI.COMM_SELF.Spawn(sys.executable, ["child.py"], "1"), "an integer is required"),
                          (lambda: MPI.COMM_SELF.Spawn_multiple([sys.executable] * 2, [["child.py"]] * 2, [1, 2.0]),
                           "'float' object cannot be interpreted as an integer")):
            try:
                call()
            except TypeError as exc:
                assert bad in str(exc), exc
            else:
                raise AssertionError(f"spawned where mpi4py raises TypeError: {bad}")
        """, child=CHILD)
    assert outcome.status == 0, outcome.error


def test_a_spare_slot_holds_memory_only_once_a_spawn_starts_a_process_there(tmp_path):
    # the arena (the memfd the rank maps): its reserved bytes, before and after a Spawn of 2
    outcome = run(tmp_path, """
        import os
        from simdist.sim._layout import Layout

        arena = next(int(fd) for fd in os.listdir("/proc/self/fd")
                     if "memfd:simdist" in os.readlink(f"/proc/self/fd/{fd}"))
        reserved = lambda: os.fstat(arena).st_blocks * 512
        slot, before = Layout(1).slot_bytes, reserved()
        assert slot <= before < 2 * slot, (before, slot)  # the world's one rank, not its spare slots
        children = comm.Spawn(sys.executable, ["child.py"], 2)
        assert sorted(children.recv(source=r) for r in range(2)) == [0, 1]
        children.Disconnect()
        assert 2 * slot <= reserved() - before < 3 * slot, (reserved(), before, slot)  # their slots, rings, contexts
        """, child=CHILD)
    assert outcome.status == 0, outcome.error


def test_universe_size_is_the_hosts_slots_or_the_universe_given(tmp_path):
    slots = len(os.sched_getaffinity(0))
    source = "assert comm.Get_attr(MPI.UNIVERSE_SIZE) == {}, comm.Get_attr(MPI.UNIVERSE_SIZE)\n"
    assert run(tmp_path, source.format(slots), n=3).status == 0  # as Open MPI counts one host's slots
    assert run(tmp_path, source.format(5), n=3, universe=5).status == 0
    with simdist.World(2) as world:  # no spare slot: the universe is the world
        assert world.run(_universe_size) == [2, 2]


def _universe_size(comm):
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_attr(MPI.UNIVERSE_SIZE)


def test_a_command_that_is_not_python_is_refused_naming_it(tmp_path):
    outcome = run(tmp_path, """
        try:
            comm.Spawn("/bin/echo", ["hi"], 1)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_SPAWN
            assert "'/bin/echo' is not a Python program" in exc.__notes__[0], exc.__notes__
        else:
            raise AssertionError("spawned /bin/echo")
        """, universe=2)
    assert outcome.status == 0, outcome.error


def test_slots_of_returned_processes_are_spawned_again(tmp_path):
    """Six spawns of two processes in turn, in a universe with two spare
    slots: each new process is fresh (its module state starts anew)."""
    outcome = run(tmp_path, """
        for i in range(6):
            inter = comm.Spawn(sys.executable, ["child.py", str(i)], 2)
            got = sorted(inter.recv(source=r) for r in range(2))
            assert got == [(i, 0, 1), (i, 1, 1)], got
            inter.Disconnect()
        """, universe=3, child="""
        import sys
        from mpi4py import MPI
        import child_state
        child_state.count += 1
        parent = MPI.Comm.Get_parent()
        parent.send((int(sys.argv[1]), MPI.COMM_WORLD.rank, child_state.count), dest=0)
        parent.Disconnect()
        """)
    assert outcome.status == 0, outcome.error


def test_a_spawned_process_that_raises_fails_the_run_with_its_traceback(tmp_path):
    outcome = run(tmp_path, """
        inter = comm.Spawn(sys.executable, ["child.py"], 1)
        inter.recv(source=0)
        """, universe=2, child="""
        from mpi4py import MPI
        parent = MPI.Comm.Get_parent()
        raise ValueError("the child's own error")
        """)
    assert outcome.status == 1
    assert "rank 1" in outcome.error and "ValueError: the child's own error" in outcome.error, outcome.error


def test_a_spawned_process_that_exits_with_a_status_fails_the_run(tmp_path):
    outcome = run(tmp_path, """
        inter = comm.Spawn(sys.executable, ["child.py"], 1)
        inter.Disconnect()
        """, universe=2, child="""
        import sys
        from mpi4py import MPI
        MPI.Comm.Get_parent().Disconnect()
        sys.exit(3)
        """)
    assert outcome.status == 1
    assert "exited with status 3" in outcome.error, outcome.error


def test_code_and_modules_run_as_python_runs_them(tmp_path):
    outcome = run(tmp_path, """
        inter = comm.Spawn_multiple([sys.executable] * 2, [["-u", "-c", CODE, "a"], ["-X", "dev", "-m", "child", "b"]])
        assert sorted(inter.recv(source=r) for r in range(2)) == [("-c", ["a"], 0), ("child", ["b"], 1)]
        inter.Disconnect()
        """.replace("CODE", repr("import sys\nfrom mpi4py import MPI\np = MPI.Comm.Get_parent()\n"
                                 "p.send((sys.argv[0], sys.argv[1:], MPI.COMM_WORLD.Get_attr(MPI.APPNUM)), dest=0)\n"
                                 "p.Disconnect()\n")),
        universe=3, child="""
        import sys
        from mpi4py import MPI
        p = MPI.Comm.Get_parent()
        p.send((__name__ == "__main__" and "child", sys.argv[1:], MPI.COMM_WORLD.Get_attr(MPI.APPNUM)), dest=0)
        p.Disconnect()
        """)
    assert outcome.status == 0, outcome.error


def test_a_spawned_process_waiting_for_parents_that_returned_is_an_error_not_a_hang(tmp_path):
    outcome = run(tmp_path, """
        comm.Spawn(sys.executable, ["child.py"], 1)
        """, universe=3, child="""
        from mpi4py import MPI
        MPI.Comm.Get_parent().recv(source=0)
        """, timeout=60)  # a spare slot left: it sends nothing either
    assert outcome.status == 1 and "hung" not in outcome.error, outcome.error
    assert "rank 1" in outcome.error and "returned" in outcome.error, outcome.error


def _recv_from_each_other(comm):
    return comm.recv((comm.rank + 1) % comm.size)


def test_a_deadlock_is_found_at_once_while_spare_slots_run_nothing():
    """Spare slots are not ranks that might still send: the deadlock check
    decides as soon as the world's ranks all wait for each other."""
    with simdist.World(2, timeout=30, universe=4) as world:
        with pytest.raises(simdist.Deadlock) as caught:
            world.run(_recv_from_each_other)
        assert caught.value.at_once and sorted(caught.value.report) == [0, 1], caught.value


def test_universe_is_checked():
    with pytest.raises(simdist.InvalidValue, match="universe"):
        simdist.World(2, universe=1)
    with pytest.raises(simdist.InvalidValue, match="universe"):
        simdist.World(2, backend="mpi", universe=4)
    out = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "2", "--universe", "1", "x.py"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--universe 1: give at least the 2 ranks of -n" in out.stderr, out.stderr


def test_a_spawning_pool_runs_with_spare_slots(tmp_path):
    """MPIPoolExecutor without ``-m mpi4py.futures`` spawns its workers:
    with spare slots it runs, as under mpiexec."""
    if importlib.util.find_spec("mpi4py") is None:  # found, not imported: that would start a real MPI here
        pytest.skip("mpi4py is not installed")
    prog = tmp_path / "pool.py"
    prog.write_text(textwrap.dedent("""
        from mpi4py.futures import MPIPoolExecutor
        if __name__ == "__main__":
            with MPIPoolExecutor(max_workers=2) as pool:
                print(list(pool.map(abs, [-1, -2, -3])))
    """))
    out = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "1", "--universe", "3", str(prog)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.splitlines() == ["[1, 2, 3]"], out.stderr


def _spawn_two(comm):
    world = simdist.mpi4py_comm(comm)
    code = ("from mpi4py import MPI; p = MPI.Comm.Get_parent(); p.send(MPI.COMM_WORLD.rank * 10, dest=0); "
            "p.Disconnect()")
    inter = world.Spawn(sys.executable, ["-c", code], 2)
    got = sorted(inter.recv(source=r) for r in range(2)) if world.rank == 0 else None
    inter.Disconnect()
    return got


def test_functions_run_by_world_run_spawn_through_mpi4py_comm():
    """A World with spare slots: each run spawns into them again."""
    with simdist.World(2, universe=4) as world:
        assert world.run(_spawn_two) == world.run(_spawn_two) == [[0, 10], None]


def test_a_deadlock_among_spawned_processes_is_reported_at_once_naming_their_calls(tmp_path):
    outcome = run(tmp_path, """
        inter = comm.Spawn(sys.executable, ["child.py"], 2)
        print(inter.recv(source=0))
        """, universe=3, child="""
        from mpi4py import MPI
        w = MPI.COMM_WORLD
        w.recv(source=(w.rank + 1) % w.size)
        """, timeout=30)
    assert outcome.status == HUNG, outcome.error
    for text in ("found as soon as every rank that had not returned waited", "on Spawn of MPI_COMM_WORLD at prog.py:",
                 "rank 1: waiting in recv(source=1, tag=ANY_TAG) at child.py:4, on rank 2"):
        assert text in outcome.error, outcome.error
