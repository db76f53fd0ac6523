"""Partitioned point to point (MPI 4.0): Psend_init and Precv_init around a
ring, partitions marked ready one by one, by range and by list, Parrived
polled until each partition is in, the requests started three times and
freed; a standard message with the same tag on the same communicator is
received apart from the partitioned one.

Origin: written for this project (mpi4py's test_p2p_buf_part.py tests the
same calls).
"""
# simdist-run: 2
# simdist-run: 3

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
dest, source = (rank + 1) % size, (rank - 1) % size
partitions = 4
send = np.zeros(2 * partitions, dtype="i")
got = np.full(2 * partitions, -1, dtype="i")
sreq = comm.Psend_init(send, partitions, dest, tag=7)
rreq = comm.Precv_init(got, partitions, source, tag=7)
for round_ in range(3):
    send[:] = 100 * rank + 10 * round_ + np.arange(2 * partitions)
    rreq.Start()
    comm.Barrier()
    sreq.Start()
    if round_ == 0:
        for partition in range(partitions):
            sreq.Pready(partition)
    elif round_ == 1:
        sreq.Pready_range(0, 1)
        sreq.Pready_range(2, partitions - 1)
    else:
        sreq.Pready_list([3, 1])
        sreq.Pready_list([0, 2])
    for partition in range(partitions):
        while not rreq.Parrived(partition):
            pass
    MPI.Request.Waitall([sreq, rreq])
    print(f"rank {rank} round {round_}: got {got.tolist()} inactive {sreq != MPI.REQUEST_NULL}")
    comm.Barrier()

plain = np.zeros(1, dtype="i")
normal = comm.Isend(np.array([rank], dtype="i"), dest, tag=7)
rreq.Start()
sreq.Start()
sreq.Pready_range(0, partitions - 1)
comm.Recv(plain, source, tag=7)
MPI.Request.Waitall([normal, sreq, rreq])
print(f"rank {rank}: standard message {plain.tolist()} partitioned {got[:2].tolist()}")
sreq.Free()
rreq.Free()
print(f"rank {rank}: freed {sreq == MPI.REQUEST_NULL and rreq == MPI.REQUEST_NULL}")
