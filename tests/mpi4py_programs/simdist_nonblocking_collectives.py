"""Nonblocking and persistent collectives: Ibarrier, Ibcast, Igather(v),
Iscatter(v), Iallgather(v), Ialltoall(v/w), Ireduce, Iallreduce,
Ireduce_scatter(_block), Iscan, Iexscan, completed in reverse call order
with Waitall, Waitany and Test loops, mixed with point-to-point requests;
Allreduce_init, Bcast_init and Gather_init started three times each, and
the state of a completed persistent request.

Origin: written for this project. Integer data only, so the output does
not depend on the order in which a library folds a reduction.
"""
# simdist-run: 1
# simdist-run: 2
# simdist-run: 3
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
counts = list(range(1, size + 1))
displs = [sum(counts[:j]) for j in range(size)]
ones, order = [1] * size, list(range(size))
mine = np.full(rank + 1, rank, dtype="i")

out = {name: np.full(n, -1, dtype="i") for name, n in [
    ("bcast", 3), ("gather", size), ("gatherv", sum(counts)), ("scatter", 2), ("scatterv", rank + 1),
    ("allgather", size), ("allgatherv", sum(counts)), ("alltoall", size), ("alltoallv", size),
    ("alltoallw", size), ("reduce", 2), ("allreduce", 2), ("rsb", 1), ("rs", rank + 1), ("scan", 1),
    ("exscan", 1)]}
if rank == 0:
    out["bcast"][:] = [7, 8, 9]
keep = []  # the send buffers must outlive their requests


def sent(values, dtype="i"):
    keep.append(np.array(values, dtype=dtype))
    return keep[-1]


requests = [
    comm.Ibarrier(),
    comm.Ibcast(out["bcast"], root=0),
    comm.Igather(sent([rank * 10]), out["gather"], root=size - 1),
    comm.Igatherv(mine, [out["gatherv"], counts, displs, MPI.INT], root=0),
    comm.Iscatter(sent(np.arange(2 * size) * 3), out["scatter"], root=0),
    comm.Iscatterv([sent(np.arange(sum(counts))), counts, displs, MPI.INT], out["scatterv"], root=size - 1),
    comm.Iallgather(sent([rank + 100]), out["allgather"]),
    comm.Iallgatherv(mine, [out["allgatherv"], counts, displs, MPI.INT]),
    comm.Ialltoall(sent(np.arange(size) + 10 * rank), out["alltoall"]),
    comm.Ialltoallv([sent(np.arange(size) + 20 * rank), ones, order, MPI.INT],
                    [out["alltoallv"], ones, order, MPI.INT]),
    comm.Ialltoallw([sent(np.arange(size) + 30 * rank), ones, [4 * j for j in order], [MPI.INT] * size],
                    [out["alltoallw"], ones, [4 * j for j in order], [MPI.INT] * size]),
    comm.Ireduce(sent([rank, 1]), out["reduce"], op=MPI.SUM, root=0),
    comm.Iallreduce(sent([rank, -rank]), out["allreduce"], op=MPI.MAX),
    comm.Ireduce_scatter_block(sent(np.arange(size) * (rank + 1)), out["rsb"]),
    comm.Ireduce_scatter(sent(np.arange(sum(counts))), out["rs"], counts),
    comm.Iscan(sent([rank + 1]), out["scan"]),
    comm.Iexscan(sent([rank + 1]), out["exscan"], op=MPI.PROD),
]
for req in reversed(requests[9:]):
    req.Wait()
while not requests[8].Test():
    pass
box = np.zeros(1, dtype="i")
mixed = requests[:8] + [comm.Irecv(box, source=(rank - 1) % size, tag=3),
                        comm.Isend(sent([rank]), dest=(rank + 1) % size, tag=3)]
while MPI.Request.Waitany(mixed) != MPI.UNDEFINED:
    pass
for name, values in out.items():
    print(f"rank {rank}: {name} {values.tolist()}")
print(f"rank {rank}: ring {box.tolist()}")

send, total = np.zeros(2, dtype="i"), np.zeros(2, dtype="i")
gathered = np.zeros(size, dtype="i")
persistent = [comm.Allreduce_init(send, total), comm.Bcast_init(send, root=size - 1),
              comm.Gather_init(send[:1], gathered, root=0)]
for step in range(3):
    send[:] = [step + rank, step * rank]
    for req in persistent:
        req.Start()
        req.Wait()
    print(f"rank {rank}: step {step} total {total.tolist()} bcast {send.tolist()} gathered {gathered.tolist()}")
print(f"rank {rank}: persistent inactive {persistent[0] != MPI.REQUEST_NULL} {persistent[0].Test()}")
for req in persistent:
    req.Free()
print(f"rank {rank}: freed {all(req == MPI.REQUEST_NULL for req in persistent)}")
