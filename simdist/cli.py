"""The ``simdist`` command line: a thin layer over the library.

``main(argv)`` parses, calls a library function that returns data, and
prints it (or writes it as JSON); it returns the exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from ._bench_cli import add_parser as add_bench, run as run_bench
from ._check_cli import add_parser as add_check, run as run_check
from ._scale import add_parser as add_scale, run as run_scale
from ._script import run_script
from ._train_cli import add_parser as add_train, run as run_train
from ._world import World


def demo(size: int) -> dict:
    """Run a few collectives on a simulated world and check them; return a report."""
    started = time.perf_counter()
    with World(size) as world:
        startup = time.perf_counter() - started

        def program(comm):
            rng = np.random.default_rng(comm.rank)
            local = rng.standard_normal(1000).astype(np.float32)
            total = comm.allreduce(local)
            mean = comm.allreduce(local, op="mean")
            every = comm.allgather(local)
            return total, mean, every

        first = world.run(program)
        again = world.run(program)
    every = first[0][2]
    fold = every[0].copy()
    for part in every[1:]:
        fold += part
    return {
        "size": size,
        "startup_seconds": round(startup, 4),
        "sum_first_elements": [float(v) for v in first[0][0][:3]],
        "identical_on_every_rank": all(np.array_equal(r[0], first[0][0]) for r in first),
        "equals_rank_order_fold": bool(np.array_equal(first[0][0], fold)),
        "identical_across_runs": all(np.array_equal(a[0], b[0]) for a, b in zip(first, again)),
        "mean_is_sum_over_size": bool(np.array_equal(first[0][1], first[0][0] / np.float32(size))),
    }


def _print_demo(report: dict) -> None:
    print(f"simulated world of {report['size']} ranks started in {report['startup_seconds'] * 1000:.0f} ms")
    print(f"allreduce(sum) of 1000 float32 per rank, first elements: {report['sum_first_elements']}")
    for key in ("identical_on_every_rank", "equals_rank_order_fold", "identical_across_runs", "mean_is_sum_over_size"):
        print(f"  {key.replace('_', ' '):<28} {'yes' if report[key] else 'NO'}")


_RUN_VALUED = ("-n", "--size", "--backend", "--timeout")


def _split_run(argv: list[str]) -> tuple[list[str], list[str]]:
    """``simdist run``'s own options, and the rest: what follows the script
    or ``-m module`` belongs to the program, options included (as with
    ``python`` and ``mpiexec``)."""
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            return argv[:i], argv[i + 1:]
        if token == "-m":
            return argv[: i + 2], argv[i + 2:]
        if token in _RUN_VALUED:
            i += 2
        elif token.startswith("-") and token != "-":  # --size=4, -n4, -h: argparse decides
            i += 1
        else:
            return argv[:i], argv[i:]
    return argv, []


def _run(parser, args) -> int:
    if args.size < 1:
        parser.error(f"-n must be >= 1, got {args.size}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0, got {args.timeout}")
    if args.module:
        target, rest = args.module, args.args
    elif args.args:
        target, rest = args.args[0], args.args[1:]
    else:
        parser.error("simdist run: give a script or -m module")
    outcome = run_script(target, rest, args.size, module=bool(args.module), backend=args.backend, timeout=args.timeout)
    if outcome.error:
        print(outcome.error, file=sys.stderr)
    return outcome.status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="simdist", description="Simulated distributed worlds with deterministic collectives.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="run a few collectives on a simulated world and check them")
    p_demo.add_argument("-n", "--size", type=int, default=4, help="number of ranks (default 4)")
    p_demo.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for stdout)")
    p_run = sub.add_parser(
        "run",
        help="run an SPMD script on N ranks (like mpiexec); inside, simdist.comm() is the rank's communicator",
        usage="simdist run -n N [--backend sim|mpi] [--timeout S] (script.py | -m module) [args ...]",
    )
    p_run.add_argument("-n", "--size", type=int, required=True, help="number of ranks")
    p_run.add_argument("--backend", choices=("sim", "mpi"), default="sim", help="simulator (default) or real MPI")
    p_run.add_argument("--timeout", type=float, default=60.0, help="seconds without progress before a hang is reported (default 60)")
    p_run.add_argument("-m", dest="module", metavar="module", help="run a module as __main__, like python -m")
    p_run.add_argument("args", nargs=argparse.REMAINDER, help="the script and its arguments")
    add_check(sub)
    add_train(sub)
    add_bench(sub)
    add_scale(sub)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["run"]:
        own, program = _split_run(argv)
        args = parser.parse_args(own)
        args.args = program
        return _run(parser, args)
    args = parser.parse_args(argv)
    if args.command == "train":
        return run_train(args)
    if args.command == "bench":
        return run_bench(args)
    if args.command == "scale":
        return run_scale(args)
    if args.command == "run":
        return _run(parser, args)
    if args.command == "check":
        return run_check(args)
    if args.command == "demo":
        if args.size < 1:
            parser.error(f"-n must be >= 1, got {args.size}")
        report = demo(args.size)
        if args.json == "-":
            json.dump(report, sys.stdout, indent=2)
            print()
        else:
            _print_demo(report)
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(report, fh, indent=2)
        checks = [v for k, v in report.items() if isinstance(v, bool)]
        return 0 if all(checks) else 1
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
