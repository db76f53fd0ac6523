"""``mpi4py.util`` (dtlib, pkl5, pool, sync) when the real mpi4py is not installed: importing it raises
NotImplementedError naming it (with mpi4py installed, its own module runs
on the stand-in: ``fake_backends.mpi4py._pure_python``)."""

from fake_backends.mpi4py._errors import unsupported

raise unsupported(
    "mpi4py.util (dtlib, pkl5, pool, sync)",
    "use the MPI module itself: numpy arrays with the predefined datatypes, the lowercase API for Python "
    "objects of any size, MPI.COMM_WORLD's collectives",
)
