# Calls: Comm.Barrier, Comm.Send/Recv of empty messages ([None, 'B']) to
# print in rank order, comm.rank, comm.size; sys.exit with a code on one rank
# (--sys-exit), an exception on one rank (--exception). It also checks how
# the script is started: __name__, sys.path[0] (the script's directory) and
# sys.argv[0] (the script's path).
#
# Origin: mpi4py's demo/test-run/run-script.py (the script its tests of
# `python -m mpi4py` run), https://github.com/mpi4py/mpi4py, BSD 3-clause
# licence, Copyright (c) Lisandro Dalcin (see README.md here). Copied as is.
# The test runs it by its absolute path, as __file__ is absolute. A rank
# that exits early leaves the others waiting in a Barrier, so under mpiexec
# those cases run as mpi4py's tests run them, with `python -m mpi4py`, which
# aborts the job with the rank's exit status.
#
# simdist-run: 4
# simdist-run-mpi4py: 2 --rank 1 --sys-exit 3 -> 3
# simdist-run-mpi4py: 4 --rank 0 --exception boom -> 1 "RuntimeError: boom"
# simdist-known-difference: n2 a rank's sys.exit(3) while the others wait in a Barrier ends simdist run with status 1 (CollectiveMismatch), not 3 as under python -m mpi4py

import os
import sys
import optparse
from mpi4py import MPI

assert __name__ == '__main__'
assert sys.path[0] == os.path.dirname(__file__)
if os.path.basename(__file__) == '__main__.py':
    assert sys.argv[0] == os.path.dirname(__file__)
else:
    assert sys.argv[0] == __file__

parser = optparse.OptionParser()
parser.add_option(
    "--rank", action='store', type='int',
    dest="rank", default=0,
)
parser.add_option(
    "--interrupt", action='store_true',
    dest="interrupt", default=False,
)
parser.add_option(
    "--sys-exit", action='store', type='int',
    dest="sys_exit", default=None,
)
parser.add_option(
    "--sys-exit-msg", action='store', type='string',
    dest="sys_exit", default=None,
)
parser.add_option(
    "--exception", action='store', type='string',
    dest="exception", default=None,
)
(options, args) = parser.parse_args()
assert not args

comm = MPI.COMM_WORLD

comm.Barrier()
comm.Barrier()
if comm.rank == options.rank:
    if options.interrupt:
        raise KeyboardInterrupt
    if options.sys_exit:
        sys.exit(options.sys_exit)
    if options.exception:
        raise RuntimeError(options.exception)

comm.Barrier()
comm.Barrier()
if comm.rank > 0:
    comm.Recv([None, 'B'], comm.rank - 1)
print("Hello, World!", flush=True)
if comm.rank < comm.size - 1:
    comm.Send([None, 'B'], comm.rank + 1)
comm.Barrier()

sys.exit()
