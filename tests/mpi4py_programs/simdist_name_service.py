"""The name service: rank 0 opens a port and publishes it as a service
name (MPI.Publish_name); every other rank looks the name up
(MPI.Lookup_name) and connects through the port it finds, rank 0 accepts;
then the rules Open MPI follows: a second publication of a name keeps the
first port, another rank's Unpublish_name leaves the name, unpublishing
an unknown name raises nothing, a lookup of an unknown name raises ERR_NAME
at once, an empty service name is ERR_ARG, and after Unpublish_name the
name is gone for every rank.

Origin: written for this project (mpi4py's test_dynproc.py publishes and
looks up a name in one process).
"""
# simdist-run: 2
# simdist-run: 3
# simdist-run: 4

from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
SERVICE = "simdist-name-service-demo"


def error_of(call):
    """What ``call()`` raises: an MPI error class's name, a Python type, or 'nothing'."""
    try:
        call()
    except MPI.Exception as exc:
        return [name for name in ("ERR_NAME", "ERR_ARG", "ERR_SERVICE") if getattr(MPI, name) == exc.Get_error_class()]
    except (TypeError, ValueError) as exc:
        return type(exc).__name__
    return "nothing"


clients = world.Split(0 if rank == 0 else 1, rank)
if rank == 0:
    port = MPI.Open_port()
    MPI.Publish_name(SERVICE, port)
world.Barrier()
if rank == 0:
    inter = MPI.COMM_SELF.Accept(port)
else:
    found = MPI.Lookup_name(SERVICE)
    print(f"rank {rank}: looked up a port name: {isinstance(found, str) and len(found) > 0}")
    inter = clients.Connect(found, root=0)
print(f"rank {rank}: connected: size {inter.size} remote {inter.remote_size} allgather {inter.allgather(rank)}")
inter.Disconnect()
world.Barrier()

if rank == 0:
    MPI.Publish_name(SERVICE, "another-port")  # Open MPI keeps the first publication
    print(f"rank {rank}: published again: lookup gives the first port: {MPI.Lookup_name(SERVICE) == port}")
world.Barrier()
if rank == size - 1:
    print(f"rank {rank}: Unpublish_name of rank 0's name raises {error_of(lambda: MPI.Unpublish_name(SERVICE, 'x'))}")
world.Barrier()
print(f"rank {rank}: the name is still published: {world.bcast(port if rank == 0 else None) == MPI.Lookup_name(SERVICE)}")
print(f"rank {rank}: Lookup_name of an unknown name raises {error_of(lambda: MPI.Lookup_name('no-such-service'))}")
print(f"rank {rank}: Unpublish_name of an unknown name raises {error_of(lambda: MPI.Unpublish_name('no-such', 'x'))}")
print(f"rank {rank}: Publish_name of an empty name raises {error_of(lambda: MPI.Publish_name('', 'x'))}")
print(f"rank {rank}: Lookup_name(3) raises {error_of(lambda: MPI.Lookup_name(3))}")
world.Barrier()
if rank == 0:
    MPI.Unpublish_name(SERVICE, port)
    MPI.Close_port(port)
world.Barrier()
print(f"rank {rank}: after Unpublish_name, Lookup_name raises {error_of(lambda: MPI.Lookup_name(SERVICE))}")
clients.Free()
