"""``mpi4py.futures`` is not simulated: importing it raises NotImplementedError."""

from fake_backends.mpi4py._errors import unsupported

raise unsupported(
    "mpi4py.futures (MPIPoolExecutor)",
    "it spawns processes; distribute the work with MPI.COMM_WORLD's scatter and gather instead",
)
