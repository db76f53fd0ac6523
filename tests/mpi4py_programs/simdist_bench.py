"""mpi4py's own benchmark module, ``mpi4py.bench`` (helloworld, ringtest),
run from a program: under `simdist run` it is the installed mpi4py's
module, unchanged, on the simulated MPI.

Origin: written for this project (mpi4py's `python -m mpi4py.bench`
commands, called through `mpi4py.bench.main`).
"""
# simdist-run: 1
# simdist-run: 4
# simdist-sub: on .*\.$ => on HOST.
# simdist-sub: = [0-9.e+-]+ seconds => = T seconds

from mpi4py import bench

for command in (["helloworld"], ["ringtest", "-n", "3", "-l", "2"]):
    try:
        bench.main(command)
    except SystemExit as exc:  # main() ends with parser.exit()
        assert exc.code in (None, 0), exc.code
