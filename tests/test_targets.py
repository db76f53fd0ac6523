"""``simdist bench --targets``: the verdict of every target on made-up figures, the plan, and real runs."""

from __future__ import annotations

import argparse
import json

import pytest

from simdist.bench import report, targets
from simdist.bench.cells import DEFAULT_COLLECTIVES, human_bytes
from simdist.bench.targets import verdicts
from simdist.cli import bench as bench_cli

MiB = 1 << 20
TARGET_NAMES = (
    ["allreduce >= 1 MiB, N=2", "allreduce >= 1 MiB, N=4",
     "allreduce 8 B, N=2", "barrier, N=2", "allreduce 8 B, N=4", "barrier, N=4"]
    + [f"{c}, N={n}, every size" if c != "barrier" else f"barrier, N={n}"
       for n in (8, 16) for c in DEFAULT_COLLECTIVES]
    + ["allreduce busbw / copy bandwidth, N=2", "allreduce busbw / copy bandwidth, N=4",
       "world.run rate, N=4", "start-up, N=8"]
)  # and last the big world, named after its N
TINY = ["--warmup", "1", "--iters", "2", "--large-warmup", "1", "--large-iters", "1",
        "--runs", "5", "--startup-repeats", "1", "--big-n", "4"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="simdist")
    bench_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


# -- the verdicts on made-up figures --------------------------------------------------------------------
def row(backend, collective, n, nbytes, time_us, busbw=None):
    return {"backend": backend, "collective": collective, "n": n, "bytes": nbytes, "time_us": time_us,
            "busbw_GBps": busbw, "wrong": 0}


def passing_rows() -> list[dict]:
    """Every cell the targets read, the simulator at half Open MPI's time (busbw 10 GB/s at 64 MiB)."""
    rows = []
    for n in (2, 4):
        for b in (8, 1 * MiB, 4 * MiB, 64 * MiB):
            rows.append(row("mpi", "allreduce", n, b, 100.0))
            rows.append(row("sim", "allreduce", n, b, 50.0, busbw=10.0 if b == 64 * MiB else 1.0))
        rows += [row("mpi", "barrier", n, 0, 10.0), row("sim", "barrier", n, 0, 5.0)]
    for n in (8, 16):
        for c in DEFAULT_COLLECTIVES:
            for b in ([0] if c == "barrier" else [8, 1024, 16 * MiB]):
                rows += [row("mpi", c, n, b, 100.0), row("sim", c, n, b, 50.0)]
    return rows


COPY = {"bytes": 64 * MiB, "GBps": 12.0, "repeats": 5}
RATE = {"n": 4, "runs": 500, "per_second": 1000.0, "wrong": 0}
START = {"n": 8, "sim_s": 0.03, "sim_all_s": [0.03], "mpi_s": 1.4, "mpi_all_s": [1.4]}
BIG = {"n": 256, "bytes": MiB, "start_s": 0.5, "noop_run_s": 0.2, "allreduce_run_s": 2.5,
       "allreduce_in_rank_max_s": 0.8, "close_s": 0.25, "pss_bytes": 1600 * MiB, "processes": 257,
       "arena_bytes": 654 * MiB, "wrong": 0}


def judged(rows=None, copy=COPY, rate=RATE, start=START, big=BIG, capped_at=None) -> dict:
    items = verdicts(passing_rows() if rows is None else rows, copy, rate, start, big, capped_at)
    assert [t["name"] for t in items[:-1]] == TARGET_NAMES
    assert all(t["verdict"] in targets.VERDICTS and t["detail"] and t["limit"] for t in items)
    return {t["name"]: t for t in items}


def slowed(rows, backend, collective, n, nbytes, factor) -> list[dict]:
    """``rows`` with one cell's time multiplied by ``factor``."""
    hit = lambda r: (r["backend"], r["collective"], r["n"], r["bytes"]) == (backend, collective, n, nbytes)
    assert sum(map(hit, rows)) == 1
    return [dict(r, time_us=r["time_us"] * factor) if hit(r) else r for r in rows]


def test_every_target_passes_when_every_figure_is_within_its_limit():
    got = judged()
    assert {name: t["verdict"] for name, t in got.items()} == {
        **{name: "PASS" for name in TARGET_NAMES}, "big world, N=256": "REPORTED"}
    assert got["allreduce >= 1 MiB, N=2"]["ratio"] == pytest.approx(0.5)
    assert got["allreduce busbw / copy bandwidth, N=2"]["ratio"] == pytest.approx(10 / 12)
    assert got["start-up, N=8"]["ratio"] == pytest.approx(0.03 / 1.4)
    assert "PSS of 257 processes 1600 MiB" in got["big world, N=256"]["detail"]


@pytest.mark.parametrize("name, cell, factor, ratio", [
    # 0.8 is the limit at 1 MiB and up: 0.5 x 1.7 = 0.85 misses; the 8-byte cell is not part of it
    ("allreduce >= 1 MiB, N=2", ("sim", "allreduce", 2, 4 * MiB), 1.7, 0.85),
    ("allreduce >= 1 MiB, N=4", ("mpi", "allreduce", 4, 64 * MiB), 0.5, 1.0),
    ("allreduce 8 B, N=2", ("sim", "allreduce", 2, 8), 4.2, 2.1),
    ("barrier, N=4", ("sim", "barrier", 4, 0), 4.4, 2.2),
    ("alltoall, N=8, every size", ("sim", "alltoall", 8, 1024), 2.2, 1.1),
    ("broadcast, N=16, every size", ("mpi", "broadcast", 16, 8), 0.25, 2.0),
    ("barrier, N=16", ("sim", "barrier", 16, 0), 3.0, 1.5),
])
def test_one_slow_cell_misses_its_target_alone_and_is_named(name, cell, factor, ratio):
    got = judged(slowed(passing_rows(), *cell, factor))
    assert [n for n, t in got.items() if t["verdict"] == "MISS"] == [name]
    miss = got[name]
    assert miss["ratio"] == pytest.approx(ratio)
    assert miss["cell"] == {"collective": cell[1], "n": cell[2], "bytes": cell[3]}
    if cell[3] and "every size" in name or ">=" in name:
        assert miss["detail"].startswith(f"worst at {human_bytes(cell[3])}, of ")


def test_the_limit_itself_passes():
    got = judged(slowed(passing_rows(), "sim", "allreduce", 2, 1 * MiB, 1.6))
    assert got["allreduce >= 1 MiB, N=2"]["ratio"] == pytest.approx(0.8)
    assert got["allreduce >= 1 MiB, N=2"]["verdict"] == "PASS"


def test_busbw_below_half_the_copy_bandwidth_misses():
    rows = [dict(r, busbw_GBps=5.9) if (r["backend"], r["n"], r["bytes"]) == ("sim", 4, 64 * MiB) else r
            for r in passing_rows()]
    got = judged(rows)
    assert got["allreduce busbw / copy bandwidth, N=4"]["verdict"] == "MISS"
    assert got["allreduce busbw / copy bandwidth, N=4"]["ratio"] == pytest.approx(5.9 / 12)
    assert got["allreduce busbw / copy bandwidth, N=2"]["verdict"] == "PASS"


def test_slow_world_run_and_slow_start_up_miss():
    got = judged(rate=dict(RATE, per_second=299.0), start=dict(START, sim_s=0.36))
    assert got["world.run rate, N=4"]["verdict"] == "MISS"
    assert got["start-up, N=8"]["verdict"] == "MISS"
    assert got["start-up, N=8"]["ratio"] == pytest.approx(0.36 / 1.4)


def test_without_mpi_the_mpi_relative_targets_say_no_mpi_and_the_others_are_judged():
    got = judged([r for r in passing_rows() if r["backend"] == "sim"], start=dict(START, mpi_s=None, mpi_all_s=[]))
    no_mpi = {name for name, t in got.items() if t["verdict"] == "NO MPI"}
    assert no_mpi == set(TARGET_NAMES[:18]) | {"start-up, N=8"}
    assert all(got[name]["ratio"] is None for name in no_mpi)
    assert got["barrier, N=2"]["value"] == 5.0  # one cell: its simulator figure is still shown
    assert got["allreduce busbw / copy bandwidth, N=2"]["verdict"] == "PASS"
    assert got["world.run rate, N=4"]["verdict"] == "PASS"


def test_what_was_not_measured_is_not_run_with_the_reason():
    rows = [r for r in passing_rows() if r["n"] != 16 and not (r["n"] == 2 and r["bytes"] == 8)]
    got = {t["name"]: t for t in verdicts(rows)}
    for c in DEFAULT_COLLECTIVES:
        name = f"{c}, N=16, every size" if c != "barrier" else "barrier, N=16"
        assert (got[name]["verdict"], got[name]["detail"]) == ("NOT RUN", "N=16 was not measured (-n)")
    assert got["allreduce 8 B, N=2"]["verdict"] == "NOT RUN"
    assert "of 8 B" in got["allreduce 8 B, N=2"]["detail"]
    for name, option in [("allreduce busbw / copy bandwidth, N=2", "copy"), ("world.run rate, N=4", "--runs 0"),
                         ("start-up, N=8", "--startup-repeats 0"), ("big world", "--big-n 0")]:
        assert got[name]["verdict"] == "NOT RUN" and option in got[name]["detail"]


def test_a_capped_sweep_says_so_on_the_targets_it_limits():
    got = judged(capped_at=16 * MiB)
    assert got["allgather, N=8, every size"]["detail"].endswith("sizes capped at 16 MiB (--cap-bytes)")
    assert "capped" not in got["barrier, N=8"]["detail"]
    assert "capped" not in got["allreduce >= 1 MiB, N=2"]["detail"]


def test_format_targets_has_a_line_per_target():
    table = report.format_targets(verdicts(passing_rows(), COPY, RATE, START, None))
    lines = table.splitlines()
    assert lines[0].split() == ["target", "simulator", "reference", "ratio", "limit", "verdict", "detail"]
    assert len(lines) == 2 + len(TARGET_NAMES) + 1
    assert "50.00 us" in lines[2] and "100.00 us" in lines[2] and "0.50" in lines[2] and "PASS" in lines[2]
    assert "1000/s" in table and "NOT RUN" in lines[-1]


# -- the plan and the options ------------------------------------------------------------------------------
def test_targets_plan_what_each_target_needs_by_default():
    opts = bench_cli.options(parse(["--targets", "--backend", "sim"]))
    plan = {step["n"]: step for step in opts["plan"]}
    assert list(plan) == [2, 4, 8, 16]
    assert plan[2]["collectives"] == plan[4]["collectives"] == ["allreduce", "barrier"]
    assert plan[8]["collectives"] == plan[16]["collectives"] == list(DEFAULT_COLLECTIVES)
    assert plan[2]["sizes"][0] == 8 and plan[2]["sizes"][-1] == 64 * MiB
    assert plan[16]["sizes"][-1] == opts["capped_at"] == 16 * MiB
    assert (opts["copy_bytes"], opts["runs"], opts["startup_repeats"], opts["big_n"]) == (64 * MiB, 500, 5, 256)
    assert opts["repeats"] == 3
    assert opts["repeat_every_size"]


def test_explicit_n_collective_and_max_bytes_still_apply_with_targets():
    opts = bench_cli.options(parse(["--targets", "--backend", "sim", "-n", "2,8", "--collective", "allreduce",
                                     "--max-bytes", "1K"]))
    assert [(s["n"], s["collectives"], s["sizes"][-1]) for s in opts["plan"]] == [
        (2, ["allreduce"], 1024), (8, ["allreduce"], 1024)]
    assert opts["capped_at"] is None and opts["copy_bytes"] == 1024


def test_without_targets_every_n_gets_the_same_sweep():
    opts = bench_cli.options(parse(["--backend", "sim"]))
    assert not opts["targets"] and opts["repeats"] == 1
    assert [s["n"] for s in opts["plan"]] == [2, 4, 8]
    assert all(s["collectives"] == list(DEFAULT_COLLECTIVES) and s["sizes"][-1] == 64 * MiB for s in opts["plan"])


@pytest.mark.parametrize("argv, message", [
    (["--big-n", "8"], "--big-n 8: applies only with --targets"),
    (["--runs", "5"], "--runs 5: applies only with --targets"),
    (["--targets", "--dtype", "float64"], "--dtype float64: the targets are defined on float32"),
    (["--targets", "--big-n", "-1"], "--big-n -1: must be >= 0"),
    (["--targets", "--min-bytes", "1M", "--cap-bytes", "1K"], "--cap-bytes 1024 is smaller than --min-bytes"),
])
def test_bad_target_options_exit_2_with_the_option_named(argv, message, capsys):
    assert bench_cli.run(parse(["--backend", "sim", *argv])) == 2
    assert message in capsys.readouterr().err


# -- real runs, tiny -------------------------------------------------------------------------------------
def _report(path) -> dict:
    with open(path) as fh:
        report = json.load(fh)
    names = [t["name"] for t in report["targets"]]
    assert names == TARGET_NAMES + ["big world, N=4"]
    assert all(t["verdict"] in targets.VERDICTS for t in report["targets"])
    assert {"bytes", "GBps", "seconds"} <= set(report["machine"]["copy_bandwidth"])
    assert report["run_rate"]["wrong"] == 0 and report["big_world"]["wrong"] == 0
    return report


@pytest.mark.slow
def test_targets_run_with_mpi_judges_every_target(tmp_path, capsys):
    from conftest import mpiexec_or_skip

    out = tmp_path / "bench.json"
    args = parse(["--targets", "-n", "2,4,8", "--max-bytes", "1M", "--cap-bytes", "1K", "--mpiexec",
                  mpiexec_or_skip(), "--json", str(out), *TINY])
    assert bench_cli.run(args) == 0
    report = _report(out)
    verdict = {t["name"]: t["verdict"] for t in report["targets"]}
    measured = {name for name in TARGET_NAMES if "N=16" not in name}
    assert all(verdict[name] in ("PASS", "MISS") for name in measured)
    assert all(verdict[name] == "NOT RUN" for name in TARGET_NAMES if "N=16" in name)
    assert max(r["bytes"] for r in report["results"] if r["n"] == 8) == 1024
    assert {r["repeats"] for r in report["results"]} == {3}
    small = next(t for t in report["targets"] if t["name"] == "barrier, N=4")
    assert "median of 3 passes (sim " in small["detail"]
    assert report["startup"]["mpi_s"] > 0
    printed = capsys.readouterr()
    assert "# targets:" in printed.out and "allreduce >= 1 MiB, N=2" in printed.out
    assert "targets: big world, N=4" in printed.err and "mpi N=8" in printed.err


@pytest.mark.slow
def test_targets_run_on_the_simulator_alone_says_no_mpi(tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = parse(["--targets", "--backend", "sim", "-n", "2", "--max-bytes", "1M", "--json", str(out), *TINY])
    assert bench_cli.run(args) == 0
    verdict = {t["name"]: t["verdict"] for t in _report(out)["targets"]}
    assert verdict["allreduce >= 1 MiB, N=2"] == verdict["start-up, N=8"] == "NO MPI"
    assert verdict["allreduce busbw / copy bandwidth, N=2"] in ("PASS", "MISS")
    assert verdict["world.run rate, N=4"] in ("PASS", "MISS")
    assert verdict["allreduce 8 B, N=4"] == "NOT RUN"
    assert "mpi N=" not in capsys.readouterr().err


# -- the recorded run in docs/performance.md ----------------------------------------------------------
def test_the_performance_report_shows_the_recorded_runs_verdicts_and_ratios():
    import pathlib
    import re

    docs = pathlib.Path(__file__).resolve().parent.parent / "docs"
    page = (docs / "performance.md").read_text()
    recorded = json.loads((docs / "bench.json").read_text())["targets"]
    rows = [line.split("|")[1:-1] for line in page.splitlines()
            if re.match(r"\| .+ \| (\*\*)?(PASS|MISS|REPORTED)(\*\*)? \|$", line)]
    assert [cells[-1].strip().strip("*") for cells in rows] == [t["verdict"] for t in recorded]
    shown = [cells[3].strip() for cells in rows]
    assert shown == ["" if t["ratio"] is None else f"{t['ratio']:.2f}" for t in recorded]
    assert "simdist bench --targets --json docs/bench.json --plot docs/bench.png" in page
    assert len(page.encode()) <= 15_000
