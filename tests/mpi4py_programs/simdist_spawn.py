"""Spawning processes: the ranks spawn copies of this program (Spawn on
COMM_WORLD, then Spawn_multiple with two commands from COMM_SELF of rank
0); the children learn their parents with Comm.Get_parent, their own
COMM_WORLD, MPI.APPNUM and their arguments, and both sides use the
intercommunicator: sizes, a Bcast from MPI.ROOT, a Reduce to it, an
allgather, Merge, then Disconnect, after which Get_parent is COMM_NULL.

Origin: written for this project (mpi4py's test_spawn.py tests the same
calls; mpi4py's demo/spawning computes pi this way).
"""
# simdist-run: 1
# simdist-run: 2
# simdist-run: 3
# simdist-options: --universe 9

import sys

import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD


def child(role):
    parent = MPI.Comm.Get_parent()
    assert parent != MPI.COMM_NULL and parent.Is_inter()
    n = np.zeros(1, "i")
    parent.Bcast(n, root=0)
    total = world.allreduce(world.rank)
    parent.Reduce(np.array([world.rank + 0.5]), None, op=MPI.SUM, root=0)
    parents = parent.allgather(("child", role, world.rank))
    merged = parent.Merge(high=True)
    print(f"child {role} {world.rank}/{world.size} appnum={world.Get_attr(MPI.APPNUM)} n={n[0]} "
          f"world-sum={total} parents={parents} merged={merged.rank}/{merged.size} args={sys.argv[1:]}")
    merged.Free()
    parent.Disconnect()
    assert parent == MPI.COMM_NULL and MPI.Comm.Get_parent() == MPI.COMM_NULL


def spawn(comm, label, commands):
    errcodes = []
    if len(commands) == 1:
        (argv, count), = commands
        inter = comm.Spawn(sys.executable, [__file__, *argv], count, root=0, errcodes=errcodes)
    else:
        inter = comm.Spawn_multiple([sys.executable] * len(commands), [[__file__, *a] for a, _ in commands],
                                    [c for _, c in commands], root=0, errcodes=errcodes)
    root = MPI.ROOT if inter.rank == 0 else MPI.PROC_NULL
    inter.Bcast(np.array([100 + inter.remote_size], "i"), root=root)
    got = np.zeros(1)
    inter.Reduce(None, got, op=MPI.SUM, root=root)
    children = inter.allgather(("parent", label, comm.rank))
    merged = inter.Merge(high=False)
    print(f"parent {label} {world.rank}: local={inter.size} remote={inter.remote_size} errcodes={errcodes} "
          f"reduced={got[0] if root == MPI.ROOT else None} children={children} merged={merged.rank}/{merged.size}")
    merged.Free()
    inter.Disconnect()


if len(sys.argv) > 1:
    child(sys.argv[1])
else:
    assert MPI.Comm.Get_parent() == MPI.COMM_NULL
    spawn(world, "world", [(["single", "x"], 2)])
    world.Barrier()
    if world.rank == 0:
        spawn(MPI.COMM_SELF, "self", [(["first"], 1), (["second", "y"], 2)])
    world.Barrier()
