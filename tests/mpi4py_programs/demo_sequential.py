# Calls: Comm.Send and Comm.Recv of empty messages ([None, 'B']) with a tag,
# passing a token around the ranks so that they print in turn; Get_processor_name.
#
# Origin: mpi4py's demo/sequential/seq.py (the class Seq) and
# demo/sequential/test_seq.py (the function test), https://github.com/mpi4py/mpi4py,
# BSD 3-clause licence, Copyright (c) Lisandro Dalcin (see README.md here).
# Both copied as is into one file (test_seq.py imports seq from its directory;
# the `#mpi4py.rc.profile("mpe")` comment line is left out). The processor
# name is normalised by the test.
#
# simdist-run: 4
# simdist-sub: on .*\.$ => on HOST.

class Seq:

    """
    Sequential execution
    """

    def __init__(self, comm, ng=1, tag=0):
        ng = int(ng)
        tag = int(tag)
        assert ng >= 1
        assert ng <= comm.Get_size()
        self.comm = comm
        self.ng = ng
        self.tag = tag

    def __enter__(self):
        self.begin()
        return self

    def __exit__(self, *exc):
        self.end()
        return None

    def begin(self):
        """
        Begin a sequential execution of a section of code
        """
        comm = self.comm
        size = comm.Get_size()
        if size == 1: return
        rank = comm.Get_rank()
        ng = self.ng
        tag = self.tag
        if rank != 0:
            comm.Recv([None, 'B'], rank - 1, tag)
        if rank != (size - 1) and (rank % ng) < (ng - 1):
            comm.Send([None, 'B'], rank + 1, tag)

    def end(self):
        """
        End a sequential execution of a section of code
        """
        comm = self.comm
        size = comm.Get_size()
        if size == 1: return
        rank = comm.Get_rank()
        ng = self.ng
        tag = self.tag
        if rank == (size - 1) or (rank % ng) == (ng - 1):
            comm.Send([None, 'B'], (rank + 1) % size, tag)
        if rank == 0:
            comm.Recv([None, 'B'], size - 1, tag)


# ---- demo/sequential/test_seq.py
from mpi4py import MPI

import unittest

def test():
    size = MPI.COMM_WORLD.Get_size()
    rank = MPI.COMM_WORLD.Get_rank()
    name = MPI.Get_processor_name()
    with Seq(MPI.COMM_WORLD, 1, 10):
        print(
            "Hello, World! I am process %d of %d on %s."
            % (rank, size, name))

if __name__ == "__main__":
    test()
