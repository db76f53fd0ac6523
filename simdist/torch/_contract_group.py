"""A torch process group over a contract communicator: the other direction.

``ContractGroup(comm)`` is a ``ProcessGroup`` whose calls are the calls of
``comm``, any :class:`simdist.Communicator` (a fake of ``fake_backends``,
a user's own): torch code, and ``TorchCommunicator`` with the property
suite on top of it, then meets exactly what ``comm`` does. Nothing is
repaired on the way: a result whose dtype or shape is not the tensor's
raises, and what ``comm`` writes into an input's memory (a tensor's numpy
view) stays written.

Every call finishes before it returns (a contract call has met the other
ranks when it returns), so each returns a finished ``Work``; a send hands
``comm`` a copy, since the caller may reuse its tensor then.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.distributed import ProcessGroup

from ._tensors import CONTRACT_OPS, one_tensor, op_name
from ._work import finished

__all__ = ["ContractGroup"]

#: The contract's op names by c10d's.
_OPS = {c10d: name for name, c10d in CONTRACT_OPS.items()}


def _one(tensors, call: str) -> torch.Tensor:
    return one_tensor(tensors, call, "a contract group")


class ContractGroup(ProcessGroup):
    """The process group of ``comm``'s ranks whose calls are ``comm``'s."""

    supports_splitting = supports_coalescing = supports_time_estimate = supports_tensor_alloc = False

    def __init__(self, comm):
        super().__init__(comm.rank, comm.size)
        self.comm = comm

    def getBackendName(self) -> str:
        return "contract"

    def _get_backend(self, device=None) -> "ContractGroup":
        return self

    def __repr__(self) -> str:
        return f"ContractGroup({self.comm!r})"

    # -- tensors and arrays -----------------------------------------------------

    def _array(self, t: torch.Tensor, call: str) -> np.ndarray:
        """The numpy view of ``t``'s memory (what ``comm`` writes there stays)."""
        if t.device.type != "cpu":
            raise RuntimeError(f"rank {self.comm.rank}: {call}: a contract group moves CPU tensors, not {t.device}")
        try:
            return t.detach().numpy()
        except TypeError as exc:  # bfloat16 and the like: no numpy dtype
            raise RuntimeError(f"rank {self.comm.rank}: {call}: {t.dtype} is not supported by the contract "
                               f"({exc})") from None

    def _write(self, t: torch.Tensor, result, call: str) -> None:
        """``result`` into ``t``, refused unless it has ``t``'s dtype and size."""
        want = self._array(t, call)
        got = np.asarray(result)
        if got.dtype != want.dtype or got.size != want.size:
            raise RuntimeError(f"rank {self.comm.rank}: {call}: the communicator returned {got.dtype} of shape "
                               f"{got.shape} for a {t.dtype} tensor of shape {tuple(t.shape)}")
        want[...] = got.reshape(want.shape)

    def _op(self, opts, call: str) -> str:
        name = op_name(opts.reduceOp)
        if name not in _OPS:
            raise RuntimeError(f"rank {self.comm.rank}: {call}: ReduceOp.{name} is not supported by the contract")
        return _OPS[name]

    def _blocks(self, t: torch.Tensor, call: str) -> np.ndarray:
        """``t`` as the contract's (size, ...) blocks: its rows, or equal slices."""
        x = self._array(t, call)
        if x.ndim and x.shape[0] == self.comm.size:
            return x
        return x.reshape(self.comm.size, -1)

    # -- collectives ------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "all_reduce")
        op = "sum" if opts is None else self._op(opts, "all_reduce")
        self._write(t, self.comm.allreduce(self._array(t, "all_reduce"), op=op), "all_reduce")
        return finished(tensors)

    def reduce(self, tensors, opts):
        t, root = _one(tensors, "reduce"), opts.rootRank
        result = self.comm.reduce(self._array(t, "reduce"), root=root, op=self._op(opts, "reduce"))
        if self.comm.rank == root:
            self._write(t, result, "reduce")
        return finished(tensors)

    def broadcast(self, tensors, opts):
        t, root = _one(tensors, "broadcast"), opts.rootRank
        x = self._array(t, "broadcast")
        self._write(t, self.comm.broadcast(x if self.comm.rank == root else None, root=root), "broadcast")
        return finished(tensors)

    def all_gather_single(self, output, input, opts):
        self._write(output, self.comm.allgather(self._array(input, "all_gather_into_tensor")),
                    "all_gather_into_tensor")
        return finished([output])

    _allgather_base = all_gather_single

    def allgather(self, outputs, inputs, opts):
        parts = _one(outputs, "all_gather")
        gathered = self.comm.allgather(self._array(_one(inputs, "all_gather"), "all_gather"))
        for part, row in zip(parts, np.asarray(gathered), strict=True):
            self._write(part, row, "all_gather")
        return finished(outputs)

    def gather(self, outputs, inputs, opts):
        root = opts.rootRank
        gathered = self.comm.gather(self._array(_one(inputs, "gather"), "gather"), root=root)
        if self.comm.rank == root:
            for part, row in zip(_one(outputs, "gather"), np.asarray(gathered), strict=True):
                self._write(part, row, "gather")
        return finished(outputs)

    def scatter(self, outputs, inputs, opts):
        output, root = _one(outputs, "scatter"), opts.rootRank
        blocks = None
        if self.comm.rank == root:
            blocks = np.stack([self._array(p, "scatter") for p in _one(inputs, "scatter")])
        self._write(output, self.comm.scatter(blocks, root=root), "scatter")
        return finished(outputs)

    def reduce_scatter_single(self, output, input, opts):
        op = self._op(opts, "reduce_scatter_tensor")
        result = self.comm.reduce_scatter(self._blocks(input, "reduce_scatter_tensor"), op=op)
        self._write(output, result, "reduce_scatter_tensor")
        return finished([output])

    _reduce_scatter_base = reduce_scatter_single

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):
        for splits in (output_split_sizes, input_split_sizes):
            if splits and len(set(splits)) > 1:
                raise RuntimeError(f"rank {self.comm.rank}: all_to_all_single: uneven split sizes {list(splits)} "
                                   "are not supported by the contract (its alltoall moves equal blocks)")
        result = self.comm.alltoall(self._blocks(input, "all_to_all_single"))
        self._write(output, result, "all_to_all_single")
        return finished([output])

    alltoall_base = all_to_all_single

    def barrier(self, opts=None):
        self.comm.barrier()
        return finished([])

    # -- point to point ---------------------------------------------------------

    def send(self, tensors, dst: int, tag: int):
        self.comm.send(np.array(self._array(_one(tensors, "send"), "send"), copy=True), dst, tag)
        return finished(tensors)

    def recv(self, tensors, src: int, tag: int):
        t = _one(tensors, "recv")
        self._write(t, self.comm.recv(src, tag), "recv")
        return finished(tensors)
