"""``simdist bench``: sizes, nccl-tests' bandwidth factors, the JSON report, wrong results counted, MPI, the plot."""

from __future__ import annotations

import argparse
import json
import os
import weakref

import numpy as np
import pytest

from simdist.bench import report, sweep
from simdist.bench.cells import COLLECTIVES, bus_factor, layout, make_case, parse_bytes, sizes, timed
from simdist.cli import bench as bench_cli

FIELDS = {"backend", "collective", "n", "bytes", "dtype", "time_us", "time_min_us", "time_max_us",
          "algbw_GBps", "busbw_GBps", "wrong", "repeats", "time_us_runs"}
TINY = ["--warmup", "2", "--iters", "3", "--large-warmup", "1", "--large-iters", "2"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="simdist")
    bench_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


@pytest.mark.parametrize("text, value", [
    ("8", 8), ("1K", 1024), ("64KiB", 64 << 10), ("64MiB", 64 << 20), ("1M", 1 << 20), ("2g", 2 << 30),
    ("512B", 512), ("4kb", 4096),
])
def test_parse_bytes_accepts_binary_units(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "K", "1.5M", "-8", "8X", "1 MB extra"])
def test_parse_bytes_rejects_garbage_with_an_example(text):
    with pytest.raises(ValueError, match="e.g. 8, 1K"):
        parse_bytes(text)


def test_sizes_are_powers_of_two_from_min_to_max():
    assert sizes(8, 64) == [8, 16, 32, 64]
    assert sizes(8, 100) == [8, 16, 32, 64]
    assert sizes(1 << 10, 1 << 10) == [1024]
    assert len(sizes(8, 64 << 20)) == 24
    with pytest.raises(ValueError):
        sizes(64, 8)


@pytest.mark.parametrize("collective, n, factor", [
    ("allreduce", 2, 1.0), ("allreduce", 4, 1.5), ("allreduce", 8, 1.75),
    ("allgather", 4, 0.75), ("reduce_scatter", 4, 0.75), ("alltoall", 8, 0.875), ("allgather", 1, 0.0),
    ("broadcast", 8, 1.0), ("reduce", 4, 1.0),
])
def test_bus_factor_is_nccl_tests(collective, n, factor):
    assert bus_factor(collective, n) == pytest.approx(factor)


def test_barrier_has_no_bus_factor():
    with pytest.raises(ValueError, match="barrier"):
        bus_factor("barrier", 4)


def test_layout_uses_nccl_tests_sizes():
    # allreduce/broadcast/reduce: S is each rank's buffer
    assert layout("allreduce", 4, 1024, 4) == (256, 1024)
    # allgather: S is the gathered result, n parts of S/n; reduce_scatter, alltoall likewise
    assert layout("allgather", 4, 1024, 4) == (64, 1024)
    assert layout("reduce_scatter", 4, 1024, 4) == (64, 1024)
    # at least one element per part: 8 B of float32 on 4 ranks moves 16 B
    assert layout("alltoall", 4, 8, 4) == (1, 16)
    assert layout("barrier", 4, 8, 4) == (0, 0)


@pytest.mark.parametrize("collective", [c for c in COLLECTIVES if c != "barrier"])
def test_cases_are_what_the_collective_computes(collective):
    """The expected results, checked against a plain numpy model of each collective."""
    n, count = 3, 10
    xs = [make_case(collective, n, r, count, "float32").x for r in range(n)]
    for r in range(n):
        want = make_case(collective, n, r, count, "float32").want
        model = {"allreduce": lambda: sum(xs), "reduce": lambda: sum(xs) if r == 0 else None,
                 "broadcast": lambda: xs[0], "allgather": lambda: np.stack(xs),
                 "reduce_scatter": lambda: sum(xs)[r], "alltoall": lambda: np.stack([x[r] for x in xs])}[collective]()
        assert (want is None and model is None) or np.array_equal(want, model)


def _check_report(path, backends, collectives, ns):
    with open(path) as fh:
        report = json.load(fh)
    rows = report["results"]
    assert {"date", "cpu_model", "python", "numpy"} <= set(report["machine"])
    assert rows and all(set(r) == FIELDS for r in rows)
    assert {(r["backend"], r["collective"], r["n"]) for r in rows} == {
        (b, c, n) for b in backends for c in collectives for n in ns}
    return rows


def test_the_timed_loop_holds_one_result_at_a_time():
    # As the MPI side's one receive buffer: a result the loop still held
    # during the next call would make the simulator's results take turns
    # in two buffers.
    class Result:
        pass

    results, alive_at_call = [], []

    def call():
        alive_at_call.append(sum(r() is not None for r in results))
        result = Result()
        results.append(weakref.ref(result))
        return result

    timed(call, lambda got: True, warmup=3, iters=5, barrier=lambda: None)
    assert len(alive_at_call) == 8 and max(alive_at_call) == 0


def test_sim_run_writes_the_json_schema_with_nothing_wrong(tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = parse(["-n", "2", "--backend", "sim", "--collective", "allreduce,allgather",
                  "--min-bytes", "8", "--max-bytes", "16", "--json", str(out), *TINY])
    assert bench_cli.run(args) == 0
    rows = _check_report(out, ["sim"], ["allreduce", "allgather"], [2])
    assert sorted(r["bytes"] for r in rows) == [8, 8, 16, 16]
    assert all(r["wrong"] == 0 and r["dtype"] == "float32" for r in rows)
    for r in rows:
        assert r["time_min_us"] <= r["time_us"] <= r["time_max_us"]
        assert r["algbw_GBps"] == pytest.approx(r["bytes"] / r["time_us"] / 1e3)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * bus_factor(r["collective"], 2))
    table = capsys.readouterr().out
    assert "busbw(GB/s)" in table and "#wrong" in table


def test_repeats_measure_the_cells_below_1_mib_again_and_keep_the_median(tmp_path):
    out = tmp_path / "bench.json"
    args = parse(["-n", "2", "--backend", "sim", "--collective", "allreduce,barrier", "--min-bytes", "512K",
                  "--max-bytes", "1M", "--repeats", "3", "--json", str(out), *TINY])
    assert bench_cli.run(args) == 0
    rows = {(r["collective"], r["bytes"]): r for r in _check_report(out, ["sim"], ["allreduce", "barrier"], [2])}
    assert {k: r["repeats"] for k, r in rows.items()} == {
        ("allreduce", 512 << 10): 3, ("allreduce", 1 << 20): 1, ("barrier", 0): 3}
    for r in rows.values():
        assert len(r["time_us_runs"]) == r["repeats"] and r["wrong"] == 0
        assert r["time_us"] == sorted(r["time_us_runs"])[r["repeats"] // 2]
        assert r["time_min_us"] <= r["time_us"] <= r["time_max_us"]
        if r["collective"] != "barrier":
            assert r["algbw_GBps"] == pytest.approx(r["bytes"] / r["time_us"] / 1e3)


def test_merge_repeats_keeps_the_median_the_extremes_and_every_wrong_result():
    def row(t, lo, hi, wrong):
        return {"backend": "sim", "collective": "allgather", "n": 4, "bytes": 64, "dtype": "float32",
                "time_us": t, "time_min_us": lo, "time_max_us": hi, "algbw_GBps": 64 / t / 1e3,
                "busbw_GBps": 64 / t / 1e3 * 0.75, "wrong": wrong}
    (merged,) = sweep.merge_repeats([row(30.0, 29, 31, 0), row(10.0, 9, 12, 1), row(20.0, 18, 21, 0)])
    assert merged["time_us"] == 20.0 and merged["time_us_runs"] == [30.0, 10.0, 20.0] and merged["repeats"] == 3
    assert (merged["time_min_us"], merged["time_max_us"], merged["wrong"]) == (9, 31, 1)
    assert merged["algbw_GBps"] == pytest.approx(64 / 20.0 / 1e3)
    assert merged["busbw_GBps"] == pytest.approx(64 / 20.0 / 1e3 * 0.75)


def wrong_broadcast(collective, n, rank, count, dtype):
    """The right input, but expects one element off by one: every check fails."""
    case = make_case(collective, n, rank, count, dtype)
    want = case.want.copy()
    want[0] += 1
    return case._replace(want=want)


def test_a_wrong_result_is_counted_and_fails_the_run(tmp_path):
    out = tmp_path / "bench.json"
    args = parse(["-n", "2", "--backend", "sim", "--collective", "broadcast", "--min-bytes", "8",
                  "--max-bytes", "8", "--json", str(out), *TINY])
    assert bench_cli.run(args, case=wrong_broadcast) == 1
    (row,) = _check_report(out, ["sim"], ["broadcast"], [2])
    assert row["wrong"] == 2 * (2 + 1)  # each of 2 ranks: 2 warm-up results and the last timed one


@pytest.mark.slow
def test_mpi_backend_runs_under_mpiexec(tmp_path):
    from conftest import mpiexec_or_skip

    mpiexec = mpiexec_or_skip()
    out = tmp_path / "bench.json"
    args = parse(["-n", "2", "--backend", "mpi", "--collective", "allreduce,reduce_scatter,barrier",
                  "--min-bytes", "1K", "--max-bytes", "1K", "--mpiexec", mpiexec, "--json", str(out), *TINY])
    assert bench_cli.run(args) == 0
    rows = _check_report(out, ["mpi"], ["allreduce", "reduce_scatter", "barrier"], [2])
    assert all(r["wrong"] == 0 for r in rows)
    assert {r["collective"]: r["bytes"] for r in rows} == {"allreduce": 1024, "reduce_scatter": 1024, "barrier": 0}


@pytest.mark.slow
def test_plot_writes_a_png(tmp_path):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("matplotlib is not installed: pip install 'simdist[bench]'")
    png = tmp_path / "bench.png"
    args = parse(["-n", "2", "--backend", "sim", "--collective", "allreduce,barrier", "--min-bytes", "8",
                  "--max-bytes", "64", "--plot", str(png), *TINY])
    assert bench_cli.run(args) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["--min-bytes", "1M", "--max-bytes", "8"], "larger than --max-bytes"),
    (["--iters", "0"], "--iters 0"),
    (["--repeats", "0"], "--repeats 0: must be >= 1"),
])
def test_bad_options_exit_2_with_the_option_named(argv, message, capsys):
    assert bench_cli.run(parse(["--backend", "sim", *argv])) == 2
    assert message in capsys.readouterr().err


def test_bad_collective_is_rejected_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        parse(["--collective", "allreduce,gossip"])
    assert "choose from allreduce" in capsys.readouterr().err


def test_plot_without_matplotlib_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes ``import matplotlib`` fail
    row = {"backend": "sim", "collective": "allreduce", "n": 2, "bytes": 8, "time_us": 1.0, "busbw_GBps": 0.1}
    with pytest.raises(RuntimeError, match=r"pip install 'simdist\[bench\]'"):
        report.plot([row], "unused.png")
