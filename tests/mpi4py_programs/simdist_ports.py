"""Ports and joins: MPI.Open_port and Close_port, Intracomm.Accept and
Connect (the lower half of the ranks accepts, the upper half connects; then
the other way round), and Comm.Join over a connected socket between the
first and the last rank; on each intercommunicator, its sizes, an
allgather and a Bcast with MPI.ROOT.

Origin: written for this project (mpi4py's test_dynproc.py tests the same
calls).
"""
# simdist-run: 2
# simdist-run: 3
# simdist-run: 4

import socket

import numpy as np
from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
lower = rank < size // 2
half = world.Split(0 if lower else 1, rank)
first_upper = size // 2


def show(what, inter, sends):
    gathered = inter.allgather(rank)
    data = np.full(2, -1.0)
    root = (MPI.ROOT if inter.rank == 0 else MPI.PROC_NULL) if sends else 0
    inter.Bcast(np.array([rank, 0.5]) if root == MPI.ROOT else data, root)
    print(f"rank {rank}: {what}: size {inter.size} remote {inter.remote_size} rank {inter.rank} "
          f"allgather {gathered} Bcast {data.tolist() if not sends else 'sent'}")
    inter.Free()


for acceptors in ("lower", "upper"):
    accepting = lower == (acceptors == "lower")
    if accepting:
        port = MPI.Open_port() if half.rank == 0 else None
        if half.rank == 0:
            world.send(port, dest=first_upper if lower else 0, tag=5)
        inter = half.Accept(port, root=0)
        if half.rank == 0:
            MPI.Close_port(port)
    else:
        port = world.recv(source=0 if not lower else first_upper, tag=5) if half.rank == 0 else None
        inter = half.Connect(port, root=0)
    show(f"the {acceptors} half accepts", inter, sends=accepting)

if rank in (0, size - 1) and size > 1:
    if rank == 0:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        world.send(server.getsockname(), dest=size - 1, tag=6)
        peer, _ = server.accept()
        server.close()
    else:
        peer = socket.create_connection(world.recv(source=0, tag=6))
    joined = MPI.Comm.Join(peer.fileno())
    peer.close()
    show("Join", joined, sends=rank == 0)
half.Free()
