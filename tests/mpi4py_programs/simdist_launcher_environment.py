"""What the launcher tells each rank through its environment: Open MPI's
mpiexec sets OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_RANK (libEnsemble
picks its MPI communications by them), the same on one host for the local
size; a spawned process sees its own world's.

Origin: written for this project.
"""
# simdist-run: 1
# simdist-run: 3
import os
import sys

from mpi4py import MPI

CHILD = """
import os
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
env = os.environ
print(f"spawned rank {MPI.COMM_WORLD.rank}: size {env.get('OMPI_COMM_WORLD_SIZE')} rank {env.get('OMPI_COMM_WORLD_RANK')} "
      f"local size {env.get('OMPI_COMM_WORLD_LOCAL_SIZE')}", flush=True)
parent.Barrier()
parent.Disconnect()
"""

world = MPI.COMM_WORLD
env = os.environ
print(f"rank {world.rank}: size {env.get('OMPI_COMM_WORLD_SIZE')} rank {env.get('OMPI_COMM_WORLD_RANK')} "
      f"local size {env.get('OMPI_COMM_WORLD_LOCAL_SIZE')} local rank in range "
      f"{0 <= int(env.get('OMPI_COMM_WORLD_LOCAL_RANK', -1)) < world.size}", flush=True)
children = world.Spawn(sys.executable, args=["-c", CHILD], maxprocs=2, root=0)
children.Barrier()
children.Disconnect()
