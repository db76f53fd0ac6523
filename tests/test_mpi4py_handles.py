"""Null and predefined handles, error handlers and MPI errors of the mpi4py
stand-in, as mpi4py gives them under Open MPI.

Each program asserts what mpi4py 4.1 under Open MPI 5 gives (measured with
``mpiexec``); ``test_the_programs_pass_under_mpiexec`` runs them there too,
so the assertions are checked against the real thing where MPI is
installed. The other tests run them under the stand-in.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap

import pytest

from conftest import dev_shm
from simdist.mpi._driver import session_tmpdir
from test_mpi4py_api import PRELUDE, ok, run
from test_mpi4py_programs import mpiexec_command, remove_orphaned_segments

NULL_INFO = """
    null = MPI.INFO_NULL
    assert not null and len(null) == 0 and null.keys() == [] and null.get("k") is None
    for call, args in [("Set", ("k", "v")), ("Get", ("k",)), ("Delete", ("k",)), ("Get_nkeys", ()),
                       ("Get_nthkey", (0,)), ("Dup", ()), ("Free", ())]:
        try:
            getattr(null, call)(*args)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_INFO, (call, exc)
        else:
            raise AssertionError(f"INFO_NULL.{call} did not raise")
    for change in (lambda: null.__setitem__("k", "v"), lambda: null.update([]), lambda: null.pop("k")):
        try:
            change()
        except KeyError:
            pass
        else:
            raise AssertionError("a null info took a change")
    assert len(MPI.INFO_NULL) == 0 and MPI.Info() == MPI.INFO_NULL   # nothing leaked into it

    info = MPI.Info.Create({"a": "1"})
    info["b"] = "2"
    assert info.items() == [("a", "1"), ("b", "2")] and info.Get_nthkey(1) == "b" and "b" in info
    for call, code in [(lambda: info.Delete("nokey"), MPI.ERR_INFO_NOKEY),
                       (lambda: info.Get_nthkey(2), MPI.ERR_INFO_KEY),
                       (lambda: info.Get_nthkey(-1), MPI.ERR_ARG),
                       (lambda: info.Set("k" * 36, "v"), MPI.ERR_INFO_KEY),
                       (lambda: info.Set("k", "v" * 256), MPI.ERR_INFO_VALUE)]:
        try:
            call()
        except MPI.Exception as exc:
            assert exc.Get_error_class() == code, (exc, code)
        else:
            raise AssertionError(f"no error {code}")
    dup = info.Dup()
    assert dup.items() == info.items() and dup != info and MPI.Info(info) == info
    info.Free()
    assert info == MPI.INFO_NULL and not info and dup.Get("a") == "1"
    assert MPI.INFO_ENV and MPI.INFO_ENV.Get("wdir")
    env = MPI.Info.Create_env()
    assert env.Get("wdir") == MPI.INFO_ENV.Get("wdir") and env != MPI.INFO_ENV
    env.Free()
"""

PICKLED_HANDLES = """
    import pickle

    names = ["COMM_NULL", "COMM_WORLD", "COMM_SELF", "ERRHANDLER_NULL", "ERRORS_RETURN", "ERRORS_ARE_FATAL",
             "ERRORS_ABORT", "INFO_NULL", "INFO_ENV", "REQUEST_NULL", "MESSAGE_NULL", "MESSAGE_NO_PROC",
             "DATATYPE_NULL", "DOUBLE", "INT", "TWOINT", "FLOAT_INT", "C_BOOL", "OP_NULL", "MAX", "SUM", "MAXLOC",
             "REPLACE", "NO_OP"]
    for name in names:
        handle = getattr(MPI, name)
        assert pickle.loads(pickle.dumps(handle)) is handle, name
    for copy in (MPI.Datatype(MPI.DOUBLE), MPI.Op(MPI.MAX), MPI.Errhandler(MPI.ERRORS_RETURN), MPI.Comm(),
                 MPI.Info(), MPI.Info(MPI.INFO_ENV), MPI.Request(), MPI.Message(), comm.Get_errhandler()):
        again = pickle.loads(pickle.dumps(copy))
        assert again == copy and type(again) is type(copy), copy
    for handle in (MPI.MAX, MPI.DOUBLE, MPI.ERRORS_RETURN, MPI.INFO_NULL, MPI.Datatype(MPI.INT)):
        assert type(handle).fromint(handle.toint()) == handle, handle
        assert type(handle).f2py(handle.py2f()) == handle, handle
    info = pickle.loads(pickle.dumps(MPI.Info.Create({"k": "v"})))
    assert info.items() == [("k", "v")]
    try:
        pickle.dumps(comm.Dup())
    except ValueError as exc:
        assert "cannot serialize" in str(exc)
    else:
        raise AssertionError("a live communicator was pickled")
"""

MESSAGES = """
    for probe in (comm.Mprobe, comm.mprobe, comm.improbe):
        msg = probe(MPI.PROC_NULL)
        assert msg == MPI.MESSAGE_NO_PROC and msg and msg != MPI.MESSAGE_NULL
        assert msg.recv() is None
        assert msg == MPI.MESSAGE_NULL and not msg           # received: the handle is null
    assert MPI.MESSAGE_NO_PROC                               # the constant itself stays
    comm.send("x", dest=rank, tag=3)
    msg = comm.mprobe(rank, 3)
    assert msg and msg != MPI.MESSAGE_NULL
    assert msg.recv() == "x" and msg == MPI.MESSAGE_NULL and not msg
"""

#: Rank-side: each of ``calls`` raises MPI.Exception of ``error_class``.
RAISES = """
    def raises(error_class, *calls):
        for call in calls:
            try:
                call()
            except MPI.Exception as exc:
                assert exc.Get_error_class() == error_class, exc
            else:
                raise AssertionError(f"{call} raised nothing; expected error class {error_class}")
"""

ERRHANDLERS = RAISES + """
    assert comm.Get_errhandler() == MPI.ERRORS_RETURN and MPI.COMM_SELF.Get_errhandler() == MPI.ERRORS_RETURN
    comm.Set_errhandler(MPI.ERRORS_ARE_FATAL)
    got = comm.Get_errhandler()
    assert got == MPI.ERRORS_ARE_FATAL and got is not MPI.ERRORS_ARE_FATAL and got != MPI.ERRORS_RETURN
    got.Free()
    assert got == MPI.ERRHANDLER_NULL and not got and MPI.ERRORS_ARE_FATAL   # the constant stays valid
    dup = comm.Dup()
    assert dup.Get_errhandler() == MPI.ERRORS_RETURN          # mpi4py's policy on new communicators
    dup.Free()
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    raises(MPI.ERR_ARG, lambda: comm.Set_errhandler(MPI.ERRHANDLER_NULL), MPI.ERRHANDLER_NULL.Free)
    assert comm.Get_errhandler() == MPI.ERRORS_RETURN
    comm.Call_errhandler(MPI.ERR_OTHER)                      # under ERRORS_RETURN: nothing happens
    seen = []
    mine = MPI.Comm.Create_errhandler(lambda where, code: seen.append((where == comm, code)))
    comm.Set_errhandler(mine)
    assert comm.Get_errhandler() == mine and mine != MPI.ERRORS_RETURN
    comm.Call_errhandler(MPI.ERR_OTHER)
    try:
        comm.Send(np.zeros(1), dest=size)
    except MPI.Exception as exc:                             # the handler returned: the error raises
        assert exc.Get_error_class() == MPI.ERR_RANK, exc
    else:
        raise AssertionError("no ERR_RANK")
    assert seen == [(True, MPI.ERR_OTHER), (True, MPI.ERR_RANK)], seen
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    mine.Free()
    raises(MPI.ERR_COMM, MPI.COMM_NULL.Get_errhandler, lambda: MPI.COMM_NULL.Set_errhandler(MPI.ERRORS_RETURN))
"""

EXCEPTIONS = RAISES + """
    exc = MPI.Exception(MPI.ERR_RANK)
    assert repr(exc) == "MPI.Exception(6)" and str(exc) == "MPI_ERR_RANK: invalid rank" and exc.args == (6,)
    assert (exc.Get_error_code(), exc.Get_error_class(), exc.error_string) == (6, 6, "MPI_ERR_RANK: invalid rank")
    assert exc == MPI.ERR_RANK and int(exc) == 6 and not MPI.Exception() and isinstance(exc, RuntimeError)
    assert MPI.Get_error_string(MPI.ERR_INFO_NOKEY) == "MPI_ERR_INFO_NOKEY: unknown key for given info object"
    assert MPI.Get_error_class(MPI.ERR_LASTCODE) == MPI.ERR_UNKNOWN
    raises(MPI.ERR_ARG, lambda: MPI.Get_error_class(MPI.ERR_LASTCODE + 1))
    status = MPI.Status()
    expected = [
        (MPI.DATATYPE_NULL.Commit, MPI.ERR_TYPE), (MPI.DATATYPE_NULL.Dup, MPI.ERR_TYPE),
        (MPI.DATATYPE_NULL.Free, MPI.ERR_TYPE), (MPI.DOUBLE.Free, MPI.ERR_TYPE),
        (MPI.Datatype(MPI.INT).Free, MPI.ERR_TYPE), (MPI.DATATYPE_NULL.Get_size, MPI.ERR_TYPE),
        (lambda: status.Get_count(MPI.DATATYPE_NULL), MPI.ERR_TYPE),
        (lambda: status.Get_elements(MPI.DATATYPE_NULL), MPI.ERR_TYPE),
        (lambda: status.Set_elements(MPI.DATATYPE_NULL, 0), MPI.ERR_TYPE),
        (MPI.REQUEST_NULL.Cancel, MPI.ERR_REQUEST), (MPI.REQUEST_NULL.Free, MPI.ERR_REQUEST),
        (MPI.OP_NULL.Free, MPI.ERR_OP), (MPI.MAX.Free, MPI.ERR_OP),
        (lambda: comm.Get_attr(MPI.KEYVAL_INVALID), MPI.ERR_KEYVAL),
        (lambda: MPI.Datatype.Match_size(MPI.TYPECLASS_INTEGER, 3), MPI.ERR_ARG),
        (MPI.COMM_NULL.Get_size, MPI.ERR_COMM), (MPI.COMM_WORLD.Free, MPI.ERR_COMM),
    ]
    for call, code in expected:
        try:
            call()
        except MPI.Exception as err:
            assert err.Get_error_class() == code, (call, err, code)
        else:
            raise AssertionError(f"no {MPI.Get_error_string(code)}")
    dup = MPI.DOUBLE.Dup()
    assert dup != MPI.DOUBLE and dup.Get_size() == 8
    dup.Free()
    assert dup == MPI.DATATYPE_NULL and MPI.DOUBLE.Get_size() == 8
    assert [t.tocode() for t in (MPI.DOUBLE, MPI.C_BOOL, MPI.Datatype(MPI.C_FLOAT_COMPLEX), MPI.COUNT)] == \
        ["d", "b1", "F", "p"]
    assert MPI.Datatype.Match_size(MPI.TYPECLASS_REAL, 8) == MPI.REAL8
    assert MPI.Datatype.Match_size(MPI.TYPECLASS_INTEGER, 4) == MPI.INTEGER
    ops = [MPI.Op.Create(lambda a, b, datatype: None) for _ in range(32)]   # mpi4py has room for 32
    try:
        MPI.Op.Create(lambda a, b, datatype: None)
    except RuntimeError as err:
        assert "too many user-defined reduction operations" in str(err)
    else:
        raise AssertionError("a 33rd user op")
    for op in ops:
        op.Free()
    MPI.Op.Create(lambda a, b, datatype: None).Free()
    assert MPI.COMM_NULL.Get_name() == "MPI_COMM_NULL" and MPI.DATATYPE_NULL.Get_name() == "MPI_DATATYPE_NULL"
"""

FORTRAN_STATUS_AND_NULL_COMMS = """
    status = MPI.Status()
    status.source, status.tag, status.error = 1, 2, MPI.ERR_OTHER
    f_status = status.py2f()
    assert len(f_status) == MPI.F_STATUS_SIZE, f_status
    assert (f_status[MPI.F_SOURCE], f_status[MPI.F_TAG], f_status[MPI.F_ERROR]) == (1, 2, MPI.ERR_OTHER)
    assert MPI.Status.f2py(f_status) == status and MPI.Status.f2py(MPI.Status().py2f()) == MPI.Status()
    null = MPI.Intercomm()
    assert not hasattr(null, "Create_group")  # an intracommunicator's call, as in mpi4py
    for call, args in [("Create", (MPI.GROUP_EMPTY,)), ("Get_remote_size", ()), ("Merge", ())]:
        try:
            getattr(null, call)(*args)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_COMM, (call, exc)
        else:
            raise AssertionError(f"a null Intercomm's {call} did not raise")
    try:
        MPI.COMM_NULL.Disconnect()
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_COMM, exc
    dup = MPI.COMM_WORLD.Dup()
    dup.Disconnect()
    assert dup == MPI.COMM_NULL
"""

SAFE_FREE = """
    # mpi4py's lowercase free: nothing on null and predefined handles, Free on the others
    for handle in (MPI.COMM_NULL, MPI.Comm(), MPI.GROUP_NULL, MPI.WIN_NULL, MPI.Win(), MPI.INFO_NULL):
        handle.free()
        handle.free()
        assert not handle
    for handle in (MPI.COMM_WORLD, MPI.COMM_SELF, MPI.GROUP_EMPTY, MPI.INFO_ENV):
        handle.free()
        assert handle
    made = [MPI.COMM_WORLD.Dup(), MPI.COMM_SELF.Get_group(), MPI.Info.Create(), MPI.Win.Allocate(8, comm=MPI.COMM_SELF)]
    for handle in made:
        handle.free()
        assert not handle, handle
"""

C_HANDLES = """
    import ctypes

    dup = comm.Dup()
    objects = [MPI.INT, MPI.INT.Dup(), MPI.SUM, MPI.INFO_ENV, MPI.ERRORS_RETURN, MPI.GROUP_EMPTY, comm.Get_group(),
               MPI.COMM_NULL, MPI.COMM_SELF, comm, dup, MPI.REQUEST_NULL, MPI.MESSAGE_NO_PROC, MPI.WIN_NULL,
               MPI.FILE_NULL, MPI.OP_NULL]
    for obj in objects:
        assert MPI._sizeof(obj) == MPI._sizeof(type(obj)) == ctypes.sizeof(ctypes.c_void_p), obj
        # C code reads the handle where _addressof points, and fromhandle takes it back
        seen = ctypes.c_uint64.from_address(MPI._addressof(obj)).value
        assert seen == MPI._handleof(obj) >= 0, obj
        assert type(obj).fromhandle(seen) == obj, obj
    status = MPI.Status()
    assert MPI._sizeof(status) == MPI._sizeof(MPI.Status) == 24
    status.source = 3
    assert ctypes.c_int.from_address(MPI._handleof(status)).value == 3 and MPI._addressof(status) == MPI._handleof(status)
    for call in (MPI._sizeof, MPI._addressof, MPI._handleof):
        try:
            call(None)
        except TypeError:
            pass
        else:
            raise AssertionError(f"{call.__name__}(None) did not raise TypeError")
    dup.Free()
"""

PROGRAMS = {"c_handles": C_HANDLES, "null_info": NULL_INFO, "safe_free": SAFE_FREE, "fortran_status_and_null_comms": FORTRAN_STATUS_AND_NULL_COMMS, "pickled_handles": PICKLED_HANDLES, "messages": MESSAGES,
            "errhandlers": ERRHANDLERS, "exceptions": EXCEPTIONS}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_program_passes_under_the_stand_in(tmp_path, name):
    ok(tmp_path, PROGRAMS[name], n=1)


def test_info_env_is_each_runs_own_folder_when_a_ranks_process_runs_several(tmp_path, monkeypatch):
    """The ranks' processes outlive a run; MPI.INFO_ENV must not keep the first run's folder."""
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
        monkeypatch.chdir(tmp_path / folder)
        ok(tmp_path / folder, """
            import os
            assert MPI.INFO_ENV.Get("wdir") == os.getcwd() == MPI.Info.Create_env().Get("wdir"), os.getcwd()
        """)


FATAL = """
    comm.Set_errhandler(MPI.{handler})
    try:
        comm.Send(np.zeros(1), dest=size)              # MPI_ERR_RANK
    except MPI.Exception:
        print("caught: the handler was not honoured", flush=True)
"""


@pytest.mark.parametrize("handler", ["ERRORS_ARE_FATAL", "ERRORS_ABORT"])
def test_an_error_under_a_fatal_handler_ends_the_run_with_the_rank_report(tmp_path, capfd, handler):
    outcome = run(tmp_path, FATAL.format(handler=handler), n=2)
    assert outcome.status == 1
    assert f"under MPI_{handler} the job ends" in outcome.error
    assert "MPI_ERR_RANK: invalid rank" in outcome.error and "comm.Send(" in outcome.error
    assert "caught" not in capfd.readouterr().out


def test_rc_errors_fatal_ends_the_run_on_an_error_of_a_request(tmp_path, capfd, monkeypatch):
    """``MPI4PY_RC_ERRORS=fatal`` (``mpi4py.rc.errors``) sets MPI.ERRORS_ARE_FATAL on
    COMM_WORLD, which also applies to the errors of its requests' completion."""
    monkeypatch.setenv("MPI4PY_RC_ERRORS", "fatal")
    outcome = run(tmp_path, """
        request = comm.Irecv(np.zeros(1), source=rank, tag=7)
        comm.Send(np.zeros(2), dest=rank, tag=7)       # MPI_ERR_TRUNCATE at the Wait
        try:
            request.Wait()
        except MPI.Exception:
            print("caught: the handler was not honoured", flush=True)
    """, n=2)
    assert outcome.status == 1
    assert "an error occurred in Request.Wait on MPI_COMM_WORLD" in outcome.error, outcome.error
    assert "MPI_ERR_TRUNCATE" in outcome.error and "caught" not in capfd.readouterr().out


def test_an_error_under_errors_return_is_an_exception_the_program_catches(tmp_path, capfd):
    ok(tmp_path, FATAL.format(handler="ERRORS_RETURN"), n=2)
    assert capfd.readouterr().out.count("caught") == 2


def run_under_mpiexec(path) -> subprocess.CompletedProcess:
    """``mpiexec -n 1 python PATH``, as simdist's MPI backend starts jobs,
    leaving no session files or shared-memory segments behind."""
    tmpdir = session_tmpdir()
    command, env = mpiexec_command(1, [str(path)], tmpdir)
    shm_before = dev_shm()
    try:
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, start_new_session=True)
    finally:
        try:
            remove_orphaned_segments(dev_shm() - shm_before)
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)


def assert_programs_pass_under_mpiexec(tmp_path, programs: dict[str, str]) -> None:
    """Each program (a body after PRELUDE) exits with 0 under Open MPI."""
    for name, body in programs.items():
        path = tmp_path / f"{name}.py"
        path.write_text(PRELUDE + textwrap.dedent(body))
        done = run_under_mpiexec(path)
        assert done.returncode == 0, (name, done.stderr[-3000:])


@pytest.mark.slow
def test_the_programs_pass_under_mpiexec(tmp_path):
    """The assertions hold under Open MPI (where MPI is installed)."""
    assert_programs_pass_under_mpiexec(tmp_path, PROGRAMS)


def test_a_user_op_gets_buffers_that_take_any_bytes_like_value(tmp_path):
    """mpi4py passes buffers whose slice assignment copies bytes: ``b[:] = array('i', ...)``."""
    ok(tmp_path, """
        import array

        def add(a, b, datatype):
            assert datatype == MPI.INT and len(a) == len(b) == 12
            x, y = array.array("i", bytes(a)), array.array("i", bytes(b))
            b[:] = array.array("i", [u + v for u, v in zip(x, y)])

        op = MPI.Op.Create(add, commute=True)
        got = array.array("i", [0] * 3)
        comm.Allreduce([array.array("i", [1, 2, 3 + rank]), MPI.INT], [got, MPI.INT], op)
        assert list(got) == [2, 4, 7], got
        op.Free()
    """, n=2)
