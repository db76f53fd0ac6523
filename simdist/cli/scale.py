"""``simdist scale``: projected data-parallel throughput on 1 ... 1024 devices, checked on N ranks.

Argparse, progress (standard error), the text, the JSON and the plot, over
:func:`simdist.bench.scaling.scale`; the exit status is 0, or 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from .._errors import InvalidValue
from ..bench.alpha_beta import ALGORITHMS
from ..bench.scaling import DEFAULT_DEVICES, format_report, plot, scale
from . import _json

__all__ = ["add_parser", "run"]


def _counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 1,2,4") from None


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``scale`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    p = subparsers.add_parser(
        "scale",
        help="project data-parallel training throughput on 1...1024 devices (alpha-beta model), checked on N ranks",
        description=(
            "Measure the example MLP's compute time per step on this machine, cost its gradient allreduces "
            "with an alpha-beta model (alpha, beta fitted to the simulator unless given), project the "
            "throughput on each device count, and check the model against data-parallel steps measured on "
            "the simulator. The assumptions are printed with the table."
        ),
        epilog="A real network, e.g. 100 Gb/s: --alpha-us 5 --beta-GBps 12.5. See docs/scaling.md.",
    )
    p.add_argument("--model", choices=("digits-mlp",), default="digits-mlp",
                   help="the model (default digits-mlp: the MLP of simdist train, 64 inputs, 10 classes)")
    p.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    p.add_argument("--batch-per-device", type=int, default=64, help="rows per device per step (default 64)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="default float32")
    p.add_argument("--algorithm", choices=ALGORITHMS, default="ring", help="allreduce algorithm (default ring)")
    p.add_argument("--alpha-us", type=float, help="latency per message, microseconds (default: fitted)")
    p.add_argument("--beta-GBps", type=float, help="bandwidth, GB/s (10^9 bytes/s; default: fitted)")
    p.add_argument("--devices", type=_counts, default=DEFAULT_DEVICES, metavar="1,2,...",
                   help="device counts to project (default 1,2,4,...,1024)")
    p.add_argument("--measure-n", type=_counts, default=(1, 2, 4), metavar="1,2,4",
                   help="simulated world sizes to measure for the check (default 1,2,4; empty: none)")
    p.add_argument("--fit-n", type=_counts, default=(2, 4), metavar="2,4",
                   help="simulated world sizes whose allreduce times fit alpha and beta (default 2,4)")
    p.add_argument("--steps", type=int, default=200,
                   help="timed steps per measurement (default 200; fewer when 200 steps would take over 1 s)")
    p.add_argument("--repeats", type=int, default=3, help="repeats of each measurement; the best is kept (default 3)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-': to stdout, instead of the text)")
    p.add_argument("--plot", metavar="FILE.png", help="plot throughput vs devices (needs matplotlib)")
    return p


def run(args) -> int:
    """Run ``simdist scale`` with parsed ``args``; return the exit status (2: bad arguments)."""
    text = args.json != "-"
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        print("simdist scale: error: --plot needs matplotlib: pip install 'simdist[bench]'", file=sys.stderr)
        return 2
    for flag, value in (("--alpha-us", args.alpha_us), ("--beta-GBps", args.beta_GBps)):
        if value is not None and not (value > 0 or (flag == "--alpha-us" and value == 0)):
            print(f"simdist scale: error: {flag} {value:g} must be {'>= 0' if flag == '--alpha-us' else '> 0'}",
                  file=sys.stderr)
            return 2
    try:
        report = scale(
            hidden=args.hidden, batch=args.batch_per_device, devices=args.devices, measure_n=args.measure_n,
            fit_n=args.fit_n, algorithm=args.algorithm,
            alpha=None if args.alpha_us is None else args.alpha_us * 1e-6,
            beta=None if args.beta_GBps is None else args.beta_GBps * 1e9,
            dtype=args.dtype, steps=args.steps, repeats=args.repeats, say=say,
        )
    except InvalidValue as error:
        print(f"simdist scale: error: {str(error).removeprefix('scale: ')}", file=sys.stderr)
        return 2
    if text:
        print(format_report(report))
    if args.json:
        _json.write(report, args.json)
    if args.plot:
        plot(report, args.plot)
        if text:
            print(f"plot: {args.plot}")
    return 0
