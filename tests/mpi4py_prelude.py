"""The lines that every program of the groups and topology tests starts with."""

PRELUDE = """\
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def error_class(call):
    try:
        call()
    except MPI.Exception as exc:
        return exc.Get_error_class()
    raise AssertionError("no MPI.Exception")
"""
