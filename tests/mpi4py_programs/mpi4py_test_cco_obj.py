"""mpi4py's own tests of the collectives on Python objects, run as a program:
barrier, bcast, gather, scatter, allgather, alltoall, reduce, allreduce,
scan, exscan with ops SUM, PROD, MAX, MIN, MAXLOC, MINLOC, REPLACE, NO_OP;
bad roots raising MPI.Exception with error class MPI.ERR_ROOT; each on
COMM_SELF, COMM_WORLD and their Dup (freed after each test); MPI.get_vendor
and MPI.Query_thread (for mpi4py's skip decorator).

Origin: the tests are mpi4py's test/test_cco_obj.py with its helper
test/mpiunittest.py (copied as is into mpi4py_test/, the first renamed
cco_obj.py so that pytest does not collect it; BSD 3-clause licence, see
README.md here). This runner was written for this project: mpi4py runs
the file with its own test/main.py, which prints timings; this runner prints
each test's outcome on each rank instead, and exits with status 1 if any
test failed (the tracebacks go to standard error).
"""
# simdist-run: 4

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi4py_test"))

from mpi4py import MPI  # noqa: E402

import cco_obj  # noqa: E402  (mpi4py's test/test_cco_obj.py)


class Outcomes(unittest.TestResult):
    """Remembers each test's outcome, in the order the tests ran."""

    def __init__(self):
        super().__init__()
        self.outcomes = []

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes.append((test.id(), "ok"))

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.outcomes.append((test.id(), "FAIL"))

    def addError(self, test, err):
        super().addError(test, err)
        self.outcomes.append((test.id(), "ERROR"))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes.append((test.id(), f"skipped {reason!r}"))


rank = MPI.COMM_WORLD.Get_rank()
suite = unittest.defaultTestLoader.loadTestsFromModule(cco_obj)
result = Outcomes()
suite.run(result)
for name, outcome in result.outcomes:
    print(f"rank {rank}: {name} ... {outcome}")
for test, trace in result.failures + result.errors:
    print(f"rank {rank}: {test.id()}\n{trace}", file=sys.stderr)
print(f"rank {rank}: ran {result.testsRun}, failures {len(result.failures)}, "
      f"errors {len(result.errors)}, skipped {len(result.skipped)}")
sys.stdout.flush()
MPI.COMM_WORLD.Barrier()
sys.exit(0 if result.wasSuccessful() else 1)
