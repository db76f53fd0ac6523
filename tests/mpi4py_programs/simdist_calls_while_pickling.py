"""Object collectives called again while an object of the same call is
pickled or unpickled: rank 0 drives the others, which wait in an event
loop for what it broadcasts, and a finalizer that the garbage collector
runs in the middle of a call tells them to free a remote object, by a
broadcast of its own. mpi4py pickles before it takes the communicator's
lock of the call and unpickles after it lets go, so the inner call goes
through, and its message comes first. Here the finalizer runs at fixed
points: when rank 0 pickles what it broadcasts (or scatters), and when
it unpickles its own copy; then the same across an intercommunicator
(rank 0 the root, with ``MPI.ROOT``, of the group of the others). As
pyMOR's MPI pool does (its objects' ``__del__`` broadcasts a remove
command to the event loops of the other ranks).

Origin: written for this project.
"""
# simdist-run: 1
# simdist-run: 2
# simdist-run: 3

from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()


def on_unpickling(name):
    if rank == 0:
        world.bcast(("free", f"{name}, unpickled"), root=0)  # the finalizer, while rank 0 unpickles
    return name


class Remote:
    """A handle whose pickling and unpickling, on rank 0, run a finalizer that calls bcast."""

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        world.bcast(("free", f"{self.name}, pickled"), root=0)  # only rank 0 pickles these
        return (on_unpickling, (self.name,))


if rank == 0:
    print("rank 0 bcast:", world.bcast(("run", Remote("a")), root=0))
    print("rank 0 scatter:", world.scatter([("run", Remote(f"b{r}")) for r in range(size)], root=0))
    world.bcast(("stop", None), root=0)
else:
    calls = 0
    while True:
        calls += 1  # 1-3: "a" pickled, the run, "a" unpickled; then each item pickled, the scatter
        command, what = world.scatter(None, root=0) if calls == 4 + size else world.bcast(None, root=0)
        print(f"rank {rank} call {calls}: {command} {what}")
        if command == "stop":
            break
if size > 1:
    local = world.Split(rank == 0, rank)
    inter = local.Create_intercomm(0, world, 1 if rank == 0 else 0)

    class RemoteAcross:
        """As Remote, across the intercommunicator: rank 0 is the root."""

        def __init__(self, name):
            self.name = name

        def __reduce__(self):
            inter.bcast(("free", f"{self.name}, pickled"), root=MPI.ROOT)
            return (str, (self.name,))

    if rank == 0:
        print("rank 0 inter bcast:", inter.bcast(("run", RemoteAcross("c")), root=MPI.ROOT))
        inter.bcast(("stop", None), root=MPI.ROOT)
    else:
        while True:
            command, what = inter.bcast(None, root=0)
            print(f"rank {rank} inter: {command} {what}")
            if command == "stop":
                break
    inter.Free()
    local.Free()
world.Barrier()
print(f"rank {rank}: done")
