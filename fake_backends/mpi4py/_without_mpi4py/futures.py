"""``mpi4py.futures`` when the real mpi4py is not installed: importing it raises
NotImplementedError naming it (with mpi4py installed, its own module runs
on the stand-in: ``fake_backends.mpi4py._pure_python``)."""

from fake_backends.mpi4py._errors import unsupported

raise unsupported(
    "mpi4py.futures (MPIPoolExecutor)",
    "it spawns processes; distribute the work with MPI.COMM_WORLD's scatter and gather instead",
)
