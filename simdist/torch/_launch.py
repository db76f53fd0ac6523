"""Joining a simulated world from torch.distributed.

In a simulator rank (a function of ``World.run``, a script of ``simdist
run``) the ``simdist`` backend is the rank's own world; nothing needs
starting. As soon as the program imports ``torch.distributed``, ``_hook``
(armed as the rank starts) calls ``attach``:

- the backend ``"simdist"`` is registered (``create`` makes its groups);
- ``"gloo"`` (asked for by name, as ``"cpu:gloo"``, or by default) makes a
  ``simdist`` group too, so unmodified Gloo programs run on the simulator;
- ``env://`` rendezvous (``init_process_group``'s default) takes the rank
  and size of the simulated world and a ``FileStore`` over a memfd of rank
  0's, whose ``/proc`` path rank 0 sends through the world itself: no
  ``MASTER_ADDR``/``MASTER_PORT`` needs to be free or set, and no file is
  left behind. (torch's ``TCPStore`` took 5 s to connect in about one start
  of twenty on the project's machine, with or without simdist.)

A group's communicator is made by its members alone (``Create_group``), as
c10d asks only the members of a new group to make their backend.
"""

from __future__ import annotations

import importlib
import os
import zlib
from datetime import timedelta

from .._signature import TORCH_GROUP
from . import BACKEND

#: Seconds without progress before a hosted world reports a hang (``World``'s default).
DEFAULT_TIMEOUT = 60.0

#: What torchrun sets in every rank, beside the rank and size.
_TORCHRUN_ENV = {"GROUP_RANK": "0", "ROLE_NAME": "default", "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "29500", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
                 "TORCHELASTIC_RUN_ID": "simdist"}
NOT_SIMULATED = (
    "the simdist backend of torch.distributed runs on simdist's simulated ranks: start the program with "
    "`simdist run -n N script.py` (or `-m module`), call init_process_group inside a function run by "
    "simdist.World(n).run(fn), or under a launcher that gives every rank its rank, the size and a store "
    "(torchrun, torch.multiprocessing.spawn)")


#: What differs from rank to rank (set whatever the launcher's environment holds).
RANK_KEYS = frozenset(("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE"))


def require_torch() -> None:
    """Raise an ImportError that says how to install torch, if it is missing."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise ImportError("simdist.torch needs PyTorch, an optional dependency: pip install 'simdist[torch]' "
                          "(from a clone: pip install -e \".[torch]\")") from exc


def torchrun_env(rank: int, size: int) -> dict[str, str]:
    """The environment torchrun gives rank ``rank`` of ``size`` on one node."""
    env = dict(_TORCHRUN_ENV, RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(rank),
               LOCAL_WORLD_SIZE=str(size), ROLE_RANK=str(rank), ROLE_WORLD_SIZE=str(size))
    if size > 1:
        env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun: one thread a rank unless told
    return env


def simulated_mpi(options=None):
    """The simulated MPI of this rank (installed for the run if it is not).

    Outside a simulator rank, the process joins a hosted world (``_join``)
    when c10d makes its default group (``options``): the launcher started
    the ranks and gave each its rank, the size and a store."""
    from fake_backends.mpi4py import _runtime

    if _runtime.current is None:
        from simdist import _worker

        if _worker._current is None and options is not None:
            _worker._current = _join(options)
        if _worker._current is None or getattr(_worker._current, "transport", None) is None:
            raise RuntimeError(NOT_SIMULATED)
        from fake_backends.mpi4py._install import for_current_run

        for_current_run()
    from fake_backends.mpi4py import MPI

    return MPI


#: The store's key under which rank 0 says where the hosted world is.
_WORLD_KEY = "simdist/hosted-world"


def _join(options):
    """This process's SimComm of a world hosted for the launcher's ranks
    (``simdist.sim._hosted``): rank 0 starts the host and puts where it is
    in the store, the others read it there."""
    from simdist.sim import _hosted

    rank, size = options.group_rank, options.group_size
    if list(options.global_ranks_in_group) not in ([], list(range(size))):
        raise RuntimeError(f"rank {rank}: the simdist backend's first group must be the whole world "
                           f"(init_process_group), not ranks {list(options.global_ranks_in_group)}")
    if rank == 0:
        hosted = _hosted.start(size, hang_timeout(options.timeout))
        options.store.set(_WORLD_KEY, hosted.dumps())
    else:
        hosted = _hosted.Hosted.loads(bytes(options.store.get(_WORLD_KEY)))
    return _hosted.join(hosted, rank)


def hang_timeout(timeout: timedelta) -> float:
    """Seconds a hosted world waits before it reports a hang: the group's
    timeout when the program chose one, else simdist's default (torch's
    default of 30 minutes is too long for a hang that can be found now)."""
    from torch.distributed.constants import default_pg_timeout

    env = os.environ.get("SIMDIST_TIMEOUT")
    if env:
        return float(env)
    return DEFAULT_TIMEOUT if timeout == default_pg_timeout else timeout.total_seconds()


def create(options, backend_options=None):
    """c10d's creator of a ``simdist`` group (``extended_api``): the members'
    communicator, made by the members alone."""
    from ._backend import SimdistGroup

    MPI = simulated_mpi(options)
    world = MPI.COMM_WORLD
    ranks = list(options.global_ranks_in_group) or list(range(options.group_size))
    if len(ranks) != options.group_size or max(ranks) >= world.Get_size():
        raise RuntimeError(
            f"rank {world.Get_rank()}: torch.distributed asks for a group of ranks {ranks} (size "
            f"{options.group_size}) but the simulated world has {world.Get_size()} ranks; start as many "
            f"ranks as the program's world size")
    name = str(options.group_id)
    if ranks == list(range(world.Get_size())):  # every rank makes it: the simulator's own collectives
        comm = world.Dup()
    else:
        group = world.Get_group().Incl(ranks)
        comm = world.Create_group(group, tag=zlib.crc32(name.encode()) & 0xFFFFF)
        group.Free()
    comm.Set_name(f"{TORCH_GROUP}{name}" + ("" if len(ranks) == world.Get_size() else f" of ranks {ranks}"))
    return SimdistGroup(comm, MPI, name)


def _rendezvous(url: str, timeout: timedelta = timedelta(minutes=30), **kwargs):
    """``env://`` in a simulated rank: the world's rank and size, and a store
    over rank 0's memfd (see the module docstring)."""
    from urllib.parse import parse_qs, urlparse

    import torch.distributed as dist

    world = simulated_mpi().COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    asked = {k: int(v[0]) for k, v in parse_qs(urlparse(url).query).items() if k in ("rank", "world_size")}
    for key, have in (("rank", rank), ("world_size", size)):
        if asked.get(key, -1) not in (-1, have):
            raise ValueError(f"rank {rank}: init_process_group was given {key}={asked[key]}, but this is rank "
                             f"{rank} of a simulated world of {size}; start as many ranks as the program's "
                             f"world size")
    path = world.bcast(_store_path() if rank == 0 else None, root=0)
    from simdist._worker import at_return

    at_return(_forget_groups)
    yield dist.FileStore(path, size), rank, size
    raise RuntimeError("a simulated world cannot rendezvous again")


def _forget_groups(returned: bool) -> None:
    """The run's function ended: its process groups go, as at the end of a
    process (a later run may make them again)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


#: Rank 0's memfd under the current run's store (see _store_path).
_store_fd = -1


def _store_path() -> str:
    """A new store's file, for rank 0 to send the others: a memfd of this
    process, which every rank opens through /proc. It has no name to leave
    behind; it stays open until the next run's store replaces it (the other
    ranks may still let go of theirs after this rank's run has ended) or
    the process ends."""
    global _store_fd
    if _store_fd >= 0:
        os.close(_store_fd)
    _store_fd = os.memfd_create("simdist-torch-store")
    return f"/proc/{os.getpid()}/fd/{_store_fd}"


#: Set (to 1) in a launcher's environment: Gloo's name gives the simdist
#: backend in every process, as in a simulator rank.
GLOO_VARIABLE = "SIMDIST_GLOO"


def attach(dist, simulated: bool = True) -> None:
    """Register the backend in an imported torch.distributed; Gloo's name
    too in a simulator rank (``simulated``) or under ``SIMDIST_GLOO=1``, and
    the ``env://`` rendezvous in a simulator rank."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, create, extended_api=True, devices=["cpu"])
    if simulated or os.environ.get(GLOO_VARIABLE, "0") not in ("", "0"):
        _take_gloos_name(dist)
    if simulated:
        handlers = importlib.import_module("torch.distributed.rendezvous")._rendezvous_handlers  # register_rendezvous_handler refuses to replace one
        if handlers["env"] is not _rendezvous:
            handlers["env"] = _rendezvous


def _take_gloos_name(dist) -> None:
    plugin = dist.Backend._plugins[BACKEND.upper()]
    dist.Backend._plugins["GLOO"] = plugin  # c10d looks its backends' creators up here
    # and would take a group of type GLOO for a ProcessGroupGloo (DDP's logger casts it so)
    dist.Backend.backend_type_map["gloo"] = dist.ProcessGroup.BackendType.CUSTOM
