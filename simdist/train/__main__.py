"""``python -m simdist.train``: ``simdist train``, also under an MPI launcher.

Under ``mpiexec -n N python -m simdist.train [options]`` every process is
one rank of the training (a World of the MPI backend joins the launcher's
job): ``--backend`` defaults to ``mpi`` and ``-n`` to the job's size, and
only rank 0 prints (the other ranks' standard output goes to /dev/null;
their errors still reach standard error). Elsewhere it is ``simdist train``.
"""

import os
import sys

from ..cli import main
from ..mpi._spmd import launched, program_comm


def _arguments(argv: list[str]) -> list[str]:
    """``argv`` with the launched job's defaults; the job's stdout on rank 0 only."""
    if launched() is None:
        return argv
    comm = program_comm()
    if comm.rank != 0:
        sys.stdout = open(os.devnull, "w")
    given = {a.split("=")[0] for a in argv}
    defaults = [] if given & {"-n", "--size"} else ["-n", str(comm.size)]
    defaults += [] if "--backend" in given else ["--backend", "mpi"]
    return defaults + argv


sys.exit(main(["train", *_arguments(sys.argv[1:])]))
