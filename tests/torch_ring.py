"""A ring allreduce written with torch.distributed: reduce-scatter, then allgather."""
import torch
import torch.distributed as dist

import simdist
from simdist.torch.check import TorchCommunicator, process_group

OPS = {"sum": torch.add, "prod": torch.mul, "min": torch.minimum, "max": torch.maximum}
NO_ARITHMETIC = (torch.uint16, torch.uint32, torch.uint64)  # torch moves them, but cannot add them


def ring_allreduce(group, x, op="sum"):
    if op not in OPS or x.dtype in NO_ARITHMETIC:
        raise simdist.InvalidValue(f"ring_allreduce: {x.dtype} {op} is not supported")
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    flat = x.flatten().clone()  # the caller's tensor is never written
    chunks = flat.tensor_split(size)  # views of flat
    right, left = (rank + 1) % size, (rank - 1) % size

    def pass_on(mine, into):
        sending = dist.isend(mine.clone(), group=group, group_dst=right)
        dist.recv(into, group=group, group_src=left)
        sending.wait()

    for step in range(size - 1):  # reduce-scatter: chunk rank+1 ends complete here
        mine, theirs = chunks[(rank - step) % size], chunks[(rank - step - 1) % size]
        got = torch.empty_like(theirs)
        pass_on(mine, got)
        theirs.copy_(OPS[op](theirs, got))
    for step in range(size - 1):  # allgather: the complete chunks go round
        pass_on(chunks[(rank - step + 1) % size], chunks[(rank - step) % size])
    return flat.reshape(x.shape)


def make(base):
    return TorchCommunicator(base, process_group(base), allreduce=ring_allreduce)


def make_on_gloo(base):
    return TorchCommunicator(base, process_group(base, "gloo"), allreduce=ring_allreduce)


def gloo_group(base):
    """A torch process group itself: checked through the contract."""
    return process_group(base, "gloo")
