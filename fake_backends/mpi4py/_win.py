"""One-sided communication: ``MPI.Win`` of the stand-in.

A window's memory is one shared segment that every rank of the window maps
(``_winmemory``), so a Put, Get or accumulate is a copy or an elementwise
combination in the target's memory made by the origin itself, and no
target ever has to take part: passive-target epochs progress whatever the
target does, also when it never calls MPI again. ``Win.Allocate`` and
``Win.Allocate_shared`` give that memory to the program (``tomemory``,
``Shared_query``); ``Win.Create`` keeps the program's buffer as the
private copy of a separate-model window (``_winsync``), as ``Attach``
keeps the regions of a ``Win.Create_dynamic`` window (``_windynamic``).
The epochs and their waits are ``_winsync``'s, the meaning of the
arguments ``_rma``'s.
"""

from __future__ import annotations

import numpy as np

from . import _errhandlers, _handleleaks, _runtime
from ._attributes import AttributeCalls, delete_attributes
from ._buffers import BOTTOM, memory_bytes
from ._errors import ERR_INFO, ERR_KEYVAL, ERR_OTHER, ERR_TYPE, Exception as MPIException
from ._errors import earlier_run
from ._bufferexport import BufferExporter
from ._handles import FreeableHandles, Handle, IntegerHandles, check_handle, new_handle
from ._hints import Errhandler, Info
from ._names import CONSTANTS
from ._rma import ERR_RMA_FLAVOR, check_accumulate, check_rank, combine, origin_spec, plain, target_access
from ._windynamic import ERR_RMA_ATTACH, DynamicMemory
from ._winmemory import PrivateCopy, Segment
from ._winsync import Synchronization, sync_error

WIN_BASE, WIN_SIZE, WIN_DISP_UNIT, WIN_CREATE_FLAVOR, WIN_MODEL = (
    CONSTANTS[k] for k in ("WIN_BASE", "WIN_SIZE", "WIN_DISP_UNIT", "WIN_CREATE_FLAVOR", "WIN_MODEL"))
FLAVOR_CREATE, FLAVOR_ALLOCATE, FLAVOR_SHARED, FLAVOR_DYNAMIC = (
    CONSTANTS[k] for k in ("WIN_FLAVOR_CREATE", "WIN_FLAVOR_ALLOCATE", "WIN_FLAVOR_SHARED", "WIN_FLAVOR_DYNAMIC"))
WIN_SEPARATE, WIN_UNIFIED = CONSTANTS["WIN_SEPARATE"], CONSTANTS["WIN_UNIFIED"]
PASSIVE, ACTIVE, FENCE = "passive", "active", "fence"
_count = 0  # windows made by this process (for their names)


class _WinState:
    """What a window handle refers to on this rank."""

    def __init__(self, rt, st, sc, segment, disp_units, flavor, private, dynamic):
        global _count
        _count += 1
        self.rt, self.engine, self.sc, self.segment = rt, st.engine, sc, segment
        self.members, self.rank, self.size = list(st.members), st.rank, st.size
        self.disp_units, self.flavor = disp_units, flavor
        self.private = private  # the program's buffer (Win.Create), else None
        self.copy = None if private is None else PrivateCopy(private)
        self.dynamic = dynamic  # the attached regions (Win.Create_dynamic), else None
        self.name, self.info = "", {}
        self.errhandler = _errhandlers.default()
        self.attrs: dict = {}
        self.freed = False
        self.fence_open = False
        self.locks: dict[int, int] = {}
        self.lock_all = False
        self.start_targets = None
        self.post_origins = None
        self.deferred: list = []  # accumulates of the fence epoch, applied at the next Fence
        self.deferred_active: dict = {}  # of the PSCW access epoch, by target, applied at Complete
        self.label = f"window {_count} of {st.name}"
        if dynamic is not None:
            dynamic.label = f"rank {self.rank} of {self.label}"

    @property
    def separate(self) -> bool:
        """Whether the program's memory is a private copy (MPI.WIN_SEPARATE)."""
        return self.private is not None or self.dynamic is not None

    @property
    def memory(self) -> np.ndarray:
        """This rank's window memory as the program sees it."""
        return self.segment.memory(self.rank) if self.private is None else self.private

    def to_public(self) -> None:
        """The bytes the program stored in its buffer since the last reconciliation go public."""
        if self.dynamic is not None:
            self.dynamic.to_public()
        if self.copy is not None:
            self.copy.to_public(self.segment.memory(self.rank))

    def to_private(self) -> None:
        if self.dynamic is not None:
            self.dynamic.to_private()
        if self.copy is not None:
            self.copy.to_private(self.segment.memory(self.rank))

    def sync(self) -> None:
        self.to_public()
        self.to_private()

    def release(self) -> None:
        self.freed = True
        self.segment.close()
        if self.dynamic is not None:
            self.dynamic.close()
        self.private = self.copy = None


def _size(value, what: str, call: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        code = CONSTANTS["ERR_SIZE"] if what == "size" else CONSTANTS["ERR_DISP"]
        raise MPIException(code, f"Win.{call}: {what}={value!r} must be an int >= 0")
    if what == "disp_unit" and value == 0:
        raise MPIException(CONSTANTS["ERR_DISP"], f"Win.{call}: disp_unit must be > 0")
    return int(value)


def _make(cls, comm, nbytes: int, disp_unit: int, info, flavor: int, private, call: str) -> "Win":
    """Collective over ``comm``: the window's communicator, its segment and its state."""
    from ._comm import COMM_SELF, Comm

    comm = COMM_SELF if comm is None else comm
    if not isinstance(comm, Comm):
        raise TypeError(f"Win.{call}: comm must be an MPI.Intracomm, got {type(comm).__name__}")
    if info is not None and not isinstance(info, Info):
        raise TypeError(f"Win.{call}: info must be an MPI.Info, got {type(info).__name__}")
    st = comm._st()
    st.engine.progress()
    sc = st.sc.split(0, st.rank)  # the window's own context, as MPI_Win_create duplicates the communicator
    try:
        table = sc.allgather(np.array([nbytes, disp_unit], np.int64))
        segment = Segment(sc, [int(n) for n in table[:, 0]], private)
        dynamic = DynamicMemory(sc, segment) if flavor == FLAVOR_DYNAMIC else None
    except BaseException:
        sc.free()
        raise
    state = _WinState(_runtime.get(), st, sc, segment, [int(d) for d in table[:, 1]], flavor, private, dynamic)
    if flavor != FLAVOR_CREATE and info is not None and info and _info_items(info).get("alloc_shared_noncontig"):
        state.info["alloc_shared_noncontig"] = _info_items(info)["alloc_shared_noncontig"]
    state.rt.at_close.append(state.release)  # its shared memory goes at the run's end if not freed
    win = new_handle(cls)
    win._state = state
    _handleleaks.handle_made(state, "window", win)
    return win


def _info_items(info) -> dict:
    return {info.Get_nthkey(i): info.Get(info.Get_nthkey(i)) for i in range(info.Get_nkeys())}


class Win(Handle, FreeableHandles, IntegerHandles, AttributeCalls, Synchronization, BufferExporter):
    """A window for one-sided communication (see the module docstring); the calls are mpi4py's.

    ``memoryview(win)`` (the buffer protocol, as mpi4py's Win has) is this
    rank's window memory: the shared segment's for Allocate and
    Allocate_shared, the program's buffer for Create."""

    _attr_kind = "Win"

    def _init(self, win: "Win | None" = None) -> None:
        if win is not None:
            check_handle(win, Win, type(self))
        self._state = None if win is None else win._state

    def _buffer_memory(self) -> tuple[int, int, object]:
        """(address, bytes, what keeps them) of this rank's window memory;
        raises for a null or freed window (``_bufferexport``)."""
        memory = self._st().memory
        return (memory.ctypes.data if memory.size else 0), memory.size, memory

    # -- identity --------------------------------------------------------------------------
    def __repr__(self):
        st = self._live()
        return f"<mpi4py.MPI.Win {st.label if st else 'MPI_WIN_NULL'} (simdist)>"

    def _st(self) -> _WinState:
        st = self._state
        if st is None or st.freed:
            raise MPIException(CONSTANTS["ERR_WIN"], "the window is MPI.WIN_NULL")
        if st.rt is not _runtime.current:
            raise earlier_run(st.members[st.rank], "a window")
        if st.rt.finalized:
            raise MPIException(ERR_OTHER, "MPI.Finalize() was called; no MPI calls may follow")
        return st

    def _attributes(self) -> dict:
        return self._st().attrs

    def _attribute_handle(self) -> "Win":
        return Win(self)

    def _make_null(self) -> None:
        self._state = None

    # -- making and freeing -------------------------------------------------------------------
    @classmethod
    def Create(cls, memory, disp_unit: int = 1, info=None, comm=None) -> "Win":
        """A window over the program's ``memory`` (collective over ``comm``, COMM_SELF by default)."""
        disp_unit = _size(disp_unit, "disp_unit", "Create")
        raw = np.empty(0, np.uint8)
        if memory is not None and memory is not BOTTOM:
            raw = np.asarray(memory_bytes(memory, True, "memory")[0])  # a plain view, also of an MPI.buffer
        win = _make(cls, comm, raw.size, disp_unit, info, FLAVOR_CREATE, raw, "Create")
        win._state.user_memory = memory
        return win

    @classmethod
    def Allocate(cls, size: int, disp_unit: int = 1, info=None, comm=None) -> "Win":
        """A window over ``size`` new bytes of this rank (collective)."""
        nbytes, disp_unit = _size(size, "size", "Allocate"), _size(disp_unit, "disp_unit", "Allocate")
        return _make(cls, comm, nbytes, disp_unit, info, FLAVOR_ALLOCATE, None, "Allocate")

    @classmethod
    def Allocate_shared(cls, size: int, disp_unit: int = 1, info=None, comm=None) -> "Win":
        """As Allocate; every rank can also load and store the others'
        memory directly (``Shared_query``); the ranks' memory is contiguous."""
        nbytes, disp_unit = _size(size, "size", "Allocate_shared"), _size(disp_unit, "disp_unit", "Allocate_shared")
        return _make(cls, comm, nbytes, disp_unit, info, FLAVOR_SHARED, None, "Allocate_shared")

    @classmethod
    def Create_dynamic(cls, info=None, comm=None) -> "Win":
        """A window with no memory (collective); each rank attaches its own
        later (``Attach``), and the target displacement of an access is an
        absolute address (``MPI.Get_address``)."""
        return _make(cls, comm, 0, 1, info, FLAVOR_DYNAMIC, None, "Create_dynamic")

    def _dynamic(self, call: str) -> DynamicMemory:
        st = self._st()
        if st.dynamic is None:  # the class Open MPI gives
            raise MPIException(ERR_RMA_ATTACH, f"Win.{call} on rank {st.rank} of {st.label}: the window was not "
                               "made by Win.Create_dynamic")
        return st.dynamic

    def Attach(self, memory) -> None:
        """Attach the program's ``memory`` (local): the others reach it at its address."""
        dynamic = self._dynamic("Attach")
        dynamic.attach(np.asarray(memory_bytes(memory, True, "memory")[0]))

    def Detach(self, memory) -> None:
        """Detach the region attached at ``memory``'s address (local)."""
        dynamic = self._dynamic("Detach")
        dynamic.detach(np.asarray(memory_bytes(memory, True, "memory")[0]))

    def Shared_query(self, rank: int):
        """(memory of ``rank``, its disp_unit) of an Allocate_shared window;
        MPI.PROC_NULL: of the first rank with memory."""
        from ._mpibuffer import _wrap

        st = self._st()
        if st.flavor != FLAVOR_SHARED:
            raise MPIException(ERR_RMA_FLAVOR, "Win.Shared_query: the window was not made by Win.Allocate_shared")
        rank = check_rank(rank, st.size, "Shared_query")
        if rank < 0:
            rank = next((r for r in range(st.size) if st.segment.sizes[r]), 0)
        raw = st.segment.memory(rank)
        return _wrap(raw, self, False, address=st.segment.address(rank)), st.disp_units[rank]

    def Free(self) -> None:
        """Free the window (collective); every epoch of this process must be closed."""
        st = self._st()
        still_open = self._open_epochs(st)
        if still_open:
            raise sync_error(st, "Free", still_open)
        delete_attributes(self, "Win.Free")
        st.engine.progress()
        st.to_public()
        st.sc.barrier()
        st.to_private()
        st.sc.free()
        st.release()
        st.rt.at_close.remove(st.release)
        _handleleaks.handle_freed(st)

    def free(self) -> None:
        """Free unless null (mpi4py's ``free``)."""
        if self:
            self.Free()

    # -- what it is --------------------------------------------------------------------------
    def Get_group(self):
        from ._groups import Group

        return Group._from_ranks(self._st().members)

    group = property(Get_group)

    @property
    def group_size(self) -> int:
        return self._st().size

    @property
    def group_rank(self) -> int:
        return self._st().rank

    def Get_attr(self, keyval: int):
        st = self._st()
        if keyval == CONSTANTS["KEYVAL_INVALID"]:
            raise MPIException(ERR_KEYVAL, "Win.Get_attr(MPI.KEYVAL_INVALID)")
        values = {WIN_BASE: self._base(st), WIN_SIZE: st.memory.size, WIN_DISP_UNIT: st.disp_units[st.rank],
                  WIN_CREATE_FLAVOR: st.flavor, WIN_MODEL: WIN_SEPARATE if st.separate else WIN_UNIFIED}
        if keyval in values:
            return values[keyval]
        return self._user_attr(keyval)

    def _base(self, st) -> int:
        if st.dynamic is not None:
            return 0  # MPI.BOTTOM: its regions are wherever the program attached them
        if st.private is not None:
            return st.private.ctypes.data if st.private.size else 0
        return st.segment.address(st.rank)

    @property
    def attrs(self) -> tuple[int, int, int]:
        st = self._st()
        return self._base(st), st.memory.size, st.disp_units[st.rank]

    @property
    def flavor(self) -> int:
        return self._st().flavor

    @property
    def model(self) -> int:
        return WIN_SEPARATE if self._st().separate else WIN_UNIFIED

    def tomemory(self):
        """This rank's window memory as an MPI.buffer."""
        from ._mpibuffer import _wrap

        st = self._st()
        owner = getattr(st, "user_memory", None) if st.private is not None else self
        return _wrap(st.memory, owner, False, address=self._base(st))

    def Get_info(self):
        info = Info.Create()
        for key, value in self._st().info.items():
            info.Set(key, value)
        return info

    def Set_info(self, info) -> None:
        st = self._st()
        if not isinstance(info, Info):
            raise TypeError(f"Win.Set_info: expected an MPI.Info, got {type(info).__name__}")
        if not info:
            raise MPIException(ERR_INFO, "Win.Set_info(MPI.INFO_NULL)")
        st.info.update(_info_items(info))

    info = property(Get_info, Set_info)

    def Get_name(self) -> str:
        if self._state is None:
            return "MPI_WIN_NULL"
        return self._st().name

    def Set_name(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Win.Set_name: name must be a str, got {type(name).__name__}")
        self._st().name = name

    name = property(Get_name, Set_name)

    def Get_errhandler(self):
        return Errhandler(self._st().errhandler)

    def Set_errhandler(self, errhandler) -> None:
        st = self._st()
        st.errhandler = _errhandlers.checked(errhandler, "Win.Set_errhandler")

    @classmethod
    def Create_errhandler(cls, errhandler_fn):
        return Errhandler._user(errhandler_fn)

    def Call_errhandler(self, errorcode: int) -> None:
        st = self._st()
        _errhandlers.invoke(self, st, MPIException(errorcode, "Call_errhandler"), "Win.Call_errhandler")

    # -- communication -------------------------------------------------------------------------
    def _epoch(self, st, rank: int, call: str) -> str:
        if rank in st.locks or st.lock_all:
            return PASSIVE
        if st.start_targets is not None and rank in st.start_targets:
            return ACTIVE
        if st.fence_open:
            return FENCE
        raise sync_error(st, call, f"no access epoch to rank {rank} is open (call Fence, Lock, Lock_all or Start)")

    def _region(self, st, access) -> np.ndarray:
        """The target's window bytes that hold the access (all of them: a
        derived target datatype picks its bytes with ``access.index``)."""
        if st.dynamic is not None:
            return st.dynamic.target(access.rank, access.offset, access.span)
        return st.segment.memory(access.rank)[access.offset:access.offset + access.span]

    @staticmethod
    def _read(region, access) -> np.ndarray:
        return region if access.index is None else region[access.index]

    @staticmethod
    def _write(region, access, data) -> None:
        if access.index is None:
            region[...] = data
        else:
            region[access.index] = data

    def Put(self, origin, target_rank: int, target=None) -> None:
        """Copy ``origin`` into ``target_rank``'s window memory."""
        st = self._st()
        rank = check_rank(target_rank, st.size, "Put")
        spec = origin_spec(origin, False, rank)
        if spec is None or rank < 0:
            return
        access = target_access(st, spec, rank, target, "Put")
        self._epoch(st, rank, "Put")
        self._write(self._region(st, access), access, spec.raw)

    def Get(self, origin, target_rank: int, target=None) -> None:
        """Copy from ``target_rank``'s window memory into ``origin``."""
        st = self._st()
        rank = check_rank(target_rank, st.size, "Get")
        spec = origin_spec(origin, True, rank)
        if spec is None or rank < 0:
            return
        access = target_access(st, spec, rank, target, "Get")
        self._epoch(st, rank, "Get")
        spec.raw[...] = self._read(self._region(st, access), access)
        spec.store()  # a derived origin datatype: into the buffer's own bytes

    def _accumulate(self, st, call, origin, result, rank, target, op, compare=None):
        """The accumulates: ``result`` (a BufSpec or None) gets the target's
        elements before the op; ``compare`` makes it Compare_and_swap."""
        if origin is None:
            origin = result
        access = target_access(st, origin, rank, target, call)
        check_accumulate(op, origin, access, call, st.rank)
        if result is not None and result.raw.size != access.nbytes:
            raise MPIException(ERR_TYPE, f"Win.{call}: the result buffer has {result.raw.size} bytes, the target "
                               f"{access.nbytes}")
        epoch = self._epoch(st, rank, call)
        data = np.array(origin.raw, copy=True)
        sink = None if result is None else result.raw
        want = None if compare is None else np.array(compare.raw, copy=True)

        def apply():
            region = self._region(st, access)
            memory = self._read(region, access)  # a copy for a derived target datatype
            if sink is not None:
                sink[...] = memory
                result.store()
            if want is None:
                combine(op, memory, data, access.datatype)
            elif np.array_equal(memory, want):
                memory[...] = data
            if access.index is not None:
                self._write(region, access, memory)

        if epoch == FENCE:
            st.deferred.append(apply)
        elif epoch == ACTIVE:
            st.deferred_active.setdefault(rank, []).append(apply)
        else:
            with st.segment.atomic(rank):
                apply()

    def Accumulate(self, origin, target_rank: int, target=None, op=None) -> None:
        """Combine ``origin`` into the target's elements with ``op`` (MPI.SUM by default)."""
        st = self._st()
        rank = check_rank(target_rank, st.size, "Accumulate")
        spec = origin_spec(origin, False, rank)
        if spec is None or rank < 0:
            return
        self._accumulate(st, "Accumulate", spec, None, rank, target, _op(op))

    def Get_accumulate(self, origin, result, target_rank: int, target=None, op=None) -> None:
        """Fetch the target's elements into ``result``, then combine ``origin`` into them."""
        st = self._st()
        rank = check_rank(target_rank, st.size, "Get_accumulate")
        if rank < 0:
            return
        spec = None if origin is None else plain(origin, False, "origin")
        res = plain(result, True, "result")
        self._accumulate(st, "Get_accumulate", spec, res, rank, target, _op(op))

    def Fetch_and_op(self, origin, result, target_rank: int, target_disp: int = 0, op=None) -> None:
        """Get_accumulate of one element."""
        st = self._st()
        rank = check_rank(target_rank, st.size, "Fetch_and_op")
        spec, res = _single(origin, "origin", False, rank), _single(result, "result", True, rank)
        if rank < 0:
            return
        if spec.datatype != res.datatype:
            raise ValueError("mismatch in origin and result MPI datatypes")
        self._accumulate(st, "Fetch_and_op", spec, res, rank, int(target_disp), _op(op))

    def Compare_and_swap(self, origin, compare, result, target_rank: int, target_disp: int = 0) -> None:
        """Fetch the target's element into ``result``; replace it by ``origin`` if it equals ``compare``."""
        from ._ops import PREDEFINED

        st = self._st()
        rank = check_rank(target_rank, st.size, "Compare_and_swap")
        spec = _single(origin, "origin", False, rank)
        cmp, res = _single(compare, "compare", False, rank), _single(result, "result", True, rank)
        if rank < 0:
            return
        if spec.datatype != cmp.datatype:
            raise ValueError("mismatch in origin and compare MPI datatypes")
        if spec.datatype != res.datatype:
            raise ValueError("mismatch in origin and result MPI datatypes")
        self._accumulate(st, "Compare_and_swap", spec, res, rank, int(target_disp), PREDEFINED["REPLACE"], cmp)

    # -- request-based forms (passive-target epochs only, as MPI says) ------------------------------
    def _request(self, call: str, rank: int):
        from ._requests import DONE, Request

        st = self._st()
        if rank >= 0 and rank < st.size and rank not in st.locks and not st.lock_all:
            raise sync_error(st, call, f"request-based operations need a passive-target epoch to rank {rank} "
                             "(Lock or Lock_all)")
        return Request._of(st.engine, DONE, comm=self)

    def Rput(self, origin, target_rank: int, target=None):
        self._request("Rput", target_rank)
        self.Put(origin, target_rank, target)
        return self._request("Rput", target_rank)

    def Rget(self, origin, target_rank: int, target=None):
        self._request("Rget", target_rank)
        self.Get(origin, target_rank, target)
        return self._request("Rget", target_rank)

    def Raccumulate(self, origin, target_rank: int, target=None, op=None):
        self._request("Raccumulate", target_rank)
        self.Accumulate(origin, target_rank, target, op)
        return self._request("Raccumulate", target_rank)

    def Rget_accumulate(self, origin, result, target_rank: int, target=None, op=None):
        self._request("Rget_accumulate", target_rank)
        self.Get_accumulate(origin, result, target_rank, target, op)
        return self._request("Rget_accumulate", target_rank)

    def __getattr__(self, name):
        from ._names import unsupported_attribute

        raise unsupported_attribute("Win", name)


def _op(op):
    from ._ops import PREDEFINED

    return PREDEFINED["SUM"] if op is None else op


def _single(buf, what: str, writable: bool, rank: int):
    """A buffer of exactly one element (Fetch_and_op, Compare_and_swap)."""
    spec = plain(buf, writable, what)
    if rank >= 0 and spec.count != 1:
        raise ValueError(f"{what}: expecting a single element, got {spec.count}")
    return spec


_errhandlers.guard_calls(Win, lambda win: win)
WIN_NULL = Win()
Win._handle_base = (Win,)  # its handles compare with each other (``FreeableHandles``)
