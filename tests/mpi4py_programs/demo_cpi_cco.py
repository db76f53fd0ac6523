#!/usr/bin/env python
"""
Parallel PI computation using Collective Communication Operations (CCO)
within Python objects exposing memory buffers (requires NumPy).

usage::

  $ mpiexec -n <nprocs> python cpi-buf.py
"""
# Calls: Comm.Bcast of an int64 array sent as [n, MPI.INT], Comm.Reduce with
# [buffer, MPI.DOUBLE] and op=MPI.SUM at root 0.
#
# Origin: mpi4py's demo/compute-pi/cpi-cco.py, https://github.com/mpi4py/mpi4py,
# BSD 3-clause licence, Copyright (c) Lisandro Dalcin (see README.md here).
# Adapted: the original reads the number of intervals from standard input on
# rank 0 until 0 is entered; here get_n() takes them from the list N_INPUTS
# (100, 1000, then 0), so the run needs no input. Everything else is as is.
#
# simdist-run: 2
# simdist-run: 4
# simdist-known-difference: n4 MPI leaves the order of a floating-point Reduce to the library: Open MPI's sum of the 4 partial sums differs from simdist's in the last bits (pi for 100 intervals: ...231271 under Open MPI, ...231262 under simdist)

from mpi4py import MPI
from math   import pi as PI
from numpy  import array

N_INPUTS = [100, 1000, 0]  # adapted: what a user would type, in order

def get_n():
    try:
        n = N_INPUTS.pop(0)  # adapted: was int(input(prompt))
        if n < 0: n = 0
    except:
        n = 0
    return n

def comp_pi(n, myrank=0, nprocs=1):
    h = 1.0 / n
    s = 0.0
    for i in range(myrank + 1, n + 1, nprocs):
        x = h * (i - 0.5)
        s += 4.0 / (1.0 + x**2)
    return s * h

def prn_pi(pi, PI):
    message = "pi is approximately %.16f, error is %.16f"
    print  (message % (pi, abs(pi - PI)))

comm = MPI.COMM_WORLD
nprocs = comm.Get_size()
myrank = comm.Get_rank()

n    = array(0, dtype=int)
pi   = array(0, dtype=float)
mypi = array(0, dtype=float)

while True:
    if myrank == 0:
        _n = get_n()
        n.fill(_n)
    comm.Bcast([n, MPI.INT], root=0)
    if n == 0:
        break
    _mypi = comp_pi(n, myrank, nprocs)
    mypi.fill(_mypi)
    comm.Reduce([mypi, MPI.DOUBLE], [pi, MPI.DOUBLE],
                op=MPI.SUM, root=0)
    if myrank == 0:
        prn_pi(pi, PI)
