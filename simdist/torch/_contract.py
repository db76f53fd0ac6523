"""The communicator contract over a torch process group.

``TorchCommunicator`` takes numpy arrays as the contract does, and makes
each call one of torch.distributed's on a process group: Gloo's, NCCL's
(CUDA tensors) or the simulator's own ``simdist`` backend. A call may be
a function of the user's instead, written with torch (a ring all-reduce of
``dist.send``/``dist.recv``): it gets the group and a tensor.

Inputs of the calls torch makes in place (``all_reduce``, ``reduce``,
``broadcast``) and of sends are copied into new tensors; the others
(the inputs of gathers, scatters, ``reduce_scatter`` and ``alltoall``)
are tensors over the caller's own memory where they can be, so that a
backend that writes into an input is seen to. Results are copied out.
Where the contract gives the callee what torch needs on every rank
beforehand (the dtype and shape of a broadcast or a scatter on the
non-roots, of a message on its receiver), a small header travels first,
over the same group. A refusal of the backend's (Gloo has
no int16, torch no logical op, no ``PRODUCT`` of complex numbers) is
raised as :class:`simdist.InvalidValue` saying "not supported", so that
``simdist check`` reports the row as unsupported rather than failed.
"""

from __future__ import annotations

import re

import numpy as np
import torch
import torch.distributed as dist

from .._arguments import check_blocks
from .._bfloat16 import NAME as BFLOAT16, dtype_named
from .._communicator import Communicator
from .._errors import InvalidType, InvalidValue
from ._contract_group import ContractGroup
from ._tensors import CONTRACT_OPS, from_numpy, to_numpy

__all__ = ["TorchCommunicator", "CALLS"]


def _at_return(callback) -> None:
    """``callback`` when the run's function ends, in a rank of a simdist world."""
    from simdist._worker import at_return

    at_return(callback)

#: The calls a user's function may replace.
CALLS = ("allreduce", "reduce", "broadcast", "allgather", "gather", "scatter", "reduce_scatter", "alltoall",
         "barrier", "send", "recv")

_DTYPES = {np.dtype(name): getattr(torch, name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
    "float64", "complex64", "complex128")}
try:  # bfloat16, as ml_dtypes' numpy type (simdist[torch] installs it)
    _DTYPES[dtype_named(BFLOAT16)] = torch.bfloat16
except InvalidValue:
    pass
_CODES = {dtype: code for code, dtype in enumerate(_DTYPES)}
_BY_CODE = list(_DTYPES)
_HEADER = 2 + 64  # dtype code, ndim, up to 64 dimensions

# torch 2.14's names of the one-tensor calls (the older ones warn there)
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

# What a backend says when it refuses a dtype or an op before moving anything.
_REFUSALS = re.compile(r"Invalid scalar type|does not support|Cannot use ReduceOp|can't be cast to the desired "
                       r"output type|not supported|Unsupported|unsupported")


def _backend_of(group) -> str:
    try:
        return dist.get_backend(group)
    except (ValueError, RuntimeError):  # a group c10d did not make (a ContractGroup)
        return group.getBackendName()


class TorchCommunicator(Communicator):
    """The contract over the torch process group ``group`` (see the module
    docstring); ``base`` is the world communicator of the run (or a
    sub-communicator ``split`` made), whose ranks are the group's.

    ``functions`` replace calls by functions written with torch, each given
    the group, then a tensor where the contract has an array, then the
    contract's other arguments in its order: ``allreduce(group, x, op)``,
    ``reduce(group, x, root, op)``, ``broadcast(group, x, root)`` (``x``
    None on a non-root that passed None), ``allgather(group, x)``,
    ``gather(group, x, root)``, ``scatter(group, x, root)``,
    ``reduce_scatter(group, x, op)``, ``alltoall(group, x)``,
    ``barrier(group)``, ``send(group, x, dest, tag)``, ``recv(group,
    source, tag)``; ``op`` is the contract's name ("sum", ...), ranks are
    the group's. A function returns a tensor (or an array, or None where
    the contract has None); one that does not support an op or a dtype
    raises :class:`simdist.InvalidValue` saying "not supported". The
    tensors are on ``device``.
    """

    def __init__(self, base, group, *, device: str | torch.device = "cpu", backend: str | None = None,
                 **functions):
        unknown = sorted(set(functions) - set(CALLS))
        if unknown:
            raise InvalidValue(f"TorchCommunicator: {', '.join(unknown)} is not a call of the contract; "
                               f"give functions for {', '.join(CALLS)}")
        for name, fn in functions.items():
            if not callable(fn):
                raise InvalidType(f"TorchCommunicator: {name}={fn!r} must be a function")
        self.base, self.group, self.device = base, group, torch.device(device)
        self.backend = backend or _backend_of(group)
        self.functions = functions
        self._sending: list = []  # the works of sends not yet received, and their tensors

    @property
    def rank(self) -> int:
        return self.base.rank

    @property
    def size(self) -> int:
        return self.base.size

    def __repr__(self) -> str:
        return f"TorchCommunicator(rank={self.rank}, size={self.size}, backend={self.backend!r})"

    # -- arrays and tensors ----------------------------------------------------
    def _tensor(self, x, call: str, *, shared: bool = False) -> torch.Tensor:
        """``x`` as a tensor on the device: a copy, or (``shared``) a tensor
        over ``x``'s memory where it is a writeable C-ordered array on the CPU."""
        x = np.asarray(x)
        if x.dtype not in _DTYPES:
            raise InvalidType(f"rank {self.rank}: {call}: dtype {x.dtype} is not among the contract's")
        if shared and self.device.type == "cpu" and x.flags.c_contiguous and x.flags.writeable and x.dtype.isnative:
            return from_numpy(x)
        return from_numpy(np.array(x, order="C", copy=True)).to(self.device)

    def _empty(self, shape, dtype: np.dtype) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=_DTYPES[np.dtype(dtype)], device=self.device)

    @staticmethod
    def _array(t) -> np.ndarray | None:
        if t is None or isinstance(t, np.ndarray):
            return None if t is None else np.array(t, copy=True)
        return to_numpy(t.detach().cpu())

    def _op(self, op: str, call: str):
        if op not in CONTRACT_OPS:
            raise InvalidValue(f"rank {self.rank}: {call}: op {op!r} is not supported by torch.distributed "
                               f"(it has {', '.join(CONTRACT_OPS)})")
        return getattr(dist.ReduceOp, CONTRACT_OPS[op])

    def _torch(self, call: str, what: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)``, a backend's refusal raised as "not supported"."""
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ValueError, TypeError) as exc:
            if _REFUSALS.search(str(exc)):
                raise InvalidValue(f"rank {self.rank}: {call}: {self.backend} refuses {what}: not supported "
                                   f"({str(exc).splitlines()[0]})") from None
            raise

    def _user(self, call: str, *args):
        return self.functions[call](self.group, *args)

    # -- headers: the dtype and shape a receiver must know beforehand -------------
    def _header(self, x: np.ndarray | None) -> torch.Tensor:
        words = torch.zeros(_HEADER, dtype=torch.int64, device=self.device)
        if x is not None:
            words[0], words[1] = _CODES[x.dtype], x.ndim
            words[2:2 + x.ndim] = torch.tensor(x.shape, dtype=torch.int64)
        return words

    @staticmethod
    def _read_header(words: torch.Tensor) -> tuple[np.dtype, tuple]:
        values = words.cpu().tolist()
        return _BY_CODE[values[0]], tuple(values[2:2 + values[1]])

    def _broadcast_header(self, x: np.ndarray | None, root: int) -> tuple[np.dtype, tuple]:
        words = self._header(x if self.rank == root else None)
        dist.broadcast(words, group=self.group, group_src=root)
        return self._read_header(words)

    # -- the contract --------------------------------------------------------------
    def allreduce(self, x, op="sum"):
        t = self._tensor(x, "allreduce")
        if "allreduce" in self.functions:
            return self._array(self._user("allreduce", t, op))
        self._torch("allreduce", f"{t.dtype} {op}", dist.all_reduce, t, op=self._op(op, "allreduce"),
                    group=self.group)
        return self._array(t)

    def reduce(self, x, root=0, op="sum"):
        t = self._tensor(x, "reduce")
        if "reduce" in self.functions:
            return self._array(self._user("reduce", t, root, op))
        self._torch("reduce", f"{t.dtype} {op}", dist.reduce, t, op=self._op(op, "reduce"), group=self.group,
                    group_dst=root)
        return self._array(t) if self.rank == root else None

    def broadcast(self, x, root=0):
        if "broadcast" in self.functions:
            t = self._tensor(x, "broadcast") if x is not None else None
            return self._array(self._user("broadcast", t, root))
        x = np.asarray(x) if self.rank == root else None
        dtype, shape = self._broadcast_header(x, root)
        t = self._tensor(x, "broadcast") if self.rank == root else self._empty(shape, dtype)
        self._torch("broadcast", str(t.dtype), dist.broadcast, t, group=self.group, group_src=root)
        return self._array(t)

    def allgather(self, x):
        t = self._tensor(x, "allgather", shared=True)
        if "allgather" in self.functions:
            return self._array(self._user("allgather", t))
        out = torch.empty(self.size * t.numel(), dtype=t.dtype, device=self.device)
        self._torch("allgather", str(t.dtype), _ALL_GATHER, out, t.reshape(-1), group=self.group)
        return self._array(out.reshape(self.size, *t.shape))

    def gather(self, x, root=0):
        t = self._tensor(x, "gather", shared=True)
        if "gather" in self.functions:
            return self._array(self._user("gather", t, root))
        blocks = [torch.empty_like(t) for _ in range(self.size)] if self.rank == root else None
        self._torch("gather", str(t.dtype), dist.gather, t, blocks, group=self.group, group_dst=root)
        return self._array(torch.stack(blocks)) if self.rank == root else None

    def scatter(self, x, root=0):
        if "scatter" in self.functions:
            t = self._tensor(x, "scatter", shared=True) if x is not None else None
            return self._array(self._user("scatter", t, root))
        x = np.asarray(x) if self.rank == root else None
        if x is not None:
            check_blocks(x, self.size, self.rank, "scatter")
        dtype, shape = self._broadcast_header(x[0] if x is not None else None, root)
        out = self._empty(shape, dtype)
        blocks = list(self._tensor(x, "scatter", shared=True).unbind(0)) if x is not None else None
        self._torch("scatter", str(out.dtype), dist.scatter, out, blocks, group=self.group, group_src=root)
        return self._array(out)

    def reduce_scatter(self, x, op="sum"):
        t = self._tensor(x, "reduce_scatter", shared=True)
        if "reduce_scatter" in self.functions:
            return self._array(self._user("reduce_scatter", t, op))
        check_blocks(t, self.size, self.rank, "reduce_scatter")
        out = torch.empty(t.shape[1:], dtype=t.dtype, device=self.device)
        self._torch("reduce_scatter", f"{t.dtype} {op}", _REDUCE_SCATTER, out.reshape(-1),
                    t.reshape(-1), op=self._op(op, "reduce_scatter"), group=self.group)
        return self._array(out)

    def alltoall(self, x):
        t = self._tensor(x, "alltoall", shared=True)
        if "alltoall" in self.functions:
            return self._array(self._user("alltoall", t))
        check_blocks(t, self.size, self.rank, "alltoall")
        out = torch.empty_like(t)
        self._torch("alltoall", str(t.dtype), dist.all_to_all_single, out, t, group=self.group)
        return self._array(out)

    def barrier(self):
        if "barrier" in self.functions:
            self._user("barrier")
            return
        dist.barrier(group=self.group)

    def send(self, x, dest, tag=0):
        """``isend`` of a header and the tensor: it returns before the message
        is received, as the contract's buffered send (Gloo's ``send`` waits
        for the receiver); the sends still pending when the run's function
        ends are waited for then, as ``MPI_Finalize`` does."""
        t = self._tensor(x, "send")
        if "send" in self.functions:
            self._user("send", t, dest, tag)
            return
        if not self._sending:
            _at_return(self._finish_sends)
        self._sending = [(w, m) for w, m in self._sending if not w.is_completed()]
        for message in (self._header(np.asarray(x)), t) if t.numel() else (self._header(np.asarray(x)),):
            work = self._torch("send", str(message.dtype), dist.isend, message, group=self.group, group_dst=dest,
                               tag=tag)
            self._sending.append((work, message))

    def _finish_sends(self, returned: bool = True) -> None:
        pending, self._sending = self._sending, []
        if returned:
            for work, _ in pending:
                work.wait()

    def _recv(self, t: torch.Tensor, source: int, tag: int) -> None:
        """The group's own receive (``dist.recv`` wants a group c10d made, to
        name the sender's global rank, which nothing here reads); a complex
        tensor travels as its real view, as ``dist.isend`` sends it."""
        self.group.recv([torch.view_as_real(t) if t.is_complex() else t], source, tag).wait()

    def recv(self, source, tag=0):
        if "recv" in self.functions:
            return self._array(self._user("recv", source, tag))
        words = self._empty((_HEADER,), np.dtype(np.int64))
        self._recv(words, source, tag)
        dtype, shape = self._read_header(words)
        t = self._empty(shape, dtype)
        if t.numel():
            self._torch("recv", str(t.dtype), self._recv, t, source, tag)
        return self._array(t)

    def split(self, color, key=0):
        """The base's split, with a process group of the new ranks (made by
        its members alone); None where ``color`` is None. A
        :class:`ContractGroup`'s communicator splits itself."""
        if isinstance(self.group, ContractGroup):
            sub = self.group.comm.split(color, key)
            return None if sub is None else TorchCommunicator(sub, ContractGroup(sub), device=self.device,
                                                              backend=self.backend, **self.functions)
        sub = self.base.split(color, key)
        world = dist.distributed_c10d._world
        members = self.base.allgather(np.array([-1 if color is None else color, key, dist.get_rank(),
                                                getattr(world, "group_count", 0)], np.int64))
        if sub is None:
            return None
        mine = sorted((int(k), r, int(g), int(n)) for r, (c, k, g, n) in enumerate(members.tolist()) if c == color)
        if hasattr(world, "group_count"):
            # torch names a group made with local synchronization after a count
            # that only the members of each earlier group advanced: unless the
            # members agree on it, they name the group differently and Gloo's
            # rendezvous waits for ever
            world.group_count = max(n for *_, n in mine)
        group = dist.new_group([g for _, _, g, _ in mine], use_local_synchronization=True)
        sub.barrier()  # every member's connections made before any may close them (see check.process_group)
        return TorchCommunicator(sub, group, device=self.device, backend=self.backend, **self.functions)
