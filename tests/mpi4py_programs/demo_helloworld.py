#!/bin/env python
"""
Parallel Hello World
"""
# Calls: COMM_WORLD.Get_rank, COMM_WORLD.Get_size, MPI.Get_processor_name.
#
# Origin: mpi4py's demo/helloworld.py, https://github.com/mpi4py/mpi4py,
# BSD 3-clause licence, Copyright (c) Lisandro Dalcin (see README.md here).
# Copied as is. The processor name (the host name) is normalised by the test.
#
# simdist-run: 4
# simdist-sub: on .*\.$ => on HOST.

from mpi4py import MPI
import sys

hwmess = "Hello, World! I am process %d of %d on %s.\n"
myrank = MPI.COMM_WORLD.Get_rank()
nprocs = MPI.COMM_WORLD.Get_size()
procnm = MPI.Get_processor_name()
sys.stdout.write(hwmess % (myrank, nprocs, procnm))
