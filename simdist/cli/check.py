"""``simdist check``: the command line over :func:`simdist.reference.sweep`
and the property suite.

``add_parser(subparsers)`` adds the subcommand to an argparse parser;
``run(args)`` runs it and returns the exit status: 0 when no row failed, 1
when one did (or nothing could be checked), 2 for bad arguments. The sweep
returns data; the table, the progress display and the JSON are made here.
The property suite runs after the sweep; where its requirements (the
``check`` extra) are missing it is skipped, with one line saying how to add
them, and the exit status is the sweep's.

``-n`` takes one size or several (``2-5``, ``2,3,5,8``): then each size gets
its own table and property suite, the exit status is 0 only when every
size passed, and the JSON is ``{"ok", "sizes", "reports": [one per size]}``.
``--collectives``, ``--ops`` and ``--dtypes`` narrow the sweep and the
property suite alike, as does a factory's ``implements``.

Which communicator is checked:

``--backend sim`` / ``--backend mpi``
    the world's own communicator (the simulator, or mpi4py under mpiexec);
``--backend torch-gloo`` / ``--backend torch-nccl``
    torch's Gloo (NCCL: one GPU per rank), a process group of the
    simulated ranks (:mod:`simdist.torch.check`); without a GPU,
    ``torch-nccl`` says so and exits with status 1;
``--backend MODULE:FACTORY``
    a user's communicator on the simulator: ``FACTORY(base)`` gets the
    simulator's communicator and returns the object to check (``MODULE`` is
    imported from the current directory or the installed packages);
``--backend mpi --factory MODULE:FACTORY``
    the same, wrapping the MPI backend's communicator (``--factory`` alone
    wraps the simulator's, like ``--backend MODULE:FACTORY``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time

from .._errors import InvalidArgument, SimdistError
from ..mpi._spmd import launched_rank
from ..reference import SWEEP_COLLECTIVES, sweep
from ..reference._focus import NAMED_FACTORIES, named_backend, parse_sizes
from ..reference._properties import run_properties
from . import _json

__all__ = ["add_parser", "run"]

_REASON_WIDTH = 600  # characters of a reason in the text output; JSON has all of it


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``check`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``)."""
    p = subparsers.add_parser(
        "check",
        help="check a backend's collectives against the reference (a table; exit 1 on any failure)",
        description=(
            "Run every collective x dtype x op x root x shape on a backend, with exactly summable inputs "
            "(checked bit for bit) and random ones (checked against a rigorous error bound), and print a "
            "table with one row per collective, dtype and op. Exit status 1 when any row fails."
        ),
        epilog=(
            "MODULE:FACTORY names a callable that gets the world's communicator and returns the "
            "communicator to check: FACTORY(base). --backend MODULE:FACTORY wraps the simulator; "
            "--backend mpi --factory MODULE:FACTORY wraps the MPI backend. See docs/backends.md."
        ),
    )
    p.add_argument("-n", "--size", default="4", metavar="N",
                   help="number of ranks (default 4); several: 2-5 or 2,3,5,8 (a report per size)")
    p.add_argument("--backend", default="sim", metavar="sim|mpi|torch-gloo|torch-nccl|MODULE:FACTORY",
                   help="what to check (default sim); torch-gloo: torch's Gloo on the simulated ranks, torch-nccl: "
                        "NCCL, one GPU per rank")
    p.add_argument("--factory", metavar="MODULE:FACTORY",
                   help="check FACTORY(base), base being the --backend's communicator")
    p.add_argument("--json", metavar="FILE",
                   help="also write the report as JSON ('-': to stdout, instead of the table)")
    p.add_argument("--quick", action="store_true", help="one call per case instead of two, smaller large arrays")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds without progress before a call counts as a hang (default 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--collectives", metavar="A,B,...",
                   help=f"only these collectives (default all: {','.join(SWEEP_COLLECTIVES)})")
    p.add_argument("--ops", metavar="A,B,...", help="only these reduction ops (default all)")
    p.add_argument("--dtypes", metavar="A,B,...", help="only these dtypes (default all)")
    p.add_argument("--sync-sends", dest="sync_sends", action="store_true", default=None,
                   help="every send waits until its recv takes the message (MPI's Ssend), in the sweep and the "
                        "property suite (default: buffered sends in the sweep, synchronous in the suite)")
    p.add_argument("--buffered-sends", dest="sync_sends", action="store_false",
                   help="sends return once buffered, in the sweep and the property suite")
    p.add_argument("-x", "--first-failure", dest="first_failure", action="store_true",
                   help="stop at the first failure: the sweep's rows not yet judged when a row fails are not run, the "
                        "property suite does not run after a failed sweep and stops at its own first failure, and "
                        "no further size runs")
    p.add_argument("--no-properties", dest="properties", action="store_false",
                   help="skip the property suite (python -m pytest --pyargs properties), which runs after the sweep "
                        "when pytest and hypothesis are installed (pip install \"simdist[check]\")")
    return p


def _target(args) -> tuple[str, str | None]:
    """(backend, factory) from --backend and --factory; raises ValueError
    with the message to print when they do not make sense together."""
    backend, factory = args.backend, args.factory
    if backend in NAMED_FACTORIES:
        if factory is not None:
            raise ValueError(f"--backend {backend} is a factory of its own; it takes no --factory")
        return backend, None
    if backend not in ("sim", "mpi"):
        if ":" not in backend:
            raise ValueError(f"--backend {backend}: use sim, mpi, torch-gloo, torch-nccl or MODULE:FACTORY "
                             "(e.g. mybackend:make_comm)")
        if factory is not None:
            raise ValueError("give the factory either as --backend MODULE:FACTORY or as --factory MODULE:FACTORY, "
                             "not both")
        backend, factory = "sim", backend
    return backend, factory


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [t.strip() for t in text.split(",") if t.strip()]


class _Progress:
    """``progress(done, total, label)`` for :func:`sweep`: one line updated
    in place on a terminal, else a plain line every 10% or 15 s."""

    def __init__(self, stream):
        self.stream = stream
        self.tty = stream.isatty()
        self.started = time.monotonic()
        self.last = 0.0
        self.last_tenth = -1
        self.width = 0

    def __call__(self, done: int, total: int, label: str) -> None:
        now = time.monotonic()
        fraction = done / total if total else 1.0
        line = f"check: {done}/{total} cases ({100 * fraction:.0f}%), {now - self.started:.0f} s: {label}"
        if self.tty:
            if now - self.last < 0.1 and done < total:
                return
            self.stream.write("\r" + line.ljust(self.width))
            self.width = len(line)
        else:
            tenth = int(10 * fraction)
            if tenth == self.last_tenth and now - self.last < 15 and done < total:
                return
            self.last_tenth = tenth
            self.stream.write(line + "\n")
        self.last = now
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def _ratio(row: dict) -> str:
    if row["verdict"] == "unsupported" or not row["cases"] or row["collective"] in ("barrier", "rank/size"):
        return "-"
    if row["exact"] and row["verdict"] == "pass":
        return "exact"
    ratio = row["max_ratio"]
    return "inf" if math.isinf(ratio) else f"{ratio:.3g}"


def format_table(report: dict) -> str:
    """The report as a text table, the failures' reasons and a summary line."""
    header = ("collective", "dtype", "op", "cases", "max err/bound", "verdict")
    lines = [(r["collective"], r["dtype"] or "-", r["op"] or "-", str(r["cases"]), _ratio(r), r["verdict"])
             for r in report["rows"]]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
    right = (False, False, False, True, True, False)

    def fmt(cells):
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    out = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(line) for line in lines]
    if report.get("implements"):
        out.insert(0, f"only {', '.join(report['collectives'])}: {report['factory']} implements "
                      f"{', '.join(report['implements'])} ({report['factory']}.implements); the rest is its base's\n")
    notes = [r for r in report["rows"] if r["verdict"] != "pass"]
    if notes:
        out.append("")
        for r in notes:
            what = " ".join(p for p in (r["collective"], r["dtype"], r["op"]) if p)
            reason = r["reason"] if len(r["reason"]) <= _REASON_WIDTH else r["reason"][:_REASON_WIDTH] + " ..."
            if r["verdict"] == "FAIL" and r["cases"] and r["failed_cases"]:
                reason = f"{r['failed_cases']} of {r['cases']} cases failed; first: {reason}"
            out.append(f"{r['verdict']} {what}: {reason}")
    t = report["totals"]
    where = f"{report['backend']}" + (f" via {report['factory']}" if report["factory"] else "")
    out.append("")
    out.append(
        f"{t['rows']} rows: {t['pass']} passed, {t['fail']} failed, {t['unsupported']} unsupported; "
        f"{t['cases']} cases on {report['size']} rank(s) ({where}) in {report['seconds']:.1f} s; "
        f"largest error/bound of a pass {t['max_ratio']:.3g}"
        + (f"; stopped at the first failure, {t['not_run']} rows not run" if t.get("not_run") else "")
    )
    return "\n".join(out)


def format_properties(report: dict) -> str:
    """The property suite's outcome as text: a summary line, then each failure."""
    if report["skipped"]:
        return f"property suite: skipped: {report['reason']}" + (
            f"; add it with: {report['install']}" if report["install"] else "")
    failed = report["failed"]
    lines = [f"property suite: {report['passed']} passed, {len(failed)} failed in {report['seconds']:.1f} s "
             f"(hypothesis seed {report['seed']})"]
    if "error" in report:
        lines.append(f"  the suite did not run: {report['error']}")
    for case in failed:
        lines.append(f"FAIL {case['test']}: {case['message']}")
        lines.append(f"  replay: {case['replay']}")
    return "\n".join(lines)


def _properties(args, size: int, backend: str, factory: str | None, progress_to) -> dict:
    """Run the property suite after the sweep, announcing it with the progress."""
    def announce() -> None:
        print("check: running the property suite (python -m pytest --pyargs properties) ...", file=progress_to)

    backend, factory = named_backend(backend, factory)
    return run_properties(backend if backend == "mpi" else "sim", factory, size, timeout=args.timeout,
                          seed=args.seed, examples=10 if args.quick else 25, announce=announce,
                          collectives=_names(args.collectives), ops=_names(args.ops), dtypes=_names(args.dtypes),
                          sync_sends=args.sync_sends, first_failure=args.first_failure)


def _check_size(args, size: int, backend: str, factory: str | None, progress_to) -> tuple[int, dict | None]:
    """Sweep and property suite on ``size`` ranks, printed: (status, report); the
    report is None for bad arguments, ``{"size", "ok": False, "error"}`` when
    nothing could be checked."""
    progress = _Progress(progress_to)
    try:
        report = sweep(
            size, backend, factory, quick=args.quick, progress=progress, seed=args.seed, timeout=args.timeout,
            collectives=_names(args.collectives), ops=_names(args.ops), dtypes=_names(args.dtypes),
            sync_sends=bool(args.sync_sends), first_failure=args.first_failure,
        )
    except InvalidArgument as exc:
        progress.finish()
        print(f"simdist check: error: {exc}", file=sys.stderr)
        return 2, None
    except SimdistError as exc:
        progress.finish()
        print(f"simdist check: {exc}", file=sys.stderr)
        return 1, {"size": size, "ok": False, "error": str(exc)}
    except KeyboardInterrupt:
        progress.finish()
        raise
    progress.finish()
    if args.properties and (report["ok"] or not args.first_failure):
        properties = report["properties"] = _properties(args, size, backend, factory, progress_to)
        report["ok"] = report["ok"] and (properties["skipped"] or properties["ok"])
    if args.json != "-":
        print(format_table(report))
        if "properties" in report:
            print(format_properties(report["properties"]))
    elif report.get("properties", {}).get("skipped"):  # the JSON has it; say it where a person looks
        print(format_properties(report["properties"]), file=sys.stderr)
    return (0 if report["ok"] else 1), report


def run(args: argparse.Namespace) -> int:
    """Run ``simdist check`` with parsed ``args``; return the exit status.
    Under an MPI launcher every rank checks and rank 0 alone reports (its
    table, progress and JSON); the others print only their errors."""
    rank = launched_rank()
    if rank:
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            return _run(argparse.Namespace(**{**vars(args), "json": None}), progress_to=quiet)
    return _run(args)


def _run(args: argparse.Namespace, progress_to=None) -> int:
    try:
        backend, factory = _target(args)
        sizes = parse_sizes(args.size, "-n")
    except ValueError as exc:
        print(f"simdist check: error: {exc}", file=sys.stderr)
        return 2
    if factory is not None and os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # MODULE imports from here, as with python -m (the ranks get sys.path)
    reports, statuses = [], []
    try:
        for size in sizes:
            if len(sizes) > 1 and args.json != "-":
                print(f"== {size} rank(s) ==")
            status, report = _check_size(args, size, backend, factory, progress_to or sys.stderr)
            if status == 2 or ("error" in report and len(sizes) == 1):  # nothing checked: no report
                return status
            statuses.append(status)
            reports.append(report)
            if status and args.first_failure:
                break
    except KeyboardInterrupt:
        print("simdist check: interrupted", file=sys.stderr)
        return 130
    if len(sizes) > 1 and args.json != "-":
        failed = [r["size"] for r in reports if not r["ok"]]
        skipped = sizes[len(reports):]
        print(f"\n{len(sizes)} sizes: " + (f"failed on {', '.join(map(str, failed))} rank(s)" if failed
                                            else "every size passed")
              + (f"; stopped at the first failure, not run on {', '.join(map(str, skipped))}" if skipped else ""))
    if args.json:
        _json.write(reports[0] if len(sizes) == 1 else
                    {"ok": not any(statuses), "sizes": sizes, "reports": reports}, args.json)
    return 1 if any(statuses) else 0
