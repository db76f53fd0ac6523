"""``simdist demo``: a few collectives on a simulated world, checked."""

from __future__ import annotations

import time

import numpy as np

from .._world import World
from . import _json



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


def format_report(report: dict) -> str:
    lines = [f"simulated world of {report['size']} ranks started in {report['startup_seconds'] * 1000:.0f} ms",
             f"allreduce(sum) of 1000 float32 per rank, first elements: {report['sum_first_elements']}"]
    for key in ("identical_on_every_rank", "equals_rank_order_fold", "identical_across_runs", "mean_is_sum_over_size"):
        lines.append(f"  {key.replace('_', ' '):<28} {'yes' if report[key] else 'NO'}")
    return "\n".join(lines)


def add_parser(subparsers):
    parser = subparsers.add_parser("demo", help="run a few collectives on a simulated world and check them")
    parser.add_argument("-n", "--size", type=int, default=4, help="number of ranks (default 4)")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON ('-' for stdout)")
    return parser


def run(args) -> int:
    if args.size < 1:
        args.parser.error(f"-n must be >= 1, got {args.size}")
    report = demo(args.size)
    if args.json != "-":
        print(format_report(report))
    if args.json:
        _json.write(report, args.json)
    checks = [v for v in report.values() if isinstance(v, bool)]
    return 0 if all(checks) else 1


