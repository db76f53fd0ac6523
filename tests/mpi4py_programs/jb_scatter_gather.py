#!/usr/bin/env python
# Calls: Comm.Scatter and Comm.Allgather of [array, MPI.DOUBLE] (root
# defaults to 0), Comm.Barrier to print rank by rank, comm.size, comm.rank.
#
# Origin: Jörg Bornschein's mpi4py-examples, 03-scatter-gather, with the
# function pprint from its parutils.py, https://github.com/jbornschein/mpi4py-examples,
# MIT licence, Copyright (c) 2018 Jörg Bornschein (see README.md here).
# Adapted for Python 3: range instead of xrange; pprint copied into this file
# instead of `from parutils import pprint`.
#
# simdist-run: 4

from __future__ import division
from __future__ import print_function

import numpy as np
from mpi4py import MPI

# ---- from parutils.py
def pprint(str="", end="\n", comm=MPI.COMM_WORLD):
    """Print for MPI parallel programs: Only rank 0 prints *str*."""
    if comm.rank == 0:
        print(str+end, end=' ') 
# ----

comm = MPI.COMM_WORLD

pprint("-"*78)
pprint(" Running on %d cores" % comm.size)
pprint("-"*78)

my_N = 4
N = my_N * comm.size

if comm.rank == 0:
    A = np.arange(N, dtype=np.float64)
else:
    A = np.empty(N, dtype=np.float64)

my_A = np.empty(my_N, dtype=np.float64)

# Scatter data into my_A arrays
comm.Scatter( [A, MPI.DOUBLE], [my_A, MPI.DOUBLE] )

pprint("After Scatter:")
for r in range(comm.size):  # adapted: was xrange
    if comm.rank == r:
        print("[%d] %s" % (comm.rank, my_A))
    comm.Barrier()

# Everybody is multiplying by 2
my_A *= 2

# Allgather data into A again
comm.Allgather( [my_A, MPI.DOUBLE], [A, MPI.DOUBLE] )

pprint("After Allgather:")
for r in range(comm.size):  # adapted: was xrange
    if comm.rank == r:
        print("[%d] %s" % (comm.rank, A))
    comm.Barrier()
