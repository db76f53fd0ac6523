"""Messages left on a freed communicator: rank 0 Sends on a Split (and on
a Dup) a message that no rank receives, the communicator is Freed, and a
new one is made the same way; on the new one rank 1's Iprobe sees nothing
and its Recv gets the new message, not the old (issue 19: the simulator
gave the new communicator the old one's context and delivered 111.0).
The new communicator also has more members than the old one.

Origin: written for this project.
"""
# simdist-run: 2
# simdist-run: 3

from mpi4py import MPI
import numpy as np

world = MPI.COMM_WORLD
rank = world.Get_rank()


def check(how, make_old, make_new, sent):
    old = make_old()
    if old != MPI.COMM_NULL:
        if old.Get_rank() == 0:
            old.Send(np.array([sent]), dest=1, tag=7)  # simdist: allow[buffering,unreceived] (never received, on purpose)
        world.Barrier()
        old.Free()
    else:
        world.Barrier()
    new = make_new()
    pending = new.Iprobe(source=0, tag=7) if new.Get_rank() == 1 else None
    new.Barrier()
    if new.Get_rank() == 0:
        new.Send(np.array([sent + 111.0]), dest=1, tag=7)
    elif new.Get_rank() == 1:
        buf = np.zeros(1)
        new.Recv(buf, source=0, tag=7)
        print(f"{how}: rank {rank} probed {pending} before the send and received {buf[0]}")
    new.Free()


check("Split", lambda: world.Split(0, rank), lambda: world.Split(0, rank), 111.0)
check("Dup", world.Dup, world.Dup, 333.0)
check("Split of two, then of all", lambda: world.Split(0 if rank < 2 else MPI.UNDEFINED, rank),
      lambda: world.Split(0, rank), 555.0)
if rank == 0:
    print(sorted(world.recv(source=r, tag=9) for r in range(1, world.Get_size())))
else:
    world.send(f"rank {rank} done", dest=0, tag=9)
