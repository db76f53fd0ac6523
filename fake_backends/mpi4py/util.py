"""``mpi4py.util`` (dtlib, pkl5, pool, sync) is not simulated: importing it
raises NotImplementedError naming it."""

from fake_backends.mpi4py._errors import unsupported

raise unsupported(
    "mpi4py.util (dtlib, pkl5, pool, sync)",
    "use the MPI module itself: numpy arrays with the predefined datatypes, the lowercase API for Python "
    "objects of any size, MPI.COMM_WORLD's collectives",
)
