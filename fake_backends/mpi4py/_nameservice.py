"""The name service of one run: ``MPI.Publish_name``, ``MPI.Lookup_name``
and ``MPI.Unpublish_name``, with Open MPI's observable behaviour.

What Open MPI 5 does (measured under ``mpiexec``) and this module does too:
a publication belongs to the process that made it; a lookup gives the
port of the earliest publication of the name still standing, whichever
process made it, and ``MPI.ERR_NAME`` when there is none (it does not wait
for a later publication); publishing a name this process already published
keeps the first port and raises nothing; ``Unpublish_name`` removes this
process's publication of the name, whatever port it is given, and raises
nothing when there is none (another process's publication stays). An empty
service or port name is ``MPI.ERR_ARG`` at publication; a port name is
looked up as at most ``MAX_PORT_NAME - 1`` characters.

The store
---------
Every process of a ``simdist run`` maps the world's shared memory, an
anonymous ``memfd``: the table lives in that file, past the end of the
simulator's arena (the transport's ``run_file``), as a length (8 bytes) and the pickled list of
publications (service, port, world rank, process id), read and rewritten
whole under a POSIX record lock on its first byte. It has no name on disk
and goes away with the world. Names last as long as the run, as under
``mpiexec`` they last as long as the job (a rank that has returned
still publishes its names): the driver cuts the file back to the arena
before each run (``Arena.reset_control``), so a later run on the same world
never sees them, and another ``simdist run`` has another world.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import struct
import threading

from . import _runtime
from ._errors import ERR_ARG, Exception as MPIException
from ._hints import INFO_NULL, Info
from ._names import CONSTANTS

ERR_NAME = CONSTANTS["ERR_NAME"]
_LONGEST_PORT = CONSTANTS["MAX_PORT_NAME"] - 1
_LENGTH = struct.Struct("q")
_in_process = threading.Lock()  # POSIX record locks do not exclude this process's other threads


def _text(value, call: str, argument: str) -> bytes:
    """``value`` (str or bytes) as bytes, checked as mpi4py checks it."""
    if isinstance(value, str):
        value = value.encode()
    elif not isinstance(value, bytes):
        raise TypeError(f"{call}: {argument}={value!r}: expected str or bytes, {type(value).__name__} found")
    if b"\0" in value:
        raise ValueError(f"{call}: {argument}={value!r}: embedded null byte")
    return value


def _check_info(info, call: str) -> None:
    if not isinstance(info, Info):
        raise TypeError(f"{call}: info={info!r}: expected an MPI.Info (MPI.INFO_NULL by default)")


class _Table:
    """The run's publications, locked in the world's shared memory while in use."""

    def __init__(self, world):
        self.rank = _runtime.get().me
        self.fd, self.base = world.transport.run_file()  # cut back to base before each run

    def __enter__(self):
        _in_process.acquire()
        fcntl.lockf(self.fd, fcntl.LOCK_EX, 1, self.base)
        self.changed = False
        try:
            self.entries = self._read()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _read(self) -> list:
        head = os.pread(self.fd, _LENGTH.size, self.base)
        length = _LENGTH.unpack(head)[0] if len(head) == _LENGTH.size else 0
        if not length:
            return []
        return pickle.loads(os.pread(self.fd, length, self.base + _LENGTH.size))

    def __exit__(self, *exc):
        try:
            if self.changed:
                data = pickle.dumps(self.entries) if self.entries else b""
                end = self.base + _LENGTH.size + len(data)
                if os.fstat(self.fd).st_size < end:
                    os.ftruncate(self.fd, end)
                os.pwrite(self.fd, data, self.base + _LENGTH.size)
                os.pwrite(self.fd, _LENGTH.pack(len(data)), self.base)
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, self.base)
            _in_process.release()

    def mine(self, service: bytes) -> list:
        me = os.getpid()
        return [e for e in self.entries if e[0] == service and e[3] == me]

    def add(self, service: bytes, port: bytes) -> None:
        me = os.getpid()
        self.entries.append((service, port, self.rank, me))
        self.changed = True

    def remove(self, doomed: list) -> None:
        if doomed:
            self.entries = [e for e in self.entries if e not in doomed]
            self.changed = True


def Publish_name(service_name, port_name, info=INFO_NULL) -> None:
    """MPI_Publish_name: ``service_name`` names ``port_name`` for every
    process of the run (see the module docstring)."""
    call = "MPI.Publish_name"
    service, port = _text(service_name, call, "service_name"), _text(port_name, call, "port_name")
    _check_info(info, call)
    if not service or not port:
        raise MPIException(ERR_ARG, f"rank {_runtime.get().me}: {call}({service_name!r}, {port_name!r}): "
                           "an empty service or port name")
    with _Table(_runtime.get().world) as table:
        if not table.mine(service):
            table.add(service, port)


def Lookup_name(service_name, info=INFO_NULL) -> str:
    """MPI_Lookup_name: the port name published as ``service_name`` (the
    earliest still published), else MPI.Exception(ERR_NAME) at once."""
    call = "MPI.Lookup_name"
    service = _text(service_name, call, "service_name")
    _check_info(info, call)
    with _Table(_runtime.get().world) as table:
        found = [e for e in table.entries if e[0] == service]
    if not found:
        raise MPIException(ERR_NAME, f"rank {table.rank}: {call}({service_name!r}): no process of this run "
                           "publishes that name (MPI.Publish_name)")
    return found[0][1].decode(errors="replace")[:_LONGEST_PORT]


def Unpublish_name(service_name, port_name, info=INFO_NULL) -> None:
    """MPI_Unpublish_name: remove this process's publication of
    ``service_name`` (none: nothing happens, as with Open MPI)."""
    call = "MPI.Unpublish_name"
    service = _text(service_name, call, "service_name")
    _text(port_name, call, "port_name")
    _check_info(info, call)
    with _Table(_runtime.get().world) as table:
        table.remove(table.mine(service))
