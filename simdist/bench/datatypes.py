"""What does a derived datatype cost the mpi4py stand-in, against Open MPI?

``mpi4py.util.dtlib`` converts numpy dtypes to MPI datatypes and back with
the constructors and queries of ``MPI.Datatype`` (``Dup``,
``Create_struct``, ``Create_resized``, ``Create_subarray``, ``decode``,
``combiner``, ``is_predefined``, ``extent``, ``Free``); mpi4py's
test_util_dtlib.py makes some 300,000 such round trips. This times
``cycles`` constructor-and-query cycles of each kind below on the
stand-in's MPI (in this process: datatype calls need no simulated run) and
on mpi4py's own over Open MPI when mpi4py is installed (under ``mpiexec -n 1``), the two taking turns round after round;
a figure is the best round's CPU time per cycle, in microseconds, so that
other jobs on the machine inflate it least. Both run mpi4py's own dtlib
source, unmodified.

Usage: ``python -m simdist.bench.datatypes [cycles] [rounds]`` (default
``2000 5``): one JSON line per implementation, then a table.

Recorded on 2026-11-27 (``500 3``; 2 vCPUs shared with other jobs, load 8
to 12), before (simdist ``5c56e23``) and after the queries read the type
map directly; Open MPI 5.0.11's from the same runs::

    cycle                          before     after  Open MPI  after/OMPI
    dtlib round trip i,f,d         294 us    156 us   32.4 us     4.8
    dtlib round trip (3,5)h,(3,)c  498 us    174 us   40.2 us     4.3
    dtlib round trip nested        885 us    388 us    102 us     3.8
    Dup + Free                    9.49 us   5.08 us   0.33 us      15
    Create_struct + Free          45.8 us   11.7 us   0.68 us      17
    decode + Free                 8.45 us   4.19 us   1.00 us     4.2
    5 queries                     7.11 us   0.86 us   0.29 us     3.0
    Create_subarray 3-d + Free   19094 us   10.9 us   0.88 us      12

What changed: a query (``combiner``, ``extent``, ``is_predefined``, ...)
reads the type map instead of making the guarded call (an error still
goes through the handler); a contiguous, vector, subarray or darray type
gets its bounds from its grid's corners without listing its elements;
``decode`` makes one handle per datatype (it made two for one, and leaked
the second); ``Free`` and ``Dup`` skip empty attribute tables. A round
trip makes 313 calls into the stand-in, against 929. mpi4py's
test_util_dtlib.py at 1 rank took 486 s before (load 4 to 10); after, 125 s
(65 s of CPU) against 68 s (33 s of CPU) under ``mpiexec -n 1`` right after.
What remains is a call's cost: a few Python functions each (the error
handler's guard, the handle objects), where Open MPI runs C; without the
guard a round trip takes a fifth less.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import types

import numpy as np

#: numpy dtypes whose round trip (from_numpy_dtype, to_numpy_dtype, Free) is timed, by name.
ROUND_TRIPS = {
    "struct i,f,d": "i,f,d",
    "struct (3,5)h,(3,)c": "(3,5)h,(3,)c",
    "nested struct": [("f0", np.dtype("c,d", align=True)), ("f1", np.dtype("c,d", align=True))],
}


def dtlib_on(mpi):
    """mpi4py's ``mpi4py.util.dtlib`` (its source file, unmodified) on the
    module ``mpi``, as a module of its own; None without mpi4py."""
    found = importlib.util.find_spec("mpi4py")
    if found is None:
        return None
    host = f"_dtlib_on_{id(mpi)}"
    package, util = types.ModuleType(host), types.ModuleType(f"{host}.util")
    package.__path__, util.__path__, package.MPI = [], [], mpi
    sys.modules.update({host: package, f"{host}.util": util})
    try:
        path = os.path.join(found.submodule_search_locations[0], "util", "dtlib.py")
        spec = importlib.util.spec_from_file_location(f"{host}.util.dtlib", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name in (f"{host}.util", host):
            sys.modules.pop(name)
    return module


def cases(mpi, dtlib) -> dict:
    """Name -> one cycle (a function of no argument) on the module ``mpi``."""

    def round_trip(spec):
        dtype = np.dtype(spec, align=True)

        def cycle():
            datatype = dtlib.from_numpy_dtype(dtype)
            assert dtlib.to_numpy_dtype(datatype) == dtype
            datatype.Free()

        return cycle

    struct = mpi.Datatype.Create_struct([1, 1, 1], [0, 4, 8], [mpi.INT, mpi.FLOAT, mpi.DOUBLE])

    def dup_free():
        mpi.INT.Dup().Free()

    def struct_free():
        mpi.Datatype.Create_struct([1, 1, 1], [0, 4, 8], [mpi.INT, mpi.FLOAT, mpi.DOUBLE]).Free()

    def decode_free():
        for datatype in struct.decode()[2]["datatypes"]:
            if not datatype.is_predefined:
                datatype.Free()

    def queries():
        return struct.combiner, struct.is_predefined, struct.extent, struct.size, struct.lb

    def subarray_free():
        mpi.DOUBLE.Create_subarray([64, 64, 64], [32, 32, 32], [16, 16, 16]).Free()

    found = {name: round_trip(spec) for name, spec in ROUND_TRIPS.items()}
    found.update({"Dup + Free": dup_free, "Create_struct + Free": struct_free, "decode + Free": decode_free,
                  "5 queries": queries, "Create_subarray 3-d + Free": subarray_free})
    return found


def measure(mpi, cycles: int, rounds: int) -> dict:
    """Case -> best round's CPU microseconds per cycle, on the module ``mpi``."""
    found = cases(mpi, dtlib_on(mpi))
    best = dict.fromkeys(found, float("inf"))
    for _ in range(rounds):
        for case, cycle in found.items():
            start = time.process_time()
            for _ in range(cycles):
                cycle()
            best[case] = min(best[case], (time.process_time() - start) / cycles * 1e6)
    return best


def open_mpi(cycles: int) -> dict:
    """One round of ``measure`` on mpi4py's MPI under ``mpiexec -n 1`` (a
    singleton MPI process would leave Open MPI's shared memory behind)."""
    from ..mpi._driver import find_mpiexec
    from .mpi_side import mpiexec_command, run_mpiexec

    cmd = mpiexec_command(1, {"mpiexec": find_mpiexec(), "mpi_args": []})
    done = run_mpiexec(cmd + [sys.executable, "-m", "simdist.bench.datatypes", "--mpi4py", str(cycles)],
                       capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    if done.returncode:
        raise SystemExit(f"mpiexec -n 1 failed with exit status {done.returncode}:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(cycles: int, rounds: int) -> dict:
    """Implementation -> case -> best round's figure: the stand-in in this
    process and Open MPI under mpiexec (if mpi4py is installed), taking turns."""
    import fake_backends.mpi4py.MPI as standin

    best = {"simdist": {}}
    if importlib.util.find_spec("mpi4py") is not None:
        best["Open MPI"] = {}
    for _ in range(rounds):
        for name in best:
            figures = measure(standin, cycles, 1) if name == "simdist" else open_mpi(cycles)
            best[name] = {case: min(us, best[name].get(case, us)) for case, us in figures.items()}
    return best


def main(argv: list[str]) -> None:
    if argv[:1] == ["--mpi4py"]:  # the Open MPI side, under mpiexec
        from mpi4py import MPI

        print(json.dumps(measure(MPI, int(argv[1]), 1)))
        return
    cycles = int(argv[0]) if argv else 2000
    rounds = int(argv[1]) if len(argv) > 1 else 5
    best = compare(cycles, rounds)
    for name, figures in best.items():
        print(json.dumps({"implementation": name, "cycles": cycles, "rounds": rounds,
                          "us_per_cycle": {case: round(us, 2) for case, us in figures.items()}}))
    names = list(best)
    print(f"{'cycle':<28}" + "".join(f"{name:>12}" for name in names)
          + ("       ratio" if len(names) == 2 else ""))
    for case in best["simdist"]:
        row = [best[name][case] for name in names]
        ratio = f"{row[0] / row[1]:>12.2f}" if len(row) == 2 else ""
        print(f"{case:<28}" + "".join(f"{us:>9.2f} us" for us in row) + ratio)


if __name__ == "__main__":
    main(sys.argv[1:])
