"""torch's backends under ``simdist check`` and the property suite.

``simdist check --backend torch-gloo`` checks Gloo: on every simulated
rank the factory :func:`gloo` makes a real ``ProcessGroupGloo`` over the
run's ranks (c10d's ``"gloo"`` in a simulated rank is the simulator, so
the group is made by its class, registered under the name
``torch_gloo``), and wraps it in the contract
(:class:`~simdist.torch._contract.TorchCommunicator`). ``torch-nccl`` does
the same with NCCL on CUDA tensors, one GPU per rank.

:func:`process_group` gives any factory the run's process group, to
check a collective written with torch (``TorchCommunicator(base,
process_group(base), allreduce=ring_allreduce)``): by default the
``simdist`` backend's, whose calls are the simulator's.
:class:`ContractGroup` goes the other way: a process group whose calls
are a contract communicator's (a fake's, in ``fake_backends.torch_groups``).

A process group lasts for one ``World.run``: the factory is called again
for every run, and the group of a run is destroyed when the run's function
ends, so that a row that failed on one rank (leaving Gloo's connections
broken, or a rank replaced) never reaches the next run. Its store is a
prefix of a ``TCPStore`` on loopback whose server rank 0's process
keeps; its port travels through ``base``. A Gloo or NCCL call, and a wait
of the store, that waits for ``SIMDIST_TIMEOUT`` seconds (default 60)
raises: a rank blocked in torch's own code is no simulator call, so the
world's hang watch does not see it.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout

from .._errors import InvalidValue
from ._contract import CALLS, TorchCommunicator
from ._contract_group import ContractGroup
from ._launch import hang_timeout

__all__ = ["gloo", "nccl", "process_group", "TorchCommunicator", "ContractGroup", "CALLS", "unavailable"]

#: The name real Gloo is registered under in a simulated rank.
REAL_GLOO = "torch_gloo"

_run = {}  # this run's process group: {"group", "backend"}
_world_store = {}  # rank 0's: {"server" of the world's store, "runs" made}
_stores = {}  # port -> this process's client of that store


def unavailable(backend: str) -> str | None:
    """Why ``backend`` (``torch-gloo`` or ``torch-nccl``, a key of
    ``simdist.reference._focus.NAMED_FACTORIES``) cannot run here, or None."""
    if backend == "torch-nccl":
        if not torch.cuda.is_available():
            return ("torch-nccl checks NCCL on CUDA tensors, one GPU per rank, and torch sees no CUDA device here "
                    "(torch.cuda.is_available() is False); run it on a machine with GPUs, or check Gloo with "
                    "--backend torch-gloo")
        if not dist.is_nccl_available():
            return "torch-nccl: this torch was built without NCCL (torch.distributed.is_nccl_available() is False)"
    return None


def _register_gloo() -> None:
    if REAL_GLOO.upper() not in dist.Backend._plugins:
        def create(store, rank, size, timeout):
            return dist.ProcessGroupGloo(store, rank, size, timeout)

        dist.Backend.register_backend(REAL_GLOO, create, devices=["cpu"])


def _destroy(returned: bool = True) -> None:
    _run.clear()
    if dist.is_initialized():
        dist.destroy_process_group()


def _timeout() -> timedelta:
    return timedelta(seconds=hang_timeout(default_pg_timeout))


def _run_store(base):
    """A store for this run's group: a prefix of this world's store, a
    ``TCPStore`` whose server rank 0's process keeps (each process connects
    once: a new store per run would connect every rank again, and a
    ``FileStore`` reopens its file at every call, so a file replaced between
    runs would mix two runs' keys)."""
    if base.rank == 0:
        if "server" not in _world_store:
            _world_store.update(server=dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                                      timeout=_timeout()), runs=0)
        _world_store["runs"] += 1
        words = np.array([_world_store["server"].port, _world_store["runs"]], np.int64)
    port, run = (int(v) for v in base.broadcast(words if base.rank == 0 else None, root=0))
    if base.rank == 0:
        store = _world_store["server"]
    else:
        if port not in _stores:
            _stores[port] = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=_timeout())
        store = _stores[port]
    return dist.PrefixStore(f"run{run}/", store)


def process_group(base, backend: str = "simdist"):
    """The process group of this run over ``base``'s ranks (the world of a
    ``World.run``), made at the first call of the run on every rank (as a
    factory is called): ``"simdist"`` (the simulator's own), ``"gloo"``
    (real Gloo) or ``"nccl"``. Destroyed when the run's function ends."""
    from simdist._worker import at_return

    if backend not in ("simdist", "gloo", "nccl"):
        raise InvalidValue(f"process_group: backend={backend!r}; expecting 'simdist', 'gloo' or 'nccl'")
    if _run:
        if _run["backend"] != backend:
            raise InvalidValue(f"process_group: this run's group is {_run['backend']!r}, not {backend!r}; "
                               f"a run has one")
        return _run["group"]
    if dist.is_initialized():  # a group the program made itself, and left: not this run's
        dist.destroy_process_group()
    # torch names the group after a count that destroying the last group
    # resets, unless that destroy failed on this rank (a broken Gloo group):
    # every rank starts from 0, or they wait for each other's keys for ever
    dist.distributed_c10d._world.group_count = 0
    if backend == "simdist":
        dist.init_process_group("simdist")
    else:
        store = _run_store(base)
        if backend == "gloo":
            _register_gloo()
        name = REAL_GLOO if backend == "gloo" else "nccl"
        if backend == "nccl":
            torch.cuda.set_device(base.rank % torch.cuda.device_count())
        dist.init_process_group(name, store=store, rank=base.rank, world_size=base.size, timeout=_timeout())
        # Gloo's rendezvous is no barrier: a rank done with it may end its
        # run and close its connections while a peer's are still being made
        base.barrier()
    at_return(_destroy)
    _run.update(group=dist.group.WORLD, backend=backend)
    return _run["group"]


def gloo(base) -> TorchCommunicator:
    """``simdist check --backend torch-gloo``: the contract over real Gloo."""
    return TorchCommunicator(base, process_group(base, "gloo"), backend="gloo")


gloo.extra_dtypes = ("bfloat16",)


def nccl(base) -> TorchCommunicator:
    """``simdist check --backend torch-nccl``: the contract over NCCL, CUDA tensors."""
    reason = unavailable("torch-nccl")
    if reason:
        raise InvalidValue(reason)
    group = process_group(base, "nccl")
    return TorchCommunicator(base, group, device=torch.device("cuda", torch.cuda.current_device()), backend="nccl")


nccl.extra_dtypes = ("bfloat16",)
