"""``simdist run``: an SPMD script or module on N ranks, like ``mpiexec``."""

from __future__ import annotations

import argparse
import sys

from .. import checks as _checks
from .._script import run_script
from ._json import write as write_json


_VALUED = ("-n", "--size", "--backend", "--timeout", "--universe", "--host", "--hostfile", "--launcher", "--listen", "--check-json", "--race-runs")


def add_parser(subparsers):
    parser = subparsers.add_parser(
        "run",
        help="run an SPMD script on N ranks (like mpiexec); inside, simdist.comm() is the rank's communicator",
        usage="simdist run -n N [--backend sim|mpi] [--timeout S] [--universe U] [--host H1,H2 | --hostfile F] [--launcher CMD] "
              "[--listen ADDR[:PORT]] [--check[=LIST]] [--check-json F] [--race-runs K] (script.py | -m module) [args ...]",
    )
    parser.add_argument("-n", "--size", type=int, required=True, help="number of ranks")
    parser.add_argument("--backend", choices=("sim", "mpi"), default="sim", help="simulator (default) or real MPI")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds without progress before a hang is reported (default 60)")
    parser.add_argument("--universe", type=int, metavar="U",
                        help="slots in all, the N ranks' and spare ones that MPI Spawn starts processes in "
                             "(simulator; default: spawn as mpiexec --oversubscribe does, max(32, 2N) spare "
                             "slots and MPI.UNIVERSE_SIZE the host's CPUs)")
    found = parser.add_argument_group("correctness checks (simulator; see docs/correctness.md)")
    found.add_argument("--check", nargs="?", const="all", metavar="LIST",
                       help="find MPI bugs real MPI hides; LIST (after '='): comma-separated kinds or groups, "
                            "'-kind' drops one (default all): " + ", ".join([*_checks.GROUPS, *_checks.KINDS]))
    found.add_argument("--race-runs", type=int, metavar="K", help="re-runs at most for the race check (default 16)")
    found.add_argument("--check-json", metavar="F", help="also write the findings as JSON to F ('-': standard output)")
    hosts = parser.add_argument_group("MPI across hosts (--backend mpi; see docs/mpi.md, 'Running on a cluster')")
    hosts.add_argument("--host", dest="hosts", metavar="H1,H2", help="hosts for mpiexec, comma-separated (HOST:SLOTS for Open MPI)")
    hosts.add_argument("--hostfile", metavar="F", help="a hostfile for mpiexec")
    hosts.add_argument("--launcher", metavar="CMD", help="a command that starts the ranks instead of mpiexec, e.g. 'srun --mpi=pmix'")
    hosts.add_argument("--listen", metavar="ADDR[:PORT]",
                       help="where the driver listens for the ranks (default: the address that routes to the first remote host)")
    parser.add_argument("-m", dest="target_module", metavar="module", help="run a module as __main__, like python -m")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script and its arguments")
    return parser


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
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
        if token in _VALUED:
            i += 2
        elif token.startswith("-") and token != "-":  # --size=4, -n4, -h: argparse decides
            i += 1
        else:
            return argv[:i], argv[i:]
    return argv, []


def parse(top: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    own, program = split_argv(argv)
    args = top.parse_args(own)
    args.args = program
    return args


def run(args) -> int:
    parser = args.parser
    if args.size < 1:
        parser.error(f"-n must be >= 1, got {args.size}")
    if args.timeout <= 0:
        parser.error(f"--timeout must be > 0, got {args.timeout}")
    if args.target_module:
        target, rest = args.target_module, args.args
    elif args.args:
        target, rest = args.args[0], args.args[1:]
    else:
        parser.error("simdist run: give a script or -m module")
    hosts = {name: getattr(args, name) for name in ("hosts", "hostfile", "launcher", "listen") if getattr(args, name)}
    if hosts and args.backend != "mpi":
        parser.error(f"--{'host' if 'hosts' in hosts else next(iter(hosts))} places MPI ranks: add --backend mpi")
    if args.universe is not None:
        if args.universe < args.size:
            parser.error(f"--universe {args.universe}: give at least the {args.size} ranks of -n")
        if args.backend != "sim":
            parser.error("--universe is the simulator's: under --backend mpi, mpiexec's hosts and slots make the universe")
    checks = frozenset()
    if args.check is not None or args.check_json:
        try:
            checks = _checks.parse(args.check)
        except ValueError as exc:
            parser.error(str(exc))
        if args.race_runs is not None and args.race_runs < 0:
            parser.error(f"--race-runs {args.race_runs}: give a count of re-runs, 0 or more")
        if args.backend != "sim":
            parser.error("--check needs the simulator: it controls every message and schedule (drop --backend mpi)")
    outcome = run_script(target, rest, args.size, module=bool(args.target_module), backend=args.backend,
                         timeout=args.timeout, hosts=hosts, checks=checks, race_runs=args.race_runs,
                         universe=args.universe)
    if outcome.error:
        print(outcome.error, file=sys.stderr)
    if checks:
        if outcome.summary:
            print(outcome.summary, file=sys.stderr)
        print(_checks.render(outcome.findings, checks), file=sys.stderr)
        if args.check_json:
            write_json({**_checks.to_json(outcome.findings, checks), "status": outcome.status}, args.check_json)
    return outcome.status
