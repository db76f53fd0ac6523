## mpiexec -n 2 python ex-2.08.py

# An exchange of messages

# Calls: Comm.Send and Comm.Recv of array.array('d') buffers as
# [buf, MPI.DOUBLE] with positional dest/source and tag and a Status;
# Status.source, .tag, .error, Status.Get_count(MPI.DOUBLE), MPI.SUCCESS.
#
# Origin: mpi4py's demo/mpi-ref-v1/ex-2.08.py (Example 2.8 of "MPI: The
# Complete Reference", vol. 1), https://github.com/mpi4py/mpi4py, BSD 3-clause
# licence, Copyright (c) Lisandro Dalcin (see README.md here). Copied as is;
# added: the print at the end.
#
# simdist-run: 2

# --------------------------------------------------------------------

from mpi4py import MPI
import array

if MPI.COMM_WORLD.Get_size() < 2:
    raise SystemExit

# --------------------------------------------------------------------

sendbuf = array.array('d', [0]*10)
recvbuf = array.array('d', [0]*10)
tag = 0
status = MPI.Status()

myrank = MPI.COMM_WORLD.Get_rank()

if myrank == 0:
    sendbuf[:] = array.array('d', range(len(sendbuf)))
    MPI.COMM_WORLD.Send([sendbuf, MPI.DOUBLE], 1, tag)
    MPI.COMM_WORLD.Recv([recvbuf, MPI.DOUBLE], 1, tag, status)
elif myrank == 1:
    MPI.COMM_WORLD.Recv([recvbuf, MPI.DOUBLE], 0, tag, status)
    sendbuf[:] = recvbuf
    MPI.COMM_WORLD.Send([sendbuf, MPI.DOUBLE], 0, tag)

# --------------------------------------------------------------------

if myrank == 0:
    assert status.source == 1
    assert status.tag == tag
    assert status.error == MPI.SUCCESS
    assert status.Get_count(MPI.DOUBLE) == len(recvbuf)
    assert sendbuf == recvbuf
elif myrank == 1:
    assert status.source == 0
    assert status.tag == tag
    assert status.error == MPI.SUCCESS
    assert status.Get_count(MPI.DOUBLE) == len(recvbuf)
    assert sendbuf == recvbuf

# --------------------------------------------------------------------

# added for simdist's comparison:
print("rank %d: source=%d tag=%d error=%d count=%d recvbuf=%s"
      % (myrank, status.source, status.tag, status.error,
         status.Get_count(MPI.DOUBLE), recvbuf.tolist()))
