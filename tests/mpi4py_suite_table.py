"""Run an mpi4py test suite file by file under `mpiexec` and `simdist run`, and compare.

    python tests/mpi4py_suite_table.py SUITE_DIR [--sizes 1-4] [--files test_a.py,test_b.py]
        [--launchers mpiexec,simdist] [--timeout 600] [--json results.json] [--resume]
        [--pytest-args "--with-mpi"]

SUITE_DIR is a copy of mpi4py's ``test/`` folder (from its source
distribution: ``pip download --no-binary :all: --no-deps mpi4py``), which
the runs may write in. Every file runs at every size under each launcher
(``mpiexec --oversubscribe -n N python -m pytest -q FILE`` and
``simdist run -n N -m pytest -q FILE``), with a small pytest plugin that
writes each rank's outcome of every test. The script prints one line per
run as it goes, then a Markdown table: per file, the tests passed under each
launcher at each size (``a/b`` where the ranks differ, ``hang`` for a run
stopped at the timeout, ``error`` for a run that reported no test), and the
tests that pass under mpiexec but not under simdist, with their outcome
there. ``--json`` keeps every outcome; ``--resume`` reuses the runs a
previous ``--json`` file holds (so mpiexec's can be measured once).
``--pytest-args`` adds options to every pytest command line, for a library's
suite that needs them (pylops-mpi's needs pytest-mpi's ``--with-mpi``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGIN = '''
import json, os

_outcomes = {}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        if report.nodeid not in _outcomes or report.outcome != "passed":
            _outcomes[report.nodeid] = report.outcome


def pytest_sessionfinish(session):
    from mpi4py import MPI

    path = os.path.join(os.environ["SUITE_TABLE_RESULTS"], f"rank{MPI.COMM_WORLD.Get_rank()}.json")
    with open(path, "w") as out:
        json.dump(_outcomes, out)
'''


def parse_sizes(text: str) -> list[int]:
    if "-" in text:
        low, high = text.split("-")
        return list(range(int(low), int(high) + 1))
    return [int(part) for part in text.split(",")]


def command(launcher: str, size: int, path: str, pytest_args: list[str], simdist_args: list[str]) -> list[str]:
    pytest = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suite_table_plugin", *pytest_args, path]
    if launcher == "mpiexec":
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
        return [mpiexec, "--oversubscribe", "-n", str(size), sys.executable, *pytest]
    return [sys.executable, "-m", "simdist", "run", "-n", str(size), *simdist_args, *pytest]


def run_one(suite: Path, launcher: str, size: int, name: str, timeout: float, pytest_args: list[str],
            simdist_args: list[str]) -> dict:
    """Each rank's outcome of every test of one file, and how the run ended."""
    with tempfile.TemporaryDirectory(prefix="suite-table-") as scratch:
        Path(scratch, "suite_table_plugin.py").write_text(PLUGIN)
        env = dict(os.environ, SUITE_TABLE_RESULTS=scratch, OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                   PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe",  # spawned processes too (Open MPI 5)
                   PYTHONPATH=os.pathsep.join(filter(None, [scratch, os.environ.get("PYTHONPATH")])))
        started = time.monotonic()
        proc = subprocess.Popen(command(launcher, size, name, pytest_args, simdist_args), cwd=suite, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            ended = "exit"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
            ended = "hang"
        ranks = read_ranks(Path(scratch), size)
    return {"ended": ended, "status": proc.returncode, "seconds": round(time.monotonic() - started, 1),
            "ranks": ranks, "tail": out.decode(errors="replace")[-1500:]}


def read_ranks(scratch: Path, size: int) -> dict[str, dict]:
    """The outcomes the plugin wrote for each rank, keyed by the rank as a
    string, as a ``--json`` file gives them back, so that runs measured now
    and runs resumed compare rank by rank."""
    ranks = {}
    for rank in range(size):
        path = scratch / f"rank{rank}.json"
        if path.exists():
            ranks[str(rank)] = json.loads(path.read_text())
    return ranks


def cell(run: dict | None, size: int) -> str:
    if run is None:
        return "·"
    if run["ended"] == "hang":
        return "hang"
    counts = [sum(v == "passed" for v in run["ranks"].get(str(r), {}).values())
              for r in range(size)]
    if not any(run["ranks"].values()):
        return "error"
    return str(counts[0]) if len(set(counts)) == 1 else "/".join(map(str, counts))


def differences(reference: dict | None, run: dict | None) -> dict[str, str]:
    """Tests that passed on a rank of ``reference`` and not on that rank of ``run``.

    Rank by rank, since a suite may name its tests per rank (pylops-mpi's adds
    ``[Rank N]`` to each test id)."""
    if reference is None or run is None or reference["ended"] == "hang":
        return {}
    missing = {}
    for rank, outcomes in reference["ranks"].items():
        ran = run["ranks"].get(rank, {})
        for test, outcome in outcomes.items():
            if outcome == "passed" and ran.get(test) != "passed":
                missing[test] = "hang" if run["ended"] == "hang" else ran.get(test, "not run")
    return dict(sorted(missing.items()))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path)
    parser.add_argument("--sizes", default="1-4")
    parser.add_argument("--files", default="")
    parser.add_argument("--launchers", default="mpiexec,simdist")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--pytest-args", default="", help="options added to every pytest command line")
    parser.add_argument("--simdist-args", default="", help="options added to every simdist run command line, "
                        "such as '--universe 40' for the spare slots Spawn needs")
    args = parser.parse_args(argv)
    files = args.files.split(",") if args.files else sorted(p.name for p in args.suite.glob("test_*.py"))
    launchers, sizes = args.launchers.split(","), parse_sizes(args.sizes)
    results = json.loads(args.json.read_text()) if args.resume and args.json and args.json.exists() else {}
    for name in files:
        for launcher in launchers:
            for size in sizes:
                key = f"{name} {launcher} {size}"
                if key not in results:
                    results[key] = run_one(args.suite, launcher, size, name, args.timeout,
                                           shlex.split(args.pytest_args), shlex.split(args.simdist_args))
                    if args.json:
                        args.json.write_text(json.dumps(results, indent=1))
                run = results[key]
                print(f"{key}: {cell(run, size)} ({run['ended']}, {run['seconds']} s)", flush=True)
    print("\n| file | mpiexec, " + " ".join(map(str, sizes)) + " ranks | simdist run, " + " ".join(map(str, sizes))
          + " ranks | pass under mpiexec, not under simdist |")
    print("| --- | --- | --- | --- |")
    for name in files:
        row = [" ".join(cell(results.get(f"{name} {launcher} {n}"), n) for n in sizes) for launcher in launchers]
        lost = {}
        for n in sizes:
            for test, outcome in differences(results.get(f"{name} mpiexec {n}"),
                                             results.get(f"{name} simdist {n}")).items():
                lost.setdefault(test.split("::", 1)[-1], set()).add(f"{outcome} at {n}")
        lost_text = "; ".join(f"`{t}` ({', '.join(sorted(o))})" for t, o in sorted(lost.items()))
        print(f"| `{name}` | " + " | ".join(row) + f" | {lost_text} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
