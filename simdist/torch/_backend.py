"""The ``simdist`` process group of torch.distributed: c10d's calls as MPI calls.

``SimdistGroup`` is the process group c10d gets from the ``simdist``
creator. It is a ``ProcessGroup`` of its own (as torch's threaded test
group is), not a ``Backend`` inside one: c10d asks a Python ``Backend`` for
things only C++ can answer (its name, under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``).
Each c10d call becomes the call of the simulated MPI (the stand-in of
``fake_backends.mpi4py``) on the group's communicator that means the same,
so every reduction is the contract's fold in rank order and every call is
matched across the ranks as simdist matches them (a rank that disagrees
raises ``CollectiveMismatch`` instead of moving data). Tensors travel as
described in ``_tensors``; the ``Work`` each call returns is ``_work``'s.
"""

from __future__ import annotations

import torch
from torch.distributed import ProcessGroup

from . import _profiling
from ._profiling import profiled
from ._tensors import ReduceOps, Staged, one_tensor, op_name, premultiplied
from ._work import Pending, finished

_SUM = torch.distributed.AllreduceOptions().reduceOp  # SUM, of the type c10d passes

#: A profiler event's inputs: the call's first argument (a list of tensors), or its tensors.
_FIRST = lambda tensors, *rest: tensors  # noqa: E731
_SECOND = lambda outputs, inputs, *rest: inputs  # noqa: E731


def _one(tensors, call: str) -> torch.Tensor:
    return one_tensor(tensors, call, "the simdist backend")


def _check_one_size(inputs, outputs, call: str) -> None:
    """Gloo's all_to_all of lists moves tensors of one shape only: refuse the rest as it does."""
    for what, tensors in (("input_tensor_list", inputs), ("output_tensor_list", outputs)):
        for i, t in enumerate(tensors):
            if t.shape != tensors[0].shape:
                raise RuntimeError(f"{call}: invalid tensor size at index {i} of {what} (expected "
                                   f"{tuple(tensors[0].shape)}, got {tuple(t.shape)}); as with Gloo, every tensor "
                                   "has one shape: for uneven blocks use all_to_all_single with split sizes")
    if inputs[0].shape != outputs[0].shape:
        raise RuntimeError(f"{call}: the input tensors' shape {tuple(inputs[0].shape)} is not the output tensors' "
                           f"{tuple(outputs[0].shape)}; as with Gloo, they must be the same")


class SimdistGroup(ProcessGroup):
    """A process group whose calls run on ``comm``, a communicator of the
    simulated MPI whose ranks are the group's ranks."""

    # c10d's properties of these names call back into a subclass by the same
    # names: values here, or every read of them recurses
    supports_splitting = supports_coalescing = supports_time_estimate = supports_tensor_alloc = False

    def __init__(self, comm, MPI, name: str):
        super().__init__(comm.Get_rank(), comm.Get_size())
        self.comm, self.MPI = comm, MPI
        self._name = name
        self._ops = ReduceOps(MPI)
        self._backend_name: str | None = None

    # -- what c10d asks of a backend --------------------------------------------

    def getBackendName(self) -> str:
        return "simdist"

    def _get_backend(self, device=None) -> "SimdistGroup":  # the group is its own backend on the CPU
        return self

    @property
    def _device_types(self) -> list:  # what torch's CPU-only calls (monitored_barrier) ask of a group
        return [torch.device("cpu")]

    @property
    def backend_name(self) -> str:
        """``simdist`` when the program asked for it, else ``gloo`` (the
        group stands in for Gloo: asked by its name, ``cpu:gloo``, or none)."""
        if self._backend_name is None:
            from torch.distributed import distributed_c10d

            asked = distributed_c10d._world.pg_map.get(self)
            if asked is None:  # asked while c10d still makes the group
                return "simdist"
            self._backend_name = "simdist" if str(asked[0]) == "simdist" else "gloo"
        return self._backend_name

    @property
    def group_name(self) -> str:  # c10d's name of the group (DeviceMesh looks groups up by it)
        return self._name

    def __repr__(self) -> str:
        return f"SimdistGroup(rank={self.rank()}, size={self.size()}, group={self._name!r})"

    # -- reductions -----------------------------------------------------------

    def _reduce(self, tensor: torch.Tensor, op, call: str, root: int | None = None) -> None:
        name = op_name(op)
        staged = Staged(tensor, call)
        mpi_op = self._ops.mpi_op(name, tensor.dtype, call)
        if name == "PREMUL_SUM":
            premultiplied(staged, op)
        buf = staged.array
        if root is None:
            self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=mpi_op)
        elif self.comm.Get_rank() == root:
            self.comm.Reduce(self.MPI.IN_PLACE, buf, op=mpi_op, root=root)
        else:
            self.comm.Reduce(buf, None, op=mpi_op, root=root)
            return
        if name == "AVG":
            with torch.no_grad():
                staged.buffer.div_(self.comm.Get_size())
        staged.done()

    @profiled("all_reduce", _FIRST)
    def allreduce(self, tensors, opts=None):  # a comm hook may call it with no options: SUM, as Gloo's
        tensor, op = _one(tensors, "all_reduce"), _SUM if opts is None else opts.reduceOp
        if tensor.layout == torch.sparse_coo:
            self._sparse_sum(tensor, op)
        else:
            self._reduce(tensor, op, "all_reduce")
        return finished(tensors)

    def _sparse_sum(self, tensor: torch.Tensor, op) -> None:
        """A sparse COO tensor's all_reduce, which Gloo allows for SUM: every
        rank gathers every rank's coalesced indices and values and coalesces
        their concatenation in rank order, so each computes the same bits."""
        if op_name(op) != "SUM":
            raise RuntimeError(f"all_reduce: a sparse tensor is reduced with ReduceOp.SUM only (as by Gloo), "
                               f"not ReduceOp.{op_name(op)}")
        mine = tensor.detach().coalesce()
        parts = self.comm.allgather((tuple(mine.shape), mine.indices(), mine.values()))
        for rank, (shape, _, values) in enumerate(parts):
            if shape != tuple(mine.shape) or values.dtype != mine.dtype:
                raise RuntimeError(f"all_reduce: rank {rank} of the group passed a sparse {values.dtype} tensor of "
                                   f"shape {list(shape)}, this rank a {mine.dtype} one of shape {list(mine.shape)}")
        indices = torch.cat([part[1] for part in parts], dim=1)
        values = torch.cat([part[2] for part in parts])
        with torch.no_grad():
            tensor.copy_(torch.sparse_coo_tensor(indices, values, mine.shape).coalesce())

    @profiled("all_reduce", _FIRST)
    def allreduce_coalesced(self, tensors, opts=None):
        for tensor in tensors:
            self._reduce(tensor, _SUM if opts is None else opts.reduceOp, "all_reduce_coalesced")
        return finished(tensors)

    @profiled("reduce", _FIRST)
    def reduce(self, tensors, opts):
        self._reduce(_one(tensors, "reduce"), opts.reduceOp, "reduce", root=opts.rootRank)
        return finished(tensors)

    def _reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, op, call: str) -> None:
        name = op_name(op)
        send = Staged(input.clone() if name == "PREMUL_SUM" else input, call)  # the factor goes on a copy
        if name == "PREMUL_SUM":
            premultiplied(send, op)
        recv = Staged(output, call)
        mpi_op = self._ops.mpi_op(name, output.dtype, call)
        if send.array.size != recv.array.size * self.comm.Get_size():
            raise ValueError(f"{call}: the input has {send.array.size} elements; it must have the output's "
                             f"{recv.array.size} times the group's size {self.comm.Get_size()}")
        self.comm.Reduce_scatter_block(send.array, recv.array, op=mpi_op)
        if name == "AVG":
            with torch.no_grad():
                recv.buffer.div_(self.comm.Get_size())
        recv.done()

    @profiled("reduce_scatter", _FIRST)
    def reduce_scatter(self, outputs, inputs, opts):
        output, parts = _one(outputs, "reduce_scatter"), _one(inputs, "reduce_scatter")
        self._check_count(parts, "reduce_scatter", "input_list")
        self._reduce_scatter(output, torch.cat([p.reshape(-1) for p in parts]), opts.reduceOp, "reduce_scatter")
        return finished(outputs)

    @profiled("reduce_scatter_tensor", lambda output, *rest: [output])
    def reduce_scatter_single(self, output, input, opts):
        self._reduce_scatter(output, input, opts.reduceOp, "reduce_scatter_tensor")
        return finished([output])

    _reduce_scatter_base = reduce_scatter_single

    @profiled("reduce_scatter_tensor_coalesced", _FIRST)
    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        for output, input in zip(outputs, inputs, strict=True):
            self._reduce_scatter(output, input, opts.reduceOp, "reduce_scatter_tensor_coalesced")
        return finished(outputs)

    # -- moving data ------------------------------------------------------------

    @profiled("broadcast", _FIRST)
    def broadcast(self, tensors, opts):
        staged = Staged(_one(tensors, "broadcast"), "broadcast")
        self.comm.Bcast(staged.array, root=opts.rootRank)
        staged.done()
        return finished(tensors)

    def _check_count(self, tensors, call: str, what: str) -> None:
        if len(tensors) != self.comm.Get_size():
            raise ValueError(f"{call}: {what} has {len(tensors)} tensors; the group has {self.comm.Get_size()} ranks")

    def _gathered(self, output: torch.Tensor, input: torch.Tensor, call: str) -> None:
        send, recv = Staged(input, call), Staged(output, call)
        if recv.array.size != send.array.size * self.comm.Get_size():
            raise ValueError(f"{call}: the output has {recv.array.size} elements; it must have the input's "
                             f"{send.array.size} times the group's size {self.comm.Get_size()}")
        self.comm.Allgather(send.array, recv.array)
        recv.done()

    @profiled("all_gather", _SECOND)
    def allgather(self, outputs, inputs, opts):
        self._allgather(_one(outputs, "all_gather"), _one(inputs, "all_gather"), "all_gather")
        return finished(outputs)

    def _allgather(self, parts, input: torch.Tensor, call: str) -> None:
        self._check_count(parts, call, "tensor_list")
        whole = input.new_empty((self.comm.Get_size(), *input.shape))
        self._gathered(whole, input, call)
        with torch.no_grad():
            for part, row in zip(parts, whole):
                part.copy_(row.view(part.shape) if part.numel() == row.numel() else row)

    @profiled("all_gather", _SECOND)
    def allgather_coalesced(self, outputs, inputs, opts):
        """``outputs[r][k]`` gets rank ``r``'s ``inputs[k]``."""
        self._check_count(outputs, "all_gather_coalesced", "output_tensor_lists")
        for k, input in enumerate(inputs):
            self._allgather([row[k] for row in outputs], input, "all_gather_coalesced")
        return finished(outputs)

    @profiled("all_gather_into_tensor", lambda output, input, *rest: [input])
    def all_gather_single(self, output, input, opts):
        self._gathered(output, input, "all_gather_into_tensor")
        return finished([output])

    _allgather_base = all_gather_single

    @profiled("all_gather_into_tensor_coalesced", _SECOND)
    def all_gather_single_coalesced(self, outputs, inputs, opts):
        for output, input in zip(outputs, inputs, strict=True):
            self._gathered(output, input, "all_gather_into_tensor_coalesced")
        return finished(outputs)

    @profiled("gather", _SECOND)
    def gather(self, outputs, inputs, opts):
        input, root = _one(inputs, "gather"), opts.rootRank
        send = Staged(input, "gather")
        if self.comm.Get_rank() != root:
            self.comm.Gather(send.array, None, root=root)
            return finished(outputs)
        parts = _one(outputs, "gather")
        self._check_count(parts, "gather", "gather_list")
        whole = input.new_empty((self.comm.Get_size(), *input.shape))
        self.comm.Gather(send.array, Staged(whole, "gather").array, root=root)
        with torch.no_grad():
            for part, row in zip(parts, whole):
                part.copy_(row)
        return finished(outputs)

    @profiled("scatter", lambda outputs, inputs, *rest: inputs[0] if inputs else [])
    def scatter(self, outputs, inputs, opts):
        output, root = _one(outputs, "scatter"), opts.rootRank
        recv = Staged(output, "scatter")
        if self.comm.Get_rank() != root:
            self.comm.Scatter(None, recv.array, root=root)
        else:
            parts = _one(inputs, "scatter")
            self._check_count(parts, "scatter", "scatter_list")
            whole = torch.stack([p.reshape(output.shape) for p in parts])
            self.comm.Scatter(Staged(whole, "scatter").array, recv.array, root=root)
        recv.done()
        return finished(outputs)

    def _alltoallv(self, output: torch.Tensor, input: torch.Tensor, out_counts, in_counts, call: str) -> None:
        send, recv = Staged(input, call), Staged(output, call)
        self.comm.Alltoallv([send.array, in_counts], [recv.array, out_counts])
        recv.done()

    @profiled("all_to_all", lambda output, input, *rest: [input])
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):
        call = "all_to_all_single"
        in_row = input[0].numel() if input.dim() and input.shape[0] else 0
        out_row = output[0].numel() if output.dim() and output.shape[0] else 0
        in_counts = self._counts(input, input_split_sizes, in_row, call, "input")
        out_counts = self._counts(output, output_split_sizes, out_row, call, "output")
        self._alltoallv(output, input, out_counts, in_counts, call)
        return finished([output])

    alltoall_base = all_to_all_single

    def _counts(self, tensor, splits, row: int, call: str, what: str) -> list[int]:
        size = self.comm.Get_size()
        if not splits:
            if tensor.numel() % size:
                raise ValueError(f"{call}: the {what} has {tensor.numel()} elements, not a multiple of the "
                                 f"group's size {size}; pass {what}_split_sizes")
            return [tensor.numel() // size] * size
        if len(splits) != size or sum(splits) != (tensor.shape[0] if tensor.dim() else 1):
            raise ValueError(f"{call}: {what}_split_sizes={list(splits)} must have {size} entries summing to "
                             f"the {what}'s first dimension {tensor.shape[0] if tensor.dim() else 1}")
        return [s * row for s in splits]

    @profiled("all_to_all", _SECOND)
    def alltoall(self, outputs, inputs, opts):
        call = "all_to_all"
        self._check_count(inputs, call, "input_tensor_list")
        self._check_count(outputs, call, "output_tensor_list")
        _check_one_size(inputs, outputs, call)
        input = torch.cat([t.reshape(-1) for t in inputs])
        output = outputs[0].new_empty(sum(t.numel() for t in outputs))
        self._alltoallv(output, input, [t.numel() for t in outputs], [t.numel() for t in inputs], call)
        with torch.no_grad():
            for part, piece in zip(outputs, output.split([t.numel() for t in outputs])):
                part.copy_(piece.view(part.shape))
        return finished(outputs)

    @profiled("barrier", lambda *args: [])
    def barrier(self, opts=None):
        self.comm.Barrier()
        return finished([])

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        self.comm.Barrier()

    # -- point to point ---------------------------------------------------------

    def send(self, tensors, dst: int, tag: int):
        staged = Staged(_one(tensors, "send"), "send")
        event = _profiling.start(self, "send", tensors)
        return Pending(self.MPI, self.comm.Isend(staged.array, dest=dst, tag=tag), tensors, staged, False, event)

    def recv(self, tensors, src: int, tag: int):
        staged = Staged(_one(tensors, "recv"), "recv")
        event = _profiling.start(self, "recv" if src != self.MPI.ANY_SOURCE else "recvAnySource", tensors)
        return Pending(self.MPI, self.comm.Irecv(staged.array, source=src, tag=tag), tensors, staged, True, event)

    def recv_anysource(self, tensors, tag: int):
        return self.recv(tensors, self.MPI.ANY_SOURCE, tag)

    # -- lifetime ---------------------------------------------------------------

    def shutdown(self) -> None:
        self._ops.free()

    def abort(self) -> None:
        self._ops.free()
