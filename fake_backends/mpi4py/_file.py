"""MPI-IO (``MPI.File``) on the local file system.

Every simulated rank runs on this machine, so a file that one rank writes
is the file the others read: each rank opens it itself (``os.open``) and
reads and writes with ``pread``/``pwrite`` at the offsets MPI defines.

- ``File.Open`` is collective over the communicator: rank 0 creates the
  file (``MODE_CREATE``, ``MODE_EXCL``) and every rank gets the same error
  class if it cannot (``ERR_NO_SUCH_FILE``, ``ERR_FILE_EXISTS``,
  ``ERR_AMODE``, ``ERR_ACCESS``); ``Close`` is collective and removes the
  file under ``MODE_DELETE_ON_CLOSE``. A file the program leaves open is
  closed when the run ends.
- A view (``Set_view``: displacement, etype, filetype; the ``"native"``
  representation) maps the etypes of data to bytes of the file: the
  filetype's blocks, tiled at its extent from the displacement. Offsets
  and file pointers count etypes of the view.
- The individual file pointer is the rank's; the shared file pointer lives
  in a small file in the temporary directory (``_filepointer``) that the ranks lock
  around each ``*_shared`` call, so concurrent calls take disjoint parts
  in some order (MPI leaves the order open). ``*_ordered`` calls take
  their parts in rank order.
- Nonblocking (``Iread``, ...) and split collective (``*_begin``/``*_end``)
  calls do their work at once; the request is complete.
- Errors go through the file's error handler (``MPI.ERRORS_RETURN`` by
  default, as MPI says for files; ``MPI.FILE_NULL``'s for ``Open``).
"""

from __future__ import annotations

import os

import numpy as np

from . import _errhandlers, _handleleaks, _runtime
from . import _filepointer as _pointer
from ._buffers import parse
from ._datatypes import TYPES
from ._errors import ERR_ARG, SUCCESS, Exception as MPIException
from ._fileview import View
from ._handles import Handle, IntegerHandles, check_handle, new_handle
from ._hints import ERRORS_RETURN, Errhandler, Info
from ._names import CONSTANTS
from ._requests import Request

MODE_RDONLY, MODE_WRONLY, MODE_RDWR = CONSTANTS["MODE_RDONLY"], CONSTANTS["MODE_WRONLY"], CONSTANTS["MODE_RDWR"]
MODE_CREATE, MODE_EXCL, MODE_APPEND = CONSTANTS["MODE_CREATE"], CONSTANTS["MODE_EXCL"], CONSTANTS["MODE_APPEND"]
MODE_DELETE_ON_CLOSE, MODE_SEQUENTIAL = CONSTANTS["MODE_DELETE_ON_CLOSE"], CONSTANTS["MODE_SEQUENTIAL"]
SEEK_SET, SEEK_CUR, SEEK_END = CONSTANTS["SEEK_SET"], CONSTANTS["SEEK_CUR"], CONSTANTS["SEEK_END"]
ERR_ACCESS, ERR_AMODE, ERR_FILE, ERR_FILE_EXISTS = (CONSTANTS[name] for name in (
    "ERR_ACCESS", "ERR_AMODE", "ERR_FILE", "ERR_FILE_EXISTS"))
ERR_IO, ERR_NO_SUCH_FILE, ERR_READ_ONLY, ERR_UNSUPPORTED_DATAREP = (CONSTANTS[name] for name in (
    "ERR_IO", "ERR_NO_SUCH_FILE", "ERR_READ_ONLY", "ERR_UNSUPPORTED_DATAREP"))
_DATAREPS = ("native", "internal")


class _FileState:
    __slots__ = ("path", "fd", "amode", "comm", "info", "view", "pointer", "shared", "errhandler", "name", "atomic",
                 "closed", "split")

    def __init__(self, path, fd, amode, comm, info, shared, errhandler):
        self.path, self.fd, self.amode, self.comm, self.info = path, fd, amode, comm, info
        self.view = View(0, TYPES["BYTE"], TYPES["BYTE"])
        self.pointer = 0  # the individual file pointer, in etypes
        self.shared, self.errhandler, self.name = shared, errhandler, f"file {os.fsdecode(path)!r}"
        self.atomic, self.closed = False, False
        self.split = None  # the status of an active split collective (``*_begin``)

    def release(self) -> None:
        """Close the rank's descriptors of the file and of the shared pointer."""
        if not self.closed:
            self.closed = True
            os.close(self.fd)
            _pointer.detach(self.shared)


class _NullState:
    """What ``MPI.FILE_NULL`` holds: the error handler of ``Open`` errors."""

    name = "MPI_FILE_NULL"

    def __init__(self):
        self.errhandler = Errhandler(ERRORS_RETURN)


_NULL = _NullState()


def _amode_error(amode: int) -> str | None:
    access = [m for m in (MODE_RDONLY, MODE_WRONLY, MODE_RDWR) if amode & m]
    if len(access) != 1:
        return "exactly one of MPI.MODE_RDONLY, MODE_WRONLY and MODE_RDWR"
    if amode & MODE_RDONLY and amode & (MODE_CREATE | MODE_EXCL):
        return "MPI.MODE_RDONLY with MODE_CREATE or MODE_EXCL"
    if amode & MODE_RDWR and amode & MODE_SEQUENTIAL:
        return "MPI.MODE_RDWR with MODE_SEQUENTIAL"
    return None


def _create(path: str, amode: int) -> tuple[int, str]:
    """On rank 0 of Open: create the file as ``amode`` says, and the shared
    pointer's file; (error class, shared pointer's path or the error's detail)."""
    flags = os.O_RDONLY
    if amode & MODE_CREATE:
        flags |= os.O_CREAT | (os.O_EXCL if amode & MODE_EXCL else 0)
    try:
        os.close(os.open(path, flags | (os.O_RDWR if amode & MODE_CREATE else 0), 0o666))
    except FileExistsError:
        return ERR_FILE_EXISTS, f"{path!r} exists (MPI.MODE_EXCL)"
    except FileNotFoundError:
        return ERR_NO_SUCH_FILE, f"no file {path!r}"
    except PermissionError:
        return ERR_ACCESS, f"no permission to open {path!r}"
    except OSError as exc:
        return ERR_FILE, f"{path!r}: {exc.strerror}"
    return SUCCESS, _pointer.create()


def _open_flags(amode: int) -> int:
    if amode & MODE_RDONLY:
        return os.O_RDONLY
    return os.O_WRONLY if amode & MODE_WRONLY else os.O_RDWR


class File(Handle, IntegerHandles):
    """An open file (``MPI.File``): see the module docstring."""

    def _init(self, file: "File | None" = None) -> None:
        if file is not None:
            check_handle(file, File, type(self))
        self._state = None if file is None else file._state

    def _open_state(self):
        return self._state if self else None  # a closed file is MPI.FILE_NULL

    def __eq__(self, other):
        if not isinstance(other, File):
            return NotImplemented
        return self._open_state() is other._open_state()

    def __ne__(self, other):
        return not self == other

    def __bool__(self):
        return self._state is not None and not self._state.closed

    def __repr__(self):
        return f"<mpi4py.MPI.File {self._state.name if self else 'MPI_FILE_NULL'} (simdist)>"

    def _live(self):
        """The state whose error handler applies (FILE_NULL's for a null handle)."""
        return self._state if self else _NULL

    def _st(self) -> _FileState:
        if not self:
            raise MPIException(ERR_FILE, "the file is MPI.FILE_NULL (closed, or never opened)")
        return self._state

    # -- opening and closing --------------------------------------------------------------
    @classmethod
    def Open(cls, comm, filename, amode: int = MODE_RDONLY, info=None) -> "File":
        """Open ``filename`` on every rank of ``comm`` (collective)."""
        with _through_null_handler("File.Open"):
            return cls._open(comm, filename, amode, info)

    @classmethod
    def _open(cls, comm, filename, amode, info) -> "File":
        path = os.fsdecode(os.fspath(filename))
        amode = int(amode)
        problem = _amode_error(amode)
        if problem is not None:
            raise MPIException(ERR_AMODE, f"File.Open({path!r}): amode {amode}: {problem}")
        rank = comm.Get_rank()
        error, detail = comm.bcast(_create(path, amode) if rank == 0 else None, root=0)
        if error != SUCCESS:
            raise MPIException(error, f"File.Open: {detail}")
        shared = _pointer.attach(detail)
        try:
            fd = os.open(path, _open_flags(amode))
        except OSError as exc:
            fd, failure = -1, exc
        opened = comm.allgather(fd >= 0)  # (so every rank has the shared pointer open)
        if rank == 0:
            _pointer.unlink(detail)
        if not all(opened):
            _pointer.detach(shared)
            if fd >= 0:
                os.close(fd)
            raise MPIException(ERR_IO, f"File.Open({path!r}): ranks {[r for r, ok in enumerate(opened) if not ok]} "
                               f"could not open it" + ("" if fd >= 0 else f" ({failure.strerror})"))
        state = _FileState(path, fd, amode, comm.Dup(), info.Dup() if info else Info.Create(), shared,
                           _errhandlers.default())
        if amode & MODE_APPEND:
            state.pointer = os.fstat(fd).st_size
            if rank == 0:
                _pointer.write(shared, state.pointer)
        file = new_handle(cls)
        file._state = state
        _runtime.get().at_close.append(state.release)  # a file the program leaves open
        _handleleaks.handle_made(state, "file", file)
        return file

    def free(self) -> None:
        """Close unless null (mpi4py's ``free``)."""
        if self:
            self.Close()

    def Close(self) -> None:
        """Close the file (collective); MODE_DELETE_ON_CLOSE removes it."""
        st = self._st()
        st.comm.Barrier()  # every rank's writes (and uses of the shared pointer) are done
        st.release()
        _runtime.get().at_close.remove(st.release)
        _handleleaks.handle_freed(st)
        if st.comm.Get_rank() == 0 and st.amode & MODE_DELETE_ON_CLOSE:
            try:
                os.unlink(st.path)
            except FileNotFoundError:
                pass
        st.comm.Barrier()
        st.comm.Free()

    @classmethod
    def Delete(cls, filename, info=None) -> None:
        path = os.fsdecode(os.fspath(filename))
        with _through_null_handler("File.Delete"):
            try:
                os.unlink(path)
            except FileNotFoundError:
                raise MPIException(ERR_NO_SUCH_FILE, f"File.Delete: no file {path!r}") from None
            except PermissionError:
                raise MPIException(ERR_ACCESS, f"File.Delete: no permission to remove {path!r}") from None

    # -- size, mode, group, info ----------------------------------------------------------
    def Set_size(self, size: int) -> None:
        """Truncate or extend the file to ``size`` bytes (collective)."""
        st = self._writable("Set_size")
        if int(size) < 0:
            raise MPIException(ERR_ARG, f"File.Set_size({size}): a negative size")
        st.comm.Barrier()
        if st.comm.Get_rank() == 0:
            os.ftruncate(st.fd, int(size))
        st.comm.Barrier()

    def Preallocate(self, size: int) -> None:
        """Make the file at least ``size`` bytes (collective)."""
        st = self._writable("Preallocate")
        st.comm.Barrier()
        if st.comm.Get_rank() == 0 and os.fstat(st.fd).st_size < int(size):
            os.ftruncate(st.fd, int(size))
        st.comm.Barrier()

    def Get_size(self) -> int:
        return os.fstat(self._st().fd).st_size

    def Get_amode(self) -> int:
        return self._st().amode

    def Get_group(self):
        return self._st().comm.Get_group()

    def Set_info(self, info) -> None:
        st = self._st()
        for key in info.keys() if info else ():
            st.info.Set(key, info.Get(key))

    def Get_info(self):
        return self._st().info.Dup()

    size = property(Get_size)
    amode = property(Get_amode)
    group = property(Get_group)
    group_size = property(lambda self: self._st().comm.Get_size())
    group_rank = property(lambda self: self._st().comm.Get_rank())
    info = property(Get_info, Set_info)

    # -- views ------------------------------------------------------------------------------
    def Set_view(self, disp: int = 0, etype=TYPES["BYTE"], filetype=None, datarep: str = "native",
                 info=None) -> None:
        """The view of the file (collective); both file pointers go to 0."""
        st = self._st()
        if datarep not in _DATAREPS:
            raise MPIException(ERR_UNSUPPORTED_DATAREP, f"File.Set_view: data representation {datarep!r} (the "
                               "simulated MPI-IO has 'native' and 'internal')")
        st.view = View(disp, etype, etype if filetype is None else filetype)
        st.pointer = 0
        st.comm.Barrier()
        if st.comm.Get_rank() == 0:
            _pointer.write(st.shared, 0)
        st.comm.Barrier()

    def Get_view(self):
        view = self._st().view
        return view.disp, view.etype, view.filetype, "native"

    def Get_byte_offset(self, offset: int) -> int:
        return self._st().view.byte_offset(int(offset))

    def Get_type_extent(self, datatype) -> int:
        return datatype.Get_extent()[1]

    # -- data access ------------------------------------------------------------------------
    def _writable(self, call: str) -> _FileState:
        st = self._st()
        if st.amode & MODE_RDONLY:
            raise MPIException(ERR_READ_ONLY, f"File.{call} on {st.name}, opened with MPI.MODE_RDONLY")
        return st

    def _readable(self, call: str) -> _FileState:
        st = self._st()
        if st.amode & MODE_WRONLY:
            raise MPIException(ERR_ACCESS, f"File.{call} on {st.name}, opened with MPI.MODE_WRONLY")
        return st

    def _read(self, call: str, offset: int, buf, status) -> int:
        """Read at ``offset`` etypes of the view into ``buf``: the etypes read."""
        st = self._readable(call)
        spec = parse(buf, writable=True)
        view, nbytes = st.view, spec.count * spec.datatype.Get_size()
        data = bytearray()
        for where, length in view.ranges(offset * view.esize, nbytes):
            chunk = os.pread(st.fd, length, where)
            data += chunk
            if len(chunk) < length:  # the end of the file
                break
        spec.raw[:len(data)] = np.frombuffer(bytes(data), np.uint8)
        _fill(status, len(data))
        return len(data) // view.esize

    def _write(self, call: str, offset: int, buf, status) -> int:
        st = self._writable(call)
        spec = parse(buf, writable=False)
        view, nbytes = st.view, spec.count * spec.datatype.Get_size()
        data, done = memoryview(np.ascontiguousarray(spec.raw[:nbytes])).cast("B"), 0
        for where, length in view.ranges(offset * view.esize, nbytes):
            os.pwrite(st.fd, data[done:done + length], where)
            done += length
        _fill(status, done)
        return done // view.esize

    def Read_at(self, offset: int, buf, status=None) -> None:
        self._read("Read_at", int(offset), buf, status)

    def Write_at(self, offset: int, buf, status=None) -> None:
        self._write("Write_at", int(offset), buf, status)

    def Read(self, buf, status=None) -> None:
        st = self._st()
        st.pointer += self._read("Read", st.pointer, buf, status)

    def Write(self, buf, status=None) -> None:
        st = self._st()
        st.pointer += self._write("Write", st.pointer, buf, status)

    def Seek(self, offset: int, whence: int = SEEK_SET) -> None:
        st = self._st()
        st.pointer = self._sought(st, st.pointer, int(offset), whence, "Seek")

    def Get_position(self) -> int:
        return self._st().pointer

    def _sought(self, st, current: int, offset: int, whence: int, call: str) -> int:
        if whence == SEEK_SET:
            position = offset
        elif whence == SEEK_CUR:
            position = current + offset
        elif whence == SEEK_END:
            position = self._end_in_etypes(st) + offset
        else:
            raise MPIException(ERR_ARG, f"File.{call}: whence={whence} (MPI.SEEK_SET, SEEK_CUR or SEEK_END)")
        if position < 0:
            raise MPIException(ERR_ARG, f"File.{call}: a position before the view's start ({position})")
        return position

    def _end_in_etypes(self, st) -> int:
        """The etypes of the view up to the end of the file."""
        view, size = st.view, os.fstat(st.fd).st_size
        if size <= view.disp:
            return 0
        tiles, rest = divmod(size - view.disp, view.extent)
        data = tiles * view.tile + sum(max(0, min(length, rest - offset)) for offset, length in view.blocks)
        return data // view.esize

    # -- the shared file pointer ----------------------------------------------------------
    def _shared(self, call: str, access, buf, status) -> None:
        st = self._st()
        with _pointer.locked(st.shared) as pointer:
            moved = access(call, pointer.value, buf, status)
            pointer.value += moved

    def Read_shared(self, buf, status=None) -> None:
        self._shared("Read_shared", self._read, buf, status)

    def Write_shared(self, buf, status=None) -> None:
        self._shared("Write_shared", self._write, buf, status)

    def _ordered(self, call: str, access, buf, status) -> None:
        """Collective: the ranks' parts in rank order from the shared pointer."""
        st = self._st()
        spec = parse(buf, writable=access == self._read)
        etypes = spec.count * spec.datatype.Get_size() // st.view.esize
        counts = st.comm.allgather(etypes)
        rank = st.comm.Get_rank()
        base = st.comm.bcast(_pointer.read(st.shared) if rank == 0 else None, root=0)
        access(call, base + sum(counts[:rank]), buf, status)
        st.comm.Barrier()
        if rank == 0:
            _pointer.write(st.shared, base + sum(counts))
        st.comm.Barrier()

    def Read_ordered(self, buf, status=None) -> None:
        self._ordered("Read_ordered", self._read, buf, status)

    def Write_ordered(self, buf, status=None) -> None:
        self._ordered("Write_ordered", self._write, buf, status)

    def Seek_shared(self, offset: int, whence: int = SEEK_SET) -> None:
        """Collective: every rank passes the same offset and whence."""
        st = self._st()
        st.comm.Barrier()
        if st.comm.Get_rank() == 0:
            current = _pointer.read(st.shared)
            _pointer.write(st.shared, self._sought(st, current, int(offset), whence, "Seek_shared"))
        st.comm.Barrier()

    def Get_position_shared(self) -> int:
        return _pointer.read(self._st().shared)

    # -- collective, nonblocking and split forms ------------------------------------------
    def Read_at_all(self, offset: int, buf, status=None) -> None:
        self._read("Read_at_all", int(offset), buf, status)

    def Write_at_all(self, offset: int, buf, status=None) -> None:
        self._write("Write_at_all", int(offset), buf, status)

    Read_all = Read
    Write_all = Write

    def _request(self, work, *args) -> Request:
        from ._status import Status

        status = Status()
        work(*args, status)
        return Request._of(None, _Completed(status._nbytes), _errhandlers.current_owner())

    def Iread_at(self, offset: int, buf) -> Request:
        return self._request(self.Read_at, offset, buf)

    def Iwrite_at(self, offset: int, buf) -> Request:
        return self._request(self.Write_at, offset, buf)

    def Iread(self, buf) -> Request:
        return self._request(self.Read, buf)

    def Iwrite(self, buf) -> Request:
        return self._request(self.Write, buf)

    def Iread_shared(self, buf) -> Request:
        return self._request(self.Read_shared, buf)

    def Iwrite_shared(self, buf) -> Request:
        return self._request(self.Write_shared, buf)

    Iread_at_all, Iwrite_at_all, Iread_all, Iwrite_all = Iread_at, Iwrite_at, Iread, Iwrite

    def _begin(self, work, *args) -> None:
        from ._status import Status

        st = self._st()
        if st.split is not None:
            raise MPIException(ERR_IO, f"a split collective call is already active on {st.name}")
        status = Status()
        work(*args, status)
        st.split = status

    def _end(self, status) -> None:
        st = self._st()
        if st.split is None:
            raise MPIException(ERR_IO, f"an *_end call with no *_begin before it on {st.name}")
        done, st.split = st.split, None
        if status is not None:
            status._set(done.source, done.tag, done._nbytes)

    def Read_at_all_begin(self, offset: int, buf) -> None:
        self._begin(self.Read_at_all, offset, buf)

    def Write_at_all_begin(self, offset: int, buf) -> None:
        self._begin(self.Write_at_all, offset, buf)

    def Read_all_begin(self, buf) -> None:
        self._begin(self.Read_all, buf)

    def Write_all_begin(self, buf) -> None:
        self._begin(self.Write_all, buf)

    def Read_ordered_begin(self, buf) -> None:
        self._begin(self.Read_ordered, buf)

    def Write_ordered_begin(self, buf) -> None:
        self._begin(self.Write_ordered, buf)

    def Read_at_all_end(self, buf, status=None) -> None:
        self._end(status)

    Write_at_all_end = Read_all_end = Write_all_end = Read_ordered_end = Write_ordered_end = Read_at_all_end

    # -- consistency ------------------------------------------------------------------------
    def Set_atomicity(self, flag: bool) -> None:
        st = self._st()
        st.comm.Barrier()
        st.atomic = bool(flag)

    def Get_atomicity(self) -> bool:
        return self._st().atomic

    atomicity = property(Get_atomicity, Set_atomicity)

    def Sync(self) -> None:
        """Collective; every write is visible to every rank already (one machine)."""
        st = self._st()
        st.comm.Barrier()

    # -- error handlers ---------------------------------------------------------------------
    @classmethod
    def Create_errhandler(cls, errhandler_fn) -> Errhandler:
        return Errhandler._user(errhandler_fn)

    def Get_errhandler(self) -> Errhandler:
        return Errhandler(self._live().errhandler)

    def Set_errhandler(self, errhandler) -> None:
        self._live().errhandler = _errhandlers.checked(errhandler, "File.Set_errhandler")

    def Call_errhandler(self, errorcode: int) -> None:
        _errhandlers.invoke(self, self._live(), MPIException(errorcode, "File.Call_errhandler"),
                            "File.Call_errhandler")


class _through_null_handler:
    """The errors of calls on no file (Open, Delete) go through the handler
    of MPI.FILE_NULL, as MPI says."""

    def __init__(self, call: str):
        self.call = call

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if isinstance(error, MPIException) and not _errhandlers.in_a_call():
            _errhandlers.invoke(FILE_NULL, _NULL, error, self.call)
        return False


class _Completed:
    """The operation of a request that completed when it was made."""

    done, error, cancelled, pickled, sink, data = True, None, False, True, None, None

    def __init__(self, nbytes: int):
        self.status = (-1, -1, nbytes)


def _fill(status, nbytes: int) -> None:
    if status is not None:
        status._set(-1, -1, nbytes)


FILE_NULL = File()
_errhandlers.guard_calls(File)
