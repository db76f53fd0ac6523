"""Error handlers of requests: the error of a receive completed by
Request.Wait, by MPI.Request.Waitall and by Message.Recv goes through the
handler of the receive's communicator (a user handler made with
Comm.Create_errhandler), once per call; ``mpi4py.rc.errors = "default"``
leaves MPI's own handler, MPI.ERRORS_ARE_FATAL, on the predefined
communicators and those made from them.

Origin: written for this project.
"""
# simdist-run: 2

import mpi4py

mpi4py.rc.errors = "default"

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

world = MPI.COMM_WORLD
rank = world.Get_rank()
print(f"rank {rank}: world fatal {world.Get_errhandler() == MPI.ERRORS_ARE_FATAL}, "
      f"self fatal {MPI.COMM_SELF.Get_errhandler() == MPI.ERRORS_ARE_FATAL}")
world.Set_errhandler(MPI.ERRORS_RETURN)
called = []
handler = MPI.Comm.Create_errhandler(lambda comm, code: called.append((comm.Get_name(), MPI.Get_error_class(code))))
comm = world.Dup()
comm.Set_name("dup")
comm.Set_errhandler(handler)


def truncated(complete, tags=(0,)):
    """The error class that ``complete`` raises on receives too small for
    rank 1's messages, and the handler's calls."""
    called.clear()
    error = None
    if rank == 0:
        requests = [comm.Irecv(np.zeros(2), 1, tag) for tag in tags]
        try:
            complete(requests)
        except MPI.Exception as exc:
            error = exc.Get_error_class()
        for request in requests:
            if request:
                request.Free()
    else:
        for tag in tags:
            comm.Send(np.ones(4), 0, tag)
    comm.Barrier()
    return error == MPI.ERR_TRUNCATE or error == MPI.ERR_IN_STATUS, list(called)


print(f"rank {rank}: Wait {truncated(lambda requests: requests[0].Wait())}")
print(f"rank {rank}: Waitall {truncated(MPI.Request.Waitall, tags=(1, 2))}")


def matched(requests):
    requests[0].Cancel()
    requests[0].Wait()
    comm.Mprobe(1, 0).Recv(np.zeros(2))


print(f"rank {rank}: Message.Recv {truncated(matched)}")
handler.Free()
comm.Free()
