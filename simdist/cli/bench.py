"""``simdist bench``: an nccl-tests-style sweep of the collectives, simulator and MPI side by side.

``add_parser(subparsers)`` adds the subcommand; ``run(args)`` runs it over
:mod:`simdist.bench` and returns the exit status: 0 when every result was
right, 1 when one was wrong or the MPI side failed, 2 for bad arguments.
Progress goes to standard error; the table, the targets, the JSON and the
plot are made here, at the edge. With ``--targets`` the run also takes the
measurements that are not sweeps and judges every performance target.
"""

from __future__ import annotations

import argparse
import sys
import time

from ..bench import report as text
from ..bench.cells import COLLECTIVES, DEFAULT_COLLECTIVES, DTYPES, human_bytes, make_case, parse_bytes, sizes
from ..bench.measurements import RUN_N, STARTUP_N
from ..bench.sweep import sweep
from ..bench import targets
from . import _json

__all__ = ["add_parser", "run", "options"]


def _list(kind: str, allowed: tuple, text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{kind}={text!r}: choose from {','.join(allowed)}")
    return items


def _ns(text: str) -> list[int]:
    try:
        ns = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        ns = []
    if not ns or min(ns) < 1:
        raise argparse.ArgumentTypeError(f"-n {text!r}: give world sizes >= 1, comma separated, e.g. 2,4,8")
    return ns


def _size(text: str) -> int:
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``bench`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    p = subparsers.add_parser(
        "bench",
        help="time the collectives over a range of message sizes, simulator and MPI (nccl-tests style)",
        description=("Time each collective at every power-of-two size from --min-bytes to --max-bytes, OSU-style "
                     "(warm-up, barrier, timed loop, barrier), on the simulator and on MPI (mpi4py under mpiexec). "
                     "Prints time per call (mean over ranks, min and max), algbw and busbw as nccl-tests define "
                     "them, and #wrong from checking every warm-up result and the last timed one. With --targets, "
                     "also measures copy bandwidth, world.run rate, start-up and a big world, and judges every "
                     "performance target (PASS/MISS). Exit status 1 when any result was wrong or MPI failed; a "
                     "MISS does not change it."),
        epilog="See docs/performance.md. Sizes take K, M, G (binary): 8, 1K, 64KiB, 64MiB.",
    )
    _add_sweep_arguments(p)
    _add_target_arguments(p)
    return p


def _add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--ns", type=_ns, metavar="N,N,...",
                   help="world sizes (default 2,4,8; with --targets 2,4,8,16)")
    p.add_argument("--backend", type=lambda s: _list("--backend", ("sim", "mpi"), s), default=["sim", "mpi"],
                   metavar="sim,mpi", help="backends (default sim,mpi)")
    p.add_argument("--collective", type=lambda s: _list("--collective", COLLECTIVES, s), metavar="A,B,...",
                   help=f"collectives at every N (default {','.join(DEFAULT_COLLECTIVES)}; also reduce; "
                        "with --targets the targets' choice per N)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="element type (default float32)")
    p.add_argument("--min-bytes", type=_size, default=8, metavar="SIZE", help="smallest size (default 8)")
    p.add_argument("--max-bytes", type=_size, default=64 << 20, metavar="SIZE", help="largest size (default 64MiB)")
    p.add_argument("--warmup", type=int, default=500, help="warm-up calls below 1 MiB (default 500)")
    p.add_argument("--iters", type=int, default=5000, help="timed calls below 1 MiB, and barrier (default 5000)")
    p.add_argument("--large-warmup", type=int, default=10, help="warm-up calls from 1 MiB (default 10)")
    p.add_argument("--large-iters", type=int, default=100, help="timed calls from 1 MiB (default 100)")
    p.add_argument("--repeats", type=int, default=None, metavar="K",
                   help="measure the cells below 1 MiB K times, backends taking turns, and keep each cell's "
                        f"median (default 1; with --targets {targets.REPEATS}, and every size)")
    p.add_argument("--timeout", type=float, default=300.0, help="simulator: seconds without progress before a hang (default 300)")
    p.add_argument("--mpiexec", default=None, help="the mpiexec to use (default: simdist's choice, as simdist run)")
    p.add_argument("--mpi-args", type=str.split, default=[], help="extra mpiexec arguments, one quoted string")
    p.add_argument("--mpi-timeout", type=float, default=1800.0, help="seconds for one mpiexec sweep (default 1800)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-': to stdout, instead of the table)")
    p.add_argument("--plot", metavar="FILE.png", help="also plot latency and busbw against size (needs matplotlib)")


def _add_target_arguments(p: argparse.ArgumentParser) -> None:
    """``--targets`` and the options that shrink it (each refused without ``--targets``)."""
    p.add_argument("--targets", action="store_true",
                   help="also measure and judge every performance target (defaults: -n 2,4,8,16; allreduce,barrier "
                        "at N < 8, the default collectives from N = 8)")
    p.add_argument("--cap-bytes", type=_size, metavar="SIZE",
                   help=f"with --targets: the largest size at N >= 8 (default {human_bytes(targets.CAP_BYTES)}, "
                        "or --max-bytes if smaller)")
    p.add_argument("--runs", type=int, metavar="K",
                   help=f"with --targets: world.run calls timed at N={RUN_N} (default {targets.RUNS}; 0: skip)")
    p.add_argument("--startup-repeats", type=int, metavar="K",
                   help=f"with --targets: starts of World({STARTUP_N}) and of mpiexec -n {STARTUP_N} to take the "
                        f"median of (default {targets.STARTUP_REPEATS}; 0: skip)")
    p.add_argument("--big-n", type=int, metavar="N",
                   help=f"with --targets: ranks of the big world (default {targets.BIG_N}; 0: skip)")


def _find_mpiexec(args: argparse.Namespace) -> str:
    if args.mpiexec is not None:
        return args.mpiexec
    from ..mpi import _driver

    try:
        return _driver.find_mpiexec()
    except Exception as exc:  # no MPI: fine for --backend sim
        if "mpi" in args.backend:
            raise ValueError(f"--backend mpi: {exc}") from None
        return "mpiexec"


def _target_options(args: argparse.Namespace, opts: dict) -> dict:
    """What ``--targets`` adds to the sweep's options; ``{"targets": False}`` without it."""
    own = {name: getattr(args, name) for name in targets.MEASUREMENT_DEFAULTS}
    if not args.targets:
        for name, value in {**own, "cap_bytes": args.cap_bytes}.items():
            if value is not None:
                raise ValueError(f"--{name.replace('_', '-')} {value}: applies only with --targets; add --targets")
        return {"targets": False}
    if args.dtype != "float32":
        raise ValueError(f"--dtype {args.dtype}: the targets are defined on float32; drop --dtype")
    own = {k: targets.MEASUREMENT_DEFAULTS[k] if v is None else v for k, v in own.items()}
    for name, value in own.items():
        if value < 0:
            raise ValueError(f"--{name.replace('_', '-')} {value}: must be >= 0 (0 skips it)")
    cap = targets.CAP_BYTES if args.cap_bytes is None else args.cap_bytes
    return {**own, **targets.plan(opts["sizes"], args.ns, args.collective, cap)}


def options(args: argparse.Namespace) -> dict:
    """The sweep's options from parsed arguments; ValueError names a bad one."""
    if args.max_bytes < args.min_bytes:
        raise ValueError(f"--min-bytes {args.min_bytes} is larger than --max-bytes {args.max_bytes}")
    for name in ("warmup", "iters", "large_warmup", "large_iters"):
        least = 1 if "iters" in name else 0
        if getattr(args, name) < least:
            raise ValueError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= {least}")
    opts = {"ns": args.ns or [2, 4, 8], "backends": args.backend,
            "collectives": args.collective or list(DEFAULT_COLLECTIVES), "dtype": args.dtype,
            "sizes": sizes(args.min_bytes, args.max_bytes), "warmup": args.warmup, "iters": args.iters,
            "large_warmup": args.large_warmup, "large_iters": args.large_iters, "timeout": args.timeout,
            "mpiexec": _find_mpiexec(args), "mpi_args": args.mpi_args, "mpi_timeout": args.mpi_timeout}
    opts["plan"] = [{"n": n, "collectives": opts["collectives"], "sizes": opts["sizes"]} for n in opts["ns"]]
    opts.update(_target_options(args, opts))
    if args.repeats is not None and args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: must be >= 1")
    opts["repeats"] = args.repeats or (targets.REPEATS if opts["targets"] else 1)
    return opts


def _error(message: str) -> None:
    print(f"simdist bench: error: {message}", file=sys.stderr)


def _say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _print_report(report: dict, opts: dict) -> None:
    print(text.headline(report["machine"]))
    print(text.format_table(report["results"]))
    if opts["targets"]:
        print("\n" + text.copy_line(report["machine"]["copy_bandwidth"]))
        print(text.format_targets(report["targets"]))


def _wrong_results(report: dict) -> int:
    wrong = sum(r["wrong"] for r in report["results"])
    return wrong + sum((report.get(key) or {}).get("wrong", 0) for key in ("run_rate", "big_world"))


def run(args: argparse.Namespace, case=make_case) -> int:
    """Run ``simdist bench`` with parsed ``args``; return the exit status.
    ``case`` makes the simulator's inputs and expected results (a test passes a wrong one)."""
    try:
        opts = options(args)
    except ValueError as exc:
        _error(exc)
        return 2
    try:
        report = sweep(opts, _say, case)
        if opts["targets"]:
            targets.add_to(report, opts, _say)
    except KeyboardInterrupt:
        print("simdist bench: interrupted", file=sys.stderr)
        return 130
    report["options"] = dict(opts)
    if args.json != "-":
        _print_report(report, opts)
    if args.json:
        _json.write(report, args.json)
    status = 0
    for err in report["errors"]:
        _error(err)
        status = 1
    if args.plot:
        try:
            text.plot(report["results"], args.plot)
        except RuntimeError as exc:
            _error(exc)
            status = 1
    wrong = _wrong_results(report)
    if wrong:
        print(f"simdist bench: {wrong} wrong result(s)", file=sys.stderr)
        status = 1
    return status
