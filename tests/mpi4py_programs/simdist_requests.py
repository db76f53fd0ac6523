"""Requests: Comm.Isend/Irecv with Request.Wait (and its Status),
Request.Test in a loop, MPI.Request.Waitall, MPI.Request.Waitany,
Comm.isend/irecv with Request.wait and MPI.Request.waitall, Irecv from
MPI.ANY_SOURCE with a Status, and receives from MPI.PROC_NULL.

Origin: written for this project. Every receive from ANY_SOURCE has one
possible sender, so what is printed does not depend on timing.
"""
# simdist-run: 4

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
right, left = (rank + 1) % size, (rank - 1) % size

# Isend/Irecv around the ring, completed one by one
out = np.full(4, rank, dtype='i')
into = np.zeros(4, dtype='i')
rreq = comm.Irecv(into, source=left, tag=1)
sreq = comm.Isend(out, dest=right, tag=1)
status = MPI.Status()
rreq.Wait(status)
sreq.Wait()
print(f"rank {rank}: Wait got {into.tolist()} from {status.Get_source()} tag {status.Get_tag()} "
      f"count {status.Get_count(MPI.INT)}")

# Test until done
into[:] = 0
rreq = comm.Irecv([into, MPI.INT], source=left, tag=2)
sreq = comm.Isend([out * 2, MPI.INT], dest=right, tag=2)
while not rreq.Test():
    pass
sreq.Wait()
print(f"rank {rank}: Test got {into.tolist()}")

# Waitall and Waitany
bufs = [np.zeros(2, dtype='d') for _ in range(2)]
reqs = [comm.Irecv(bufs[0], source=left, tag=3), comm.Irecv(bufs[1], source=right, tag=4)]
sends = [comm.Isend(np.array([rank, 3.0]), dest=right, tag=3),
         comm.Isend(np.array([rank, 4.0]), dest=left, tag=4)]
done = set()
while len(done) < 2:
    index = MPI.Request.Waitany(reqs)
    done.add(index)
MPI.Request.Waitall(sends)
print(f"rank {rank}: Waitany completed {sorted(done)}: {bufs[0].tolist()} {bufs[1].tolist()}")
print(f"rank {rank}: Waitany on inactive requests gives UNDEFINED: {MPI.Request.Waitany(reqs) == MPI.UNDEFINED}")

# lowercase non-blocking with pickled objects
reqs = [comm.isend({"from": rank, "to": right}, dest=right, tag=5), comm.irecv(source=left, tag=5)]
_, obj = MPI.Request.waitall(reqs)
print(f"rank {rank}: waitall got {obj}")
req = comm.irecv(source=left, tag=6)
comm.send(("hello", rank), dest=right, tag=6)
print(f"rank {rank}: wait got {req.wait()}")

# ANY_SOURCE with a single possible sender: rank 0 sends to the last rank
if rank == 0:
    comm.Send(np.array([7, 8, 9], dtype='i'), dest=size - 1, tag=42)
if rank == size - 1:
    buf = np.zeros(3, dtype='i')
    status = MPI.Status()
    comm.Irecv(buf, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG).Wait(status)
    print(f"rank {rank}: ANY_SOURCE got {buf.tolist()} from {status.Get_source()} tag {status.Get_tag()}")

# PROC_NULL: completes at once, nothing received
status = MPI.Status()
buf = np.full(2, 5, dtype='i')
comm.Recv(buf, source=MPI.PROC_NULL, status=status)
comm.Send(buf, dest=MPI.PROC_NULL)
print(f"rank {rank}: PROC_NULL recv left {buf.tolist()}, source is PROC_NULL "
      f"{status.Get_source() == MPI.PROC_NULL}, tag is ANY_TAG {status.Get_tag() == MPI.ANY_TAG}, "
      f"count {status.Get_count(MPI.INT)}")
print(f"rank {rank}: recv from PROC_NULL gives {comm.recv(source=MPI.PROC_NULL)}")
comm.Barrier()
