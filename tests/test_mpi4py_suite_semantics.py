"""Calls of the mpi4py stand-in that mpi4py 4.1.2's own test suite found
different from mpi4py under Open MPI: ``MPI.buffer`` and the addresses of
buffers, the buffer arguments of mpi4py's own checks (a null datatype, the
integers of counts), copies of predefined communicators and user ops of
integer handles in pickles, a communicator's info, the communicator
locks of the lowercase calls, and the error handler that the errors of
calls on no communicator go through.

Each program asserts what mpi4py under Open MPI gives; a fast test runs
them under ``simdist run``, ``test_the_programs_pass_under_mpiexec`` (slow)
under Open MPI.
"""

from __future__ import annotations

import textwrap

import pytest

from test_mpi4py_api import ok
from test_mpi4py_handles import assert_programs_pass_under_mpiexec

PROGRAMS = {
    "mpi_buffer": """
        import array, pickle
        assert hasattr(MPI, "buffer") and MPI.memory is MPI.buffer
        empty = MPI.buffer()
        assert (empty.address, empty.nbytes, empty.obj, len(empty), bool(empty)) == (0, 0, None, 0, False)
        for bad in (None, 0, [], ()):
            for make in (MPI.buffer, MPI.buffer.frombuffer):
                try:
                    make(bad)
                except TypeError:
                    pass
                else:
                    raise AssertionError(f"{make} took {bad!r}")
        data = bytearray(b"abcdef")
        buf = MPI.buffer(data)
        assert buf.obj is data and buf.nbytes == 6 and not buf.readonly and buf.format == "B"
        assert buf[0] == ord("a") and buf[-1] == ord("f") and buf[1:3].tobytes() == b"bc"
        buf[0] = ord("z")
        buf[4:6] = b"XY"
        assert data == bytearray(b"zbcdXY"), data
        for index, error in ((6, IndexError), (slice(None, None, 2), IndexError), (None, TypeError)):
            try:
                buf[index]
            except error:
                pass
            else:
                raise AssertionError(index)
        try:
            buf[0:1] = b"too long"
        except ValueError:
            pass
        else:
            raise AssertionError("a slice took more bytes than it has")
        frozen = MPI.buffer(b"abc")
        assert frozen.readonly and frozen.toreadonly().readonly
        try:
            frozen[0] = 1
        except TypeError:
            pass
        else:
            raise AssertionError("a read-only buffer was written")
        try:
            MPI.buffer.frombuffer(b"abc")
        except BufferError:
            pass
        else:
            raise AssertionError("bytes were taken as writable")
        ints = array.array("i", [1, 2, 3])
        address, length = ints.buffer_info()
        assert MPI.Get_address(ints) == address and MPI.Get_address(np.frombuffer(ints, "i")) == address
        assert MPI.Get_address(MPI.BOTTOM) == MPI.Get_address(None) == 0
        assert MPI.Aint_add(address, 4) == address + 4 and MPI.Aint_diff(address + 8, address) == 8
        at = MPI.buffer.fromaddress(address, length * ints.itemsize)
        at[:] = 0
        assert ints.tolist() == [0, 0, 0] and at.address == address
        assert memoryview(at).cast("i").tolist() == [0, 0, 0] and at.cast("i", (3, 1)).shape == (3, 1)
        mem = MPI.Alloc_mem(16)
        assert type(mem) is MPI.buffer and mem.nbytes == 16 and mem.address != 0
        comm.Sendrecv(np.arange(4, dtype="i"), rank, 3, mem, rank, 3)
        assert mem.cast("i").tolist() == [0, 1, 2, 3]
        MPI.Free_mem(mem)
        assert (mem.address, mem.nbytes, mem.readonly) == (0, 0, False)
    """,
    "datatype_null_and_counts": """
        buf, empty = bytearray(8), [None, 0, "B"]
        def refused(error, call, *args):
            try:
                call(*args)
            except error:
                return
            raise AssertionError(f"{call.__name__}{args}: no {error.__name__}")
        # mpi4py's own checks come first: a displacement or an inferred count needs an extent
        refused(ValueError, MPI.COMM_SELF.Sendrecv, [buf, 0, 1, MPI.DATATYPE_NULL], 0, 0, empty, 0, 0)
        refused(ValueError, MPI.COMM_SELF.Sendrecv, [buf, None, 0, MPI.DATATYPE_NULL], 0, 0, empty, 0, 0)
        refused(ValueError, MPI.COMM_SELF.Alltoallv, [buf, None, [0], MPI.DATATYPE_NULL], [None, 0, [0], "B"])
        refused(TypeError, MPI.COMM_SELF.Alltoallv, [bytearray(b"abc"), np.array([3.1])], [bytearray(4), (3, [1])])
        refused(TypeError, MPI.COMM_SELF.Sendrecv, [buf, 1.0, "B"], 0, 0, empty, 0, 0)
        backwards = MPI.INT.Create_resized(0, -4).Commit()  # a negative extent: nothing to count by
        mem = MPI.Alloc_mem(5)
        refused(ValueError, MPI.COMM_SELF.Sendrecv, [mem, None, backwards], 0, 0, empty, 0, 0)
        refused(ValueError, MPI.COMM_SELF.Sendrecv, [mem, 0, 1, backwards], 0, 0, empty, 0, 0)
        MPI.Free_mem(mem)
        backwards.Free()
        # counts and displacements that are 0-d integer arrays are integers
        got = bytearray(3)
        MPI.COMM_SELF.Alltoallv([bytearray(b"xabc"), (3, [np.array(1)])], [got, np.array(3)])
        assert got == bytearray(b"abc"), got
        # with a count, the datatype reaches MPI, which refuses it
        try:
            MPI.COMM_SELF.Sendrecv([buf, 1, MPI.DATATYPE_NULL], 0, 0, empty, 0, 0)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_TYPE, exc
        else:
            raise AssertionError("MPI.DATATYPE_NULL was sent")
    """,
    "comm_handles": """
        import pickle
        for predefined in (MPI.COMM_WORLD, MPI.COMM_SELF):
            assert pickle.loads(pickle.dumps(predefined)) is predefined
            copy = pickle.loads(pickle.dumps(MPI.Intracomm(predefined)))
            assert copy is not predefined and copy == predefined
        dup = comm.Dup()
        try:
            pickle.dumps(dup)
        except ValueError:
            pass
        else:
            raise AssertionError("a Dup was pickled")
        for kind in (MPI.Comm, MPI.Datatype):
            try:
                kind((1, 2, 3))
            except TypeError:
                pass
            else:
                raise AssertionError(f"a tuple became an {kind}")
        preq = comm.Send_init(b"", MPI.PROC_NULL, 0)
        for handle in (comm, dup, preq, MPI.DOUBLE, MPI.SUM):
            kind = type(handle)
            for copy in (kind.fromhandle(handle.handle), kind.fromint(handle.toint()), kind.f2py(handle.py2f())):
                assert type(copy) is kind and copy == handle, (handle, copy)
        preq.Free()
        try:
            parent = MPI.Comm.Get_parent()
        except NotImplementedError:         # the simulator: no spawned processes
            pass
        else:
            assert not parent               # Open MPI: MPI.COMM_NULL, no parent
        info = dup.Get_info()
        info.Set("simdist", "yes")
        dup.Set_info(info)
        info.Free()
        dup.Free()
    """,
    "user_op_by_integer": """
        import pickle
        def add(invec, inoutvec, datatype):
            inoutvec[:] = [a + b for a, b in zip(invec, inoutvec)]
        op = MPI.Op.Create(add, commute=False)
        copy = pickle.loads(pickle.dumps(op))    # a new op of the same function
        assert copy != op and not copy.Is_commutative()
        copy.Free()
        clone = MPI.Op.fromint(op.toint())      # the same op, its function unknown to mpi4py
        assert clone == op
        for reduce in (pickle.dumps, type(clone).__reduce__):
            try:
                reduce(clone)
            except ValueError:
                pass
            else:
                raise AssertionError(f"{reduce}: an op of an integer handle was pickled")
        op.Free()
    """,
    "errors_of_no_communicator": """
        called = []
        def record(where):
            return MPI.Comm.Create_errhandler(lambda c, code: called.append((where, MPI.Get_error_class(code))))
        comm.Set_errhandler(record("world"))
        MPI.COMM_SELF.Set_errhandler(record("self"))
        calls = ((MPI.DATATYPE_NULL.Commit, MPI.ERR_TYPE), (lambda: MPI.INFO_NULL.Get("k"), MPI.ERR_INFO),
                 (MPI.SUM.Free, MPI.ERR_OP),
                 (lambda: MPI.COMM_SELF.Send([bytearray(8), 1, MPI.DATATYPE_NULL], 0, 0), MPI.ERR_TYPE))
        for call, error_class in calls:
            try:
                call()
            except MPI.Exception as exc:
                assert exc.Get_error_class() == error_class, exc
            else:
                raise AssertionError(f"{call} raised nothing")
        # a call on no communicator goes to COMM_WORLD's handler (as Open MPI 5 does), a
        # communicator's call to its own, also when the error comes from its datatype
        assert called == [("world", MPI.ERR_TYPE), ("world", MPI.ERR_INFO), ("world", MPI.ERR_OP),
                          ("self", MPI.ERR_TYPE)], called
        for each in (comm, MPI.COMM_SELF):
            each.Get_errhandler().Free()
            each.Set_errhandler(MPI.ERRORS_RETURN)
    """,
    "module_namespace": """
        import types
        # mpi4py's test_doc walks the module's classes and modules: no module object in it
        # (names with "@" are pytest's assertion rewriting's, where pytest imported the module)
        modules = [name for name, value in vars(MPI).items()
                   if isinstance(value, types.ModuleType) and not name.startswith("@")]
        assert modules in ([], ["__builtins__"]), modules
    """,
    "status_memory": """
        status = MPI.Status()
        status.source, status.tag, status.error = 11, 22, 33
        memory = status.tomemory()    # MPI_Status as C ints: writes change the fields
        items = list(memory)
        memory[items.index(11)], memory[items.index(22)], memory[items.index(33)] = 111, 222, 333
        assert (status.source, status.tag, status.error) == (111, 222, 333)
        status.Set_elements(MPI.DOUBLE, 3)
        assert MPI.Status(status).Get_count(MPI.BYTE) == 24 and memory.format == "i"
    """,
    "user_error_classes": """
        errclass = MPI.Add_error_class()
        assert errclass > MPI.ERR_LASTCODE and comm.Get_attr(MPI.LASTUSEDCODE) == errclass
        assert MPI.Get_error_string(errclass) == ""   # (its class: itself as MPI says; Open MPI 5 gives ERR_UNKNOWN)
        MPI.Add_error_string(errclass, "error class")
        code = MPI.Add_error_code(errclass)
        other = MPI.Add_error_code(MPI.ERR_OTHER)               # a predefined class takes codes too
        assert comm.Get_attr(MPI.LASTUSEDCODE) == other and code < other
        MPI.Add_error_string(code, "error code")
        assert (MPI.Get_error_class(code), MPI.Get_error_string(code)) == (errclass, "error code")
        assert MPI.Get_error_class(other) == MPI.ERR_OTHER
        assert MPI.Exception(code).Get_error_class() == errclass and str(MPI.Exception(code)) == "error code"
        for call in (lambda: MPI.Add_error_code(other), lambda: MPI.Add_error_string(MPI.ERR_RANK, "x"),
                     lambda: MPI.Get_error_string(other + 1)):
            try:
                call()
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_ARG
            else:
                raise AssertionError(call)
    """,
    "user_attributes": """
        import contextlib, io
        for obj in (comm.Dup(), MPI.DOUBLE.Dup(), MPI.INT):
            cls, events = type(obj), []
            def copy_fn(handle, key, value):
                events.append(("copy", value, handle == obj))
                return value + ["copied"]
            def delete_fn(handle, key, value):
                events.append(("delete", value))
            keyval = cls.Create_keyval(copy_fn, delete_fn)
            plain = cls.Create_keyval(True)                  # copies the value itself, no callback
            never = cls.Create_keyval(lambda h, k, v: NotImplemented)
            assert keyval != MPI.KEYVAL_INVALID and obj.Get_attr(keyval) is None
            value = [1]
            obj.Set_attr(keyval, value); obj.Set_attr(plain, value); obj.Set_attr(never, value)
            assert obj.Get_attr(keyval) is value
            if obj != MPI.INT:
                dup = obj.Dup()
                assert dup.Get_attr(keyval) == [1, "copied"] and dup.Get_attr(plain) is value
                assert dup.Get_attr(never) is None
                dup.Free()                                   # deletes the copy's value
                assert events == [("copy", [1], True), ("delete", [1, "copied"])], events
                events.clear()
            obj.Set_attr(keyval, [2])                        # replaces: the old value is deleted
            obj.Delete_attr(keyval)
            assert events == [("delete", [1]), ("delete", [2])] and obj.Get_attr(keyval) is None, events
            for key in (keyval, plain, never):
                assert cls.Free_keyval(key) == MPI.KEYVAL_INVALID
            try:   # a freed key: ERR_KEYVAL (Open MPI 5: ERR_OTHER; on a communicator it reads freed memory)
                if isinstance(obj, MPI.Datatype):
                    obj.Get_attr(keyval)
                    raise AssertionError("a freed key was read")
            except MPI.Exception as exc:
                assert exc.Get_error_class() in (MPI.ERR_KEYVAL, MPI.ERR_OTHER)
            def fails(handle, key, value):
                raise ValueError("in delete_fn")
            keyval = cls.Create_keyval(delete_fn=fails)
            obj.Set_attr(keyval, "v")
            with contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    obj.Delete_attr(keyval)
                except MPI.Exception as exc:
                    assert exc.Get_error_class() == MPI.ERR_OTHER and "ValueError" in err.getvalue()
                else:
                    raise AssertionError("an exception in delete_fn was lost")
            cls.Free_keyval(keyval)
            nopython = cls.Create_keyval(nopython=True)
            obj.Set_attr(nopython, 123456789)
            assert obj.Get_attr(nopython) == 123456789
            obj.Delete_attr(nopython); cls.Free_keyval(nopython)
            if obj != MPI.INT:
                obj.Free()
    """,
    "comm_locks": """
        import threading
        dup = comm.Dup()
        table = MPI._comm_lock_table(dup)
        assert isinstance(table, dict) and "bcast" not in table
        dup.bcast(None, root=0)
        assert isinstance(table["bcast"], type(threading.Lock()))
        assert MPI._comm_lock(dup, "bcast") is table["bcast"] and not table["bcast"].locked()
        assert dup.allgather(rank) == list(range(size)) and "allgather" in table
        dup.Free()
    """,
}


def test_the_programs_pass_on_the_simulator(tmp_path):
    """One run for all (each program leaves nothing behind that another sees),
    for the fast tier's time."""
    ok(tmp_path, "\n".join(textwrap.dedent(PROGRAMS[name]) for name in sorted(PROGRAMS)), n=1)


@pytest.mark.slow
def test_the_programs_pass_under_mpiexec(tmp_path):
    """The assertions hold under Open MPI (where MPI is installed)."""
    assert_programs_pass_under_mpiexec(tmp_path, PROGRAMS)


_MAPS_OPENED = []  # "/proc/self/maps" opened while a test below counts


def _count_maps_opens(event, args):
    if event == "open" and _MAPS_OPENED and args and args[0] == "/proc/self/maps":
        _MAPS_OPENED.append(args[0])


@pytest.mark.slow  # importing the stand-in alone takes about a second
def test_cuda_array_interface_sends_do_not_each_read_the_mappings():
    """mpi4py's suite sends 3000 CUDA-array-interface messages in a test:
    the check that the pointer is host memory read /proc/self/maps each
    time (a minute per test under load); the mappings read last serve."""
    import sys

    import numpy as np

    from fake_backends.mpi4py._interfaces import memory

    class HostCudaArray:
        def __init__(self, array):
            self.__cuda_array_interface__ = {"version": 3, "data": (array.ctypes.data, False),
                                             "typestr": array.dtype.str, "shape": array.shape}

    arrays = [np.arange(n, dtype="d") for n in range(1, 11)]
    sys.addaudithook(_count_maps_opens)
    _MAPS_OPENED.append("counting")
    try:
        for array in arrays:
            for _ in range(5):
                raw, fmt = memory(HostCudaArray(array), True)
                assert raw.ctypes.data == array.ctypes.data and raw.size == array.nbytes and fmt == "d"
        assert len(_MAPS_OPENED) - 1 < 5, f"{len(_MAPS_OPENED) - 1} reads of /proc/self/maps for 50 messages"
    finally:
        _MAPS_OPENED.clear()
