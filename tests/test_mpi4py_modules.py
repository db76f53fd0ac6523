"""mpi4py's own Python modules, sessions and intercommunicators on the
mpi4py stand-in (issue 20 items 1, 7 and the intercommunicators of 3).

* ``mpi4py.util.pkl5``, ``mpi4py.bench``, ``mpi4py.run`` and
  ``mpi4py.futures`` are the installed mpi4py's own modules, unchanged,
  running on the stand-in's ``MPI``; without mpi4py installed,
  ``mpi4py.util`` and ``mpi4py.futures`` refuse with NotImplementedError.
* ``MPI.Session`` and ``Intracomm.Create_from_group``.
* ``Intracomm.Create_intercomm``, ``MPI.Intercomm``: point to point to the
  remote group, the collectives with MPI's root rules, Merge, Split, Dup,
  ``Intercomm.Create_from_groups``; a process that never joins is a
  reported hang naming the call.

Each program asserts the values MPI defines; the same calls are compared
with Open MPI's in tests/mpi4py_programs/simdist_intercomm.py,
simdist_sessions.py and simdist_bench.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from simdist._script import HUNG

from mpi4py_prelude import PRELUDE
from mpi4py_prelude import passes as ok
from mpi4py_prelude import run_program as run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKL5 = """
    import numpy as np
    from mpi4py.util import pkl5
    assert pkl5.MPI is MPI  # the real module, on the stand-in's MPI
    pc = pkl5.Intracomm(comm)
    big = np.arange(100_000, dtype="d") + rank  # 800 kB: out of band (pkl5's threshold is 256 kB)
    data, bufs = MPI.pickle.dumps_oob(big)
    assert len(bufs) == 1 and bufs[0].nbytes == big.nbytes
    right, left = (rank + 1) % size, (rank - 1) % size
    got = pc.sendrecv(big, dest=right, sendtag=5, source=left, recvtag=5)
    assert np.array_equal(got, np.arange(100_000, dtype="d") + left)
    req = pc.issend({"from": rank}, right, 6)
    msg = pc.mprobe(left, 6)
    assert msg.recv() == {"from": left}
    req.wait()
    assert pc.bcast(("root", size) if rank == 0 else None, 0) == ("root", size)
    assert pc.alltoall(None) == [None] * size
    assert pc.alltoall([rank * 10 + j for j in range(size)]) == [j * 10 + rank for j in range(size)]
    assert pc.allgather(rank) == list(range(size))
    dup, tag = MPI._commctx_intra(comm)
    dup2, tag2 = MPI._commctx_intra(comm)
    assert dup == dup2 and dup != comm and tag2 == tag + 1  # one private duplicate, a fresh tag per call
"""


@pytest.mark.parametrize("n", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_pkl5_runs_unchanged_on_the_stand_in(tmp_path, n):
    ok(tmp_path, PKL5, n)


@pytest.mark.slow
def test_without_mpi4py_installed_util_and_futures_refuse_naming_themselves(tmp_path):
    """The stand-in alone: a Python that cannot find mpi4py (its
    site-packages seen through a directory without it)."""
    import numpy

    site = os.path.dirname(os.path.dirname(numpy.__file__))
    view = tmp_path / "site"
    view.mkdir()
    for entry in os.listdir(site):
        if not entry.startswith("mpi4py"):
            os.symlink(os.path.join(site, entry), view / entry)
    code = textwrap.dedent(f"""
        import sys
        sys.path[:0] = [{ROOT!r}, {str(view)!r}]
        import fake_backends.mpi4py as package
        assert package.__path__[-1].endswith("_without_mpi4py"), package.__path__
        for name in ("fake_backends.mpi4py.util", "fake_backends.mpi4py.futures"):
            try:
                __import__(name)
            except NotImplementedError as exc:
                print(exc)
    """)
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and "mpi4py.util (dtlib, pkl5, pool, sync) is not supported" in lines[0]
    assert "mpi4py.futures (MPIPoolExecutor) is not supported" in lines[1]


SESSIONS = """
    import numpy as np
    s = MPI.Session.Init()
    assert s and s != MPI.SESSION_NULL and not MPI.SESSION_NULL
    names = [s.Get_nth_pset(i) for i in range(s.Get_num_psets())]
    assert names[:2] == ["mpi://WORLD", "mpi://SELF"]
    assert [s.Get_pset_info(p).Get("mpi_size") for p in names[:2]] == [str(size), "1"]
    world = s.Create_group("mpi://WORLD")
    assert (world.size, world.rank) == (size, rank)
    me = MPI.Group.Create_from_session_pset(s, "mpi://SELF")
    assert (me.size, me.rank) == (1, 0) and me.Translate_ranks([0], world) == [rank]
    assert error_class(lambda: s.Create_group("mpi://NOWHERE")) == MPI.ERR_ARG
    c = MPI.Intracomm.Create_from_group(world, "org.example.world")
    assert (c.rank, c.size) == (rank, size) and c.allreduce(rank + 1) == size * (size + 1) // 2
    rev = world.Incl(list(range(size))[::-1])
    if rank % 2 == 0:  # only the even ranks call: a communicator without a parent
        evens = world.Incl(list(range(0, size, 2)))
        e = MPI.Intracomm.Create_from_group(evens, "org.example.evens")
        out = np.zeros(1)
        e.Allreduce(np.array([float(rank)]), out)
        assert (e.rank, e.size, out[0]) == (rank // 2, len(range(0, size, 2)), float(sum(range(0, size, 2))))
        e.Free()
    r = MPI.Intracomm.Create_from_group(rev, "org.example.reversed")
    assert r.rank == size - 1 - rank and r.bcast(rank, 0) == size - 1
    for comm_ in (c, r):
        comm_.Free()
    seen = []
    s.Set_errhandler(MPI.Session.Create_errhandler(lambda session, code: seen.append(code)))
    try:
        s.Call_errhandler(MPI.ERR_OTHER)
    except MPI.Exception:
        pass
    assert seen == [MPI.ERR_OTHER]
    s.Finalize()
    assert not s and s == MPI.SESSION_NULL
    assert error_class(lambda: s.Get_num_psets()) == MPI.ERR_SESSION
"""


def test_sessions_and_create_from_group(tmp_path):
    ok(tmp_path, SESSIONS, 3)


INTERCOMM = """
    import numpy as np
    color = rank % 2
    local = comm.Split(color, rank)
    inter = local.Create_intercomm(0, comm, 1 - color, tag=11)
    nl, nr = local.size, size - local.size
    remote = [w for w in range(size) if w % 2 != color]
    assert inter.Is_inter() and not inter.Is_intra() and isinstance(inter, MPI.Intercomm)
    assert (inter.size, inter.rank, inter.remote_size) == (nl, local.rank, nr)
    assert inter.Get_remote_group().Translate_ranks(None, comm.Get_group()) == remote
    assert inter.Get_group().Translate_ranks(None, comm.Get_group()) == [w for w in range(size) if w % 2 == color]
    try:
        MPI.Intracomm(inter)
        raise AssertionError("an Intracomm of an intercommunicator")
    except TypeError:
        pass
    assert type(MPI.Comm.fromint(inter.toint())) is MPI.Intercomm
    parent = MPI.Comm.Get_parent()  # no rank was spawned: MPI.COMM_NULL, as an Intercomm
    assert isinstance(parent, MPI.Intercomm) and parent == MPI.COMM_NULL
    # point to point: ranks name the remote group
    peer = inter.rank % nr
    if inter.rank < nr:
        inter.send((color, inter.rank), dest=peer, tag=3)
    if inter.rank < nl and inter.rank < nr:
        assert inter.recv(source=inter.rank, tag=3) == (1 - color, inter.rank)
    assert error_class(lambda: inter.send(0, dest=nr)) == MPI.ERR_RANK
    # rooted calls: the root passes MPI.ROOT, its group MPI.PROC_NULL, the other group the root's rank
    root = (MPI.ROOT if inter.rank == 0 else MPI.PROC_NULL) if color == 0 else 0
    got = inter.bcast({"from": rank} if root == MPI.ROOT else None, root)
    assert got == ({"from": 0} if color == 1 else None)
    buf = np.full(3, -1.0) if color else np.arange(3.0)
    inter.Bcast(buf, root)
    assert buf.tolist() == [0.0, 1.0, 2.0] or (color == 0 and root == MPI.PROC_NULL)
    g = np.zeros(nr, "i") if root == MPI.ROOT else None
    inter.Gather(np.array([rank], "i"), g, root)
    if root == MPI.ROOT:
        assert g.tolist() == remote
    red = np.zeros(2) if root == MPI.ROOT else None
    inter.Reduce(np.array([rank, 1.0]), red, MPI.SUM, root)
    if root == MPI.ROOT:
        assert red.tolist() == [float(sum(remote)), float(nr)]
    sc = np.zeros(1, "i")
    inter.Scatter(np.arange(nr, dtype="i") * 7 if root == MPI.ROOT else None, sc, root)
    if color == 1:
        assert sc[0] == inter.rank * 7
    # the other group's data
    assert inter.allgather(rank) == remote
    assert inter.allreduce(rank) == sum(remote)
    assert inter.alltoall([(rank, j) for j in range(nr)]) == [(w, inter.rank) for w in remote]
    ag = np.zeros(nr, "i")
    inter.Allgather(np.array([rank], "i"), ag)
    assert ag.tolist() == remote
    ar = np.zeros(1)
    inter.Allreduce(np.array([rank + 0.5]), ar, MPI.SUM)
    assert ar[0] == sum(w + 0.5 for w in remote)
    rs = np.zeros(1)
    inter.Reduce_scatter_block(np.arange(nr, dtype="d") + rank, rs, MPI.MAX)
    assert rs[0] == max(remote) + inter.rank
    inter.Barrier()
    assert not hasattr(inter, "Scan") and not hasattr(inter, "Create_group")  # as in mpi4py
    for refused in (inter.Ibarrier, lambda: inter.Iallreduce(ar, ar), lambda: inter.Create(MPI.GROUP_EMPTY)):
        try:
            refused()
            raise AssertionError("an intracommunicator's call ran on an intercommunicator")
        except NotImplementedError as exc:
            assert "not simulated on intercommunicators" in str(exc)
    # communicators of an intercommunicator
    merged = inter.Merge(high=bool(color))
    assert merged.size == size and merged.allgather(rank) == list(range(0, size, 2)) + list(range(1, size, 2))
    dup = inter.Dup()
    assert inter.Compare(dup) == MPI.CONGRUENT and dup.allgather(rank) == remote
    half = inter.Split(0 if inter.rank == 0 else MPI.UNDEFINED, 0)
    assert half != MPI.COMM_NULL if inter.rank == 0 else half == MPI.COMM_NULL
    if half:
        assert (half.size, half.remote_size, half.allgather(rank)) == (1, 1, [1 - color])
        half.Free()
    groups = [comm.Get_group().Incl([w for w in range(size) if w % 2 == c]) for c in (color, 1 - color)]
    fg = MPI.Intercomm.Create_from_groups(groups[0], 0, groups[1], 0, "org.example.pair")
    assert fg.Compare(inter) == MPI.CONGRUENT and fg.allreduce(1) == nr
    for c in (fg, dup, merged, inter, local):
        c.Free()
"""


def test_intercommunicators(tmp_path):
    ok(tmp_path, INTERCOMM, 3)


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 4, 5])
def test_intercommunicators_on_other_numbers_of_ranks(tmp_path, n):
    ok(tmp_path, INTERCOMM, n)


def test_a_process_that_never_joins_an_intercommunicator_collective_is_a_reported_hang(tmp_path):
    """Each rank's wait, named as the user called it, and the line of its
    call: a deadlock, found at once."""
    outcome = run(tmp_path, """
        local = comm.Split(rank % 2, rank)
        inter = local.Create_intercomm(0, comm, 1 - rank % 2, tag=0)
        if rank == 0:
            inter.allreduce(rank)
        else:
            comm.recv(source=0)  # waits for rank 0, which waits in the allreduce for rank 1
    """, 2, timeout=10.0)
    assert outcome.status == HUNG, outcome.error
    line = (PRELUDE + "\n").count("\n") + 4  # inter.allreduce(rank)
    assert f"rank 0: waiting in allreduce on the intercommunicator Create_intercomm of Split(color=0) of " \
           f"MPI_COMM_WORLD at prog.py:{line}, on rank 1" in outcome.error, outcome.error
    assert "deadlock: rank 0 in allreduce" in outcome.error, outcome.error


@pytest.mark.slow
def test_create_intercomm_errors_leave_nothing_behind(tmp_path):
    ok(tmp_path, """
        import pickle
        local = comm.Split(rank % 2, rank)
        assert error_class(lambda: local.Create_intercomm(local.size, comm, 1 - rank % 2)) == MPI.ERR_RANK
        inter = local.Create_intercomm(0, comm, 1 - rank % 2, tag=0)
        if rank == 0:
            try:
                inter.scatter([lambda: 0], MPI.ROOT)
                raise AssertionError("a lambda pickled")
            except (AttributeError, TypeError, pickle.PicklingError):
                pass  # the lambda cannot be pickled: rank 0 sent nothing
            inter.scatter([2], MPI.ROOT)
        else:
            assert inter.scatter(None, 0) == 2
        assert comm.allreduce(1) == size  # the world's messages still match
    """, 2)


@pytest.mark.slow
def test_mpi4py_futures_pool_on_comm_world(tmp_path):
    """``simdist run -n 3 -m mpi4py.futures prog.py``: MPIPoolExecutor with
    rank 0 as the client and ranks 1 and 2 as its workers."""
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent("""
        from mpi4py.futures import MPIPoolExecutor
        if __name__ == "__main__":
            with MPIPoolExecutor() as pool:
                print(sorted(pool.map(pow, range(8), [2] * 8)))
    """))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "3", "-m", "mpi4py.futures", str(prog)],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [str([i * i for i in range(8)])]


def test_a_pool_that_spawns_fails_at_once_naming_spawn_instead_of_waiting_for_ever(tmp_path):
    """MPIPoolExecutor without ``-m mpi4py.futures`` spawns its workers from
    a thread: a Spawn that fails there (no spare slot: ``--universe 1``)
    fails the main thread too, naming the call and the option that gives slots."""
    outcome = run(tmp_path, """
        from mpi4py.futures import MPIPoolExecutor
        with MPIPoolExecutor(max_workers=2) as pool:
            print(list(pool.map(abs, [-1, -2])))
    """, 1, timeout=60, universe=1)
    assert outcome.status == 1, outcome
    for text in ("MPI_ERR_SPAWN", "Spawn of 2 processes", "--universe", "called in thread"):
        assert text in outcome.error, outcome.error


@pytest.mark.slow
def test_a_pool_in_a_script_without_the_main_idiom_aborts_the_run_as_over_open_mpi(tmp_path):
    """The pool's spawned workers run the script again, whose pool would
    spawn again: mpi4py aborts from its pool thread, and MPI_Abort ends the
    whole run (status 1, as ``mpiexec --oversubscribe -n 1`` gives), not
    the thread alone, which left the program waiting for its futures."""
    outcome = run(tmp_path, """
        from mpi4py.futures import MPIPoolExecutor
        with MPIPoolExecutor(max_workers=2) as pool:
            print(list(pool.map(abs, [-1, -2])))
    """, 1, timeout=60)
    assert outcome.status == 1, outcome
    assert "MPI_Abort(1)" in outcome.error, outcome.error


def test_dtlib_maps_datatypes_to_numpy_and_back_as_over_open_mpi(tmp_path):
    """``mpi4py.util.dtlib`` runs on ``MPI._typecode``/``MPI._typealign``,
    whose values here are those mpi4py gives over Open MPI 5 (measured)."""
    outcome = run(tmp_path, """
        import numpy as np
        from mpi4py.util import dtlib
        assert [MPI._typecode(t) for t in (MPI.INT, MPI.INT32_T, MPI.BOOL, MPI.COMPLEX16, MPI.LONG_LONG, MPI.AINT)] \\
            == ["i", "i4", "b1", "c16", "q", "p"]
        assert [MPI._typealign(t) for t in (MPI.TWOINT, MPI.DOUBLE_INT, MPI.FLOAT16_T, MPI.CHAR)] == [4, 8, 2, 1]
        assert MPI._typecode(MPI.DOUBLE_INT) is None and MPI._typecode(MPI.INT.Dup()) is None
        # a Fortran 90 parameterized type is a handle of its own on a predefined one: its code
        assert [MPI._typecode(MPI.Datatype.Create_f90_complex(p, MPI.UNDEFINED)) for p in (6, 7)] == ["c8", "c16"]
        assert dtlib.to_numpy_dtype(MPI.Datatype.Create_f90_real(15, MPI.UNDEFINED)) == np.float64
        assert dtlib.to_numpy_dtype(MPI.Datatype.Create_f90_complex(6, MPI.UNDEFINED)) == np.complex64
        assert dtlib.to_numpy_dtype(dtlib.from_numpy_dtype(np.dtype("f8"))) == np.float64
        assert dtlib.to_numpy_dtype(MPI.INT) == np.int32
        vector = MPI.DOUBLE.Create_vector(2, 1, 2)
        assert dtlib.to_numpy_dtype(vector) == np.dtype({"names": ["f0", "f1"], "formats": [("<f8", (1,))] * 2,
                                                          "offsets": [0, 16], "itemsize": 24, "aligned": True})
    """, 1)
    assert outcome.status == 0, outcome.error
