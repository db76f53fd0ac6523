"""``simdist check``: the sweep passes real backends and catches broken ones.

The broken communicators below are factories in the sense of ``simdist check
--backend MODULE:FACTORY``: ``factory(base)`` gets the world's communicator
and returns the object to check. Each wraps ``base`` with one fault; the
ranks import them from this module by name (``test_check:...``), which they
can because a world's ranks get the driver's ``sys.path``.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import time

import numpy as np
import pytest

import simdist
from simdist.cli import check as check_command
from simdist.reference import SWEEP_COLLECTIVES, sweep

HERE = "test_check"  # this module's name on the ranks (tests/ is on sys.path)


# ---------------------------------------------------------------------------
# broken communicators, one fault each


class Wrapper:
    """Delegates everything to ``base``; subclasses override one method.
    Deliberately not a Communicator subclass: the contract is duck-typed."""

    def __init__(self, base):
        self.base = base

    def __getattr__(self, name):
        return getattr(self.base, name)


class SummingMean(Wrapper):
    """allreduce(op="mean") returns the sum (nGraph's MNIST example's bug)."""

    def allreduce(self, x, op="sum"):
        return self.base.allreduce(x, op="sum" if op == "mean" else op)


class ReversedAllgather(Wrapper):
    """allgather stacks the ranks in reverse order."""

    def allgather(self, x):
        return self.base.allgather(x)[::-1].copy()


class OneUlpOnRank1(Wrapper):
    """allreduce of float64 sums is one ulp high on rank 1 only."""

    def allreduce(self, x, op="sum"):
        out = self.base.allreduce(x, op=op)
        if self.base.rank == 1 and out.dtype == np.float64 and op == "sum":
            out = np.nextafter(out, np.inf, out=np.empty_like(out))
        return out


class ReduceIntoInput(Wrapper):
    """reduce writes the result into the root's input, when it is writeable."""

    def reduce(self, x, root=0, op="sum"):
        out = self.base.reduce(x, root=root, op=op)
        if out is not None and isinstance(x, np.ndarray) and x.flags.writeable:
            x[...] = out
        return out


class NarrowsFloat64(Wrapper):
    """allreduce carries float64 as float32 and widens the result again."""

    def allreduce(self, x, op="sum"):
        if np.asarray(x).dtype == np.float64:
            return self.base.allreduce(np.asarray(x, np.float32), op=op).astype(np.float64)
        return self.base.allreduce(x, op=op)


class ReturnsFloat32(Wrapper):
    """allreduce returns float64 results as float32 (the dtype changes)."""

    def allreduce(self, x, op="sum"):
        if np.asarray(x).dtype == np.float64:
            return self.base.allreduce(np.asarray(x, np.float32), op=op)
        return self.base.allreduce(x, op=op)


class NoComplex(Wrapper):
    """Carries no complex dtype and says so on every rank, as the contract
    asks: where only the root has the array (broadcast, scatter), the root
    tells the others first, as the MPI backend does."""

    def _refuse(self, name, dtype):
        raise simdist.InvalidType(f"rank {self.base.rank}: {name}: dtype {dtype} is not supported by the "
                                  "no-complex backend")

    def __getattr__(self, name):
        method = getattr(self.base, name)
        if name not in ("allreduce", "reduce", "reduce_scatter", "allgather", "gather", "alltoall", "send"):
            return method

        def call(x, *args, **kwargs):
            if np.asarray(x).dtype.kind == "c":
                self._refuse(name, np.asarray(x).dtype)
            return method(x, *args, **kwargs)

        return call

    def _rooted(self, name, x, root):
        kind = self.base.broadcast(np.array(np.asarray(x).dtype.kind == "c") if self.base.rank == root else None,
                                   root=root)
        if kind:
            self._refuse(name, "complex")
        return getattr(self.base, name)(x, root=root)

    def broadcast(self, x, root=0):
        return self._rooted("broadcast", x, root)

    def scatter(self, x, root=0):
        return self._rooted("scatter", x, root)


class NoComplexOnRank0(NoComplex):
    """Says "not supported" for complex dtypes on rank 0 only."""

    def _refuse(self, name, dtype):
        if self.base.rank == 0:
            super()._refuse(name, dtype)


class HangsInScatter(Wrapper):
    """Rank 1 never arrives in a float16 scatter."""

    def scatter(self, x, root=0):
        if self.base.rank == 1 and root == 0:
            time.sleep(3600)
        return self.base.scatter(x, root=root)


class RaisesInGather(Wrapper):
    """gather raises on rank 2 for int16."""

    def gather(self, x, root=0):
        if self.base.rank == 2 and np.asarray(x).dtype == np.int16:
            raise RuntimeError("gather int16 is broken on rank 2")
        return self.base.gather(x, root=root)


class StaleResults(Wrapper):
    """allgather returns a view of one buffer that the next call overwrites."""

    def allgather(self, x):
        out = self.base.allgather(x)
        if out.dtype == np.int32 and out.size:
            buf = getattr(self, "_buf", None)
            if buf is None or buf.size < out.size:
                buf = self._buf = np.empty(1 << 20, np.uint8)
            view = buf[: out.nbytes].view(out.dtype).reshape(out.shape)
            view[...] = out
            return view
        return out


class NoOpBarrier(Wrapper):
    def barrier(self):
        return None


class WrongRank(Wrapper):
    @property
    def rank(self):
        return 0


def summing_mean(base):
    return SummingMean(base)


def reversed_allgather(base):
    return ReversedAllgather(base)


def one_ulp_on_rank_1(base):
    return OneUlpOnRank1(base)


def reduce_into_input(base):
    return ReduceIntoInput(base)


def narrows_float64(base):
    return NarrowsFloat64(base)


def returns_float32(base):
    return ReturnsFloat32(base)


def no_complex(base):
    return NoComplex(base)


def no_complex_on_rank_0(base):
    return NoComplexOnRank0(base)


def hangs_in_scatter(base):
    return HangsInScatter(base)


def raises_in_gather(base):
    return RaisesInGather(base)


def stale_results(base):
    return StaleResults(base)


def no_op_barrier(base):
    return NoOpBarrier(base)


def wrong_rank(base):
    return WrongRank(base)


def identity(base):
    return base


class ReducesWithoutBase(Wrapper):
    """Implements allreduce itself (here: the base's), and says so; the
    rest is the base's."""

    implements = frozenset({"allreduce"})


def says_it_implements_allsum(base):
    return base


says_it_implements_allsum.implements = {"allsum"}


# ---------------------------------------------------------------------------
# helpers


def failing(report) -> set[tuple]:
    return {(r["collective"], r["dtype"], r["op"]) for r in report["rows"] if r["verdict"] == "FAIL"}


def rows_of(report, verdict) -> list[dict]:
    return [r for r in report["rows"] if r["verdict"] == verdict]


def assert_all_pass(report):
    bad = [r for r in report["rows"] if r["verdict"] != "pass"]
    assert not bad, "\n".join(f"{r['collective']} {r['dtype']} {r['op']}: {r['verdict']}: {r['reason']}" for r in bad)
    assert report["ok"] and report["totals"]["fail"] == 0
    assert report["totals"]["max_ratio"] <= 1.0


FLOATS = ("float16", "float32", "float64", "complex64", "complex128")


# ---------------------------------------------------------------------------
# no false alarms


@pytest.mark.slow
@pytest.mark.parametrize("size", [1, 2, 3])
def test_quick_sweep_passes_on_the_simulator(size):  # at 4 ranks: the full sweep below
    report = sweep(size, quick=True)
    assert_all_pass(report)
    # every collective, dtype and op is there, and the float sums were bounded, not all exact
    assert {r["collective"] for r in report["rows"]} == {"rank/size", *SWEEP_COLLECTIVES}
    assert len(report["rows"]) == 413
    sums = [r for r in report["rows"] if r["collective"] == "allreduce" and r["op"] == "sum" and r["dtype"] in FLOATS]
    assert all(r["exact"] == (size == 1) for r in sums)


@pytest.mark.slow
def test_full_sweep_passes_on_the_simulator_at_4_ranks():
    report = sweep(4)
    assert_all_pass(report)
    assert report["totals"]["cases"] > 15000


@pytest.mark.slow
@pytest.mark.parametrize("size", [2, 4])
def test_quick_sweep_passes_on_open_mpi(size):
    from conftest import mpiexec_or_skip

    mpiexec_or_skip()
    report = sweep(size, backend="mpi", quick=True)
    assert_all_pass(report)


@pytest.mark.slow
def test_a_factory_that_returns_the_base_passes():
    assert_all_pass(sweep(2, factory=f"{HERE}:identity", quick=True, collectives=["allreduce", "send_recv"]))


def test_ops_narrow_the_rows_of_reductions_only():
    report = sweep(2, quick=True, collectives=["allreduce", "broadcast"], ops=["sum", "max"], dtypes=["int8", "float32"])
    assert [(r["collective"], r["dtype"], r["op"]) for r in report["rows"][1:]] == [
        ("allreduce", "int8", "sum"), ("allreduce", "int8", "max"), ("allreduce", "float32", "sum"),
        ("allreduce", "float32", "max"), ("broadcast", "int8", None), ("broadcast", "float32", None)]
    assert report["ops"] == ["sum", "max"]
    with pytest.raises(simdist.InvalidValue, match="'add'; choose from sum, prod"):
        sweep(2, ops=["add"])


def test_a_factory_that_implements_one_collective_is_checked_on_it_only():
    report = sweep(2, factory=f"{HERE}:ReducesWithoutBase", quick=True, dtypes=["int8"])
    assert {r["collective"] for r in report["rows"]} == {"rank/size", "allreduce"}
    assert report["implements"] == ["allreduce"] and report["ok"]
    header = check_command.format_table(report).splitlines()[0]
    assert header.startswith("only allreduce:") and "ReducesWithoutBase.implements" in header
    with pytest.raises(simdist.InvalidValue, match="implements only allreduce"):
        sweep(2, factory=f"{HERE}:ReducesWithoutBase", collectives=["broadcast"])
    with pytest.raises(simdist.InvalidValue, match="says_it_implements_allsum.implements=.*'allsum'; choose from"):
        sweep(2, factory=f"{HERE}:says_it_implements_allsum")


def test_sweep_reports_progress_up_to_the_total():
    calls = []
    sweep(2, quick=True, collectives=["barrier", "allgather"], progress=lambda *a: calls.append(a))
    done = [c[0] for c in calls]
    assert done == sorted(done) and done[-1] == calls[-1][1]
    assert all(isinstance(label, str) and label for _, _, label in calls)


# ---------------------------------------------------------------------------
# broken backends are caught by the right rows


@pytest.mark.slow
def test_mean_that_sums_fails_exactly_the_allreduce_mean_rows():
    report = sweep(2, factory=f"{HERE}:summing_mean", quick=True, collectives=["allreduce", "reduce_scatter"])
    assert failing(report) == {("allreduce", dt, "mean") for dt in FLOATS}
    reason = next(r["reason"] for r in report["rows"] if r["verdict"] == "FAIL")
    assert reason.startswith("shape (), exact inputs, call 1: ranks 0-1: 1 of 1 element(s) wrong; worst element 0:")
    assert "wrong" in reason and "(bit for bit)" in reason


@pytest.mark.slow
def test_reversed_allgather_fails_every_allgather_row_and_nothing_else():
    report = sweep(3, factory=f"{HERE}:reversed_allgather", quick=True,
                   collectives=["allgather", "gather", "alltoall"])
    assert failing(report) == {("allgather", str(dt), None) for dt in simdist._arguments.DTYPES}


def test_first_failure_runs_the_rows_up_to_the_first_failed_one_and_counts_the_rest():
    focus = dict(factory=f"{HERE}:summing_mean", quick=True, collectives=["allreduce", "reduce"],
                 dtypes=["int32", "float32", "float64"])
    whole = sweep(2, **focus)
    first = sweep(2, **focus, first_failure=True)
    names = lambda report: [(r["collective"], r["dtype"], r["op"]) for r in report["rows"]]
    assert first["first_failure"] and not first["ok"] and whole["totals"]["not_run"] == 0
    assert names(first) == names(whole)[:len(names(first))]  # the rows in order, up to the failed batch
    assert first["totals"]["not_run"] == len(whole["rows"]) - len(first["rows"]) > 0
    assert failing(first) and failing(first) <= failing(whole)
    for row in first["rows"]:  # what ran is judged as in the whole sweep
        assert row == whole["rows"][names(whole).index((row["collective"], row["dtype"], row["op"]))]


def test_one_ulp_on_one_rank_fails_as_ranks_disagreeing():
    report = sweep(2, factory=f"{HERE}:one_ulp_on_rank_1", quick=True, collectives=["allreduce"],
                   dtypes=["float32", "float64"])
    assert failing(report) == {("allreduce", "float64", "sum")}
    row = next(r for r in rows_of(report, "FAIL"))
    assert "ranks disagree" in row["reason"] and "rank(s) [1]" in row["reason"]


def test_input_modified_in_place_is_caught():
    report = sweep(2, factory=f"{HERE}:reduce_into_input", quick=True, collectives=["reduce"],
                   dtypes=["int32", "float32"])
    assert failing(report) == {("reduce", dt, op) for dt, op in
                               [("int32", o) for o in simdist._reduction.ops_for(np.dtype("int32"))]
                               + [("float32", o) for o in ("sum", "prod", "min", "max", "mean")]}
    assert all("modified its input in place" in r["reason"] for r in rows_of(report, "FAIL"))


def test_float64_narrowed_to_float32_fails_the_bound():
    report = sweep(2, factory=f"{HERE}:narrows_float64", quick=True, collectives=["allreduce"],
                   dtypes=["float32", "float64"])
    assert failing(report) == {("allreduce", "float64", op) for op in ("sum", "prod", "min", "max", "mean")}
    for row in rows_of(report, "FAIL"):  # exact inputs survive float32; random ones do not
        assert row["max_ratio"] > 1e6 and "random inputs" in row["reason"] and "element(s) wrong" in row["reason"]


def test_float64_returned_as_float32_fails_on_the_dtype():
    report = sweep(2, factory=f"{HERE}:returns_float32", quick=True, collectives=["allreduce"],
                   dtypes=["float64"])
    assert failing(report) == {("allreduce", "float64", op) for op in ("sum", "prod", "min", "max", "mean")}
    assert all("returned dtype float32; the contract says float64" in r["reason"] for r in rows_of(report, "FAIL"))


def test_result_overwritten_by_the_next_call_is_caught():
    report = sweep(2, factory=f"{HERE}:stale_results", quick=True, collectives=["allgather"],
                   dtypes=["int32", "int64"])
    assert failing(report) == {("allgather", "int32", None)}
    assert "changed when later calls ran" in rows_of(report, "FAIL")[0]["reason"]


def test_barrier_that_does_not_wait_is_caught():
    report = sweep(3, factory=f"{HERE}:no_op_barrier", quick=True, collectives=["barrier"])
    assert failing(report) == {("barrier", None, None)}
    assert "before rank" in rows_of(report, "FAIL")[0]["reason"]


def test_wrong_rank_attribute_fails_the_rank_size_row():
    report = sweep(2, factory=f"{HERE}:wrong_rank", quick=True, collectives=["barrier"])
    assert ("rank/size", None, None) in failing(report)
    assert "WrongRank.rank=0" in report["rows"][0]["reason"]
    first = sweep(2, factory=f"{HERE}:wrong_rank", quick=True, collectives=["barrier"], first_failure=True)
    assert [r["collective"] for r in first["rows"]] == ["rank/size"] and first["totals"]["not_run"] == 1


def test_unsupported_dtype_on_every_rank_is_reported_unsupported_not_failed():
    report = sweep(2, factory=f"{HERE}:no_complex", quick=True,
                   collectives=["allreduce", "broadcast", "scatter", "send_recv"], dtypes=["float32", "complex64"])
    assert report["ok"] and not failing(report)
    unsupported = {(r["collective"], r["dtype"], r["op"]) for r in rows_of(report, "unsupported")}
    assert unsupported == {("allreduce", "complex64", op) for op in ("sum", "prod", "mean")} | {
        ("broadcast", "complex64", None), ("scatter", "complex64", None), ("send_recv", "complex64", None)}
    assert all("not supported by the no-complex backend" in r["reason"] for r in rows_of(report, "unsupported"))


@pytest.mark.slow
def test_unsupported_on_one_rank_only_is_a_failure():
    report = sweep(2, factory=f"{HERE}:no_complex_on_rank_0", quick=True, collectives=["allreduce"],
                   dtypes=["complex64", "float32"], timeout=5)
    assert failing(report) == {("allreduce", "complex64", op) for op in ("sum", "prod", "mean")}
    assert not rows_of(report, "unsupported")


@pytest.mark.slow
def test_a_rank_raising_fails_its_row_and_the_sweep_goes_on():
    report = sweep(3, factory=f"{HERE}:raises_in_gather", quick=True, collectives=["gather"],
                   dtypes=["int8", "int16", "int32"])
    assert failing(report) == {("gather", "int16", None)}
    reason = rows_of(report, "FAIL")[0]["reason"]
    assert reason.startswith("rank 2 raised in gather int16") and "RuntimeError: gather int16 is broken" in reason
    # the raising case is left out and the rest of its batch queued again; stopping there keeps the failed row
    first = sweep(3, factory=f"{HERE}:raises_in_gather", quick=True, collectives=["gather"],
                  dtypes=["int8", "int16", "int32"], first_failure=True)
    assert failing(first) == {("gather", "int16", None)} and not first["ok"]
    assert [r["dtype"] for r in first["rows"][1:]] == ["int16"] and first["totals"]["not_run"] == 2  # one batch


@pytest.mark.slow
def test_a_hang_fails_its_row_after_the_timeout_and_the_sweep_goes_on():
    started = time.monotonic()
    report = sweep(2, factory=f"{HERE}:hangs_in_scatter", quick=True, collectives=["scatter", "alltoall"],
                   dtypes=["float16", "float32"], timeout=1)
    assert failing(report) == {("scatter", "float16", None), ("scatter", "float32", None)}
    assert all("hang" in r["reason"] for r in rows_of(report, "FAIL"))
    assert [r["verdict"] for r in report["rows"] if r["collective"] == "alltoall"] == ["pass", "pass"]
    assert time.monotonic() - started < 60


def test_a_factory_module_that_fails_to_import_is_named_with_its_error_and_line(tmp_path, monkeypatch):
    (tmp_path / "factory_syntax.py").write_text("def make(base):\n    return base\nx = (\n")
    (tmp_path / "factory_dependency.py").write_text("import numpy\nimport no_such_dependency_xyz\n")
    (tmp_path / "factory_raises.py").write_text("def make(base):\n    return base\nraise RuntimeError('no config')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(simdist.InvalidValue, match=r"importing module 'factory_syntax' raised SyntaxError: .*"
                                                   r"\(factory_syntax.py, line 3\)"):
        sweep(2, factory="factory_syntax:make")
    with pytest.raises(simdist.InvalidValue) as raised:  # found, but what it imports is not: not "cannot import"
        sweep(2, factory="factory_dependency:make")
    assert str(raised.value) == (f"factory='factory_dependency:make': importing module 'factory_dependency' raised "
                                 f"ModuleNotFoundError: No module named 'no_such_dependency_xyz' at "
                                 f"{tmp_path / 'factory_dependency.py'}:2 in <module>")
    with pytest.raises(simdist.InvalidValue, match=r"raised RuntimeError: no config at .*factory_raises.py:3 in"):
        sweep(2, factory="factory_raises:make")


def test_bad_arguments_are_refused_with_the_fix():
    with pytest.raises(simdist.InvalidValue, match="'module:callable'"):
        sweep(2, factory="no_colon")
    with pytest.raises(simdist.InvalidValue, match="cannot import module"):
        sweep(2, factory="no_such_module_xyz:make")
    with pytest.raises(simdist.InvalidValue, match="has no attribute 'nope'"):
        sweep(2, factory=f"{HERE}:nope")
    with pytest.raises(simdist.InvalidValue, match="choose from"):
        sweep(2, collectives=["allreduce", "allsum"])
    with pytest.raises(simdist.InvalidValue, match="backend='nccl'"):
        sweep(2, backend="nccl")
    with pytest.raises(simdist.InvalidValue, match="size=0"):
        sweep(0)


# ---------------------------------------------------------------------------
# the command line


def parse(argv):
    parser = argparse.ArgumentParser(prog="simdist")
    sub = parser.add_subparsers(dest="command", required=True)
    check_command.add_parser(sub)
    return parser.parse_args(["check", "--no-properties", *argv])  # the property suite is tested on its own


def test_cli_prints_the_table_and_exits_0_when_everything_passes(capsys):
    status = check_command.run(parse(["-n", "2", "--quick", "--collectives", "allreduce,barrier",
                                      "--dtypes", "float32,int8"]))
    out, err = capsys.readouterr()
    assert status == 0
    assert "collective" in out and "max err/bound" in out
    assert any(line.split()[:3] == ["allreduce", "float32", "sum"] and line.split()[-1] == "pass"
               for line in out.splitlines())
    assert "passed" in out.splitlines()[-1]
    assert "cases" in err  # the progress display, as plain lines when stderr is not a TTY


def test_cli_writes_json_and_exits_1_on_a_broken_backend(tmp_path, capsys):
    path = tmp_path / "report.json"
    status = check_command.run(parse(["-n", "3", "--backend", f"{HERE}:reversed_allgather", "--quick",
                                      "--collectives", "allgather", "--dtypes", "float64,uint8", "--json", str(path)]))
    out, _ = capsys.readouterr()
    assert status == 1
    report = json.loads(path.read_text())
    assert report["factory"] == f"{HERE}:reversed_allgather" and report["backend"] == "sim"
    verdicts = {(r["collective"], r["dtype"]): r["verdict"] for r in report["rows"]}
    assert verdicts == {("rank/size", None): "pass", ("allgather", "float64"): "FAIL", ("allgather", "uint8"): "FAIL"}
    assert "FAIL" in out and "rank" in out


def test_cli_json_to_stdout_is_valid_json_even_with_infinite_ratios(capsys):
    status = check_command.run(parse(["-n", "2", "--factory", f"{HERE}:summing_mean", "--quick",
                                      "--collectives", "allreduce", "--dtypes", "float32", "--json", "-"]))
    out, _ = capsys.readouterr()
    assert status == 1
    report = json.loads(out)  # strict: no bare Infinity
    row = next(r for r in report["rows"] if r["op"] == "mean")
    assert row["verdict"] == "FAIL" and row["max_ratio"] == "inf"


def test_progress_updates_one_line_on_a_terminal_and_clears_it():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    progress = check_command._Progress(stream)
    progress(0, 10, "allreduce bool min")
    progress(10, 10, "barrier")
    progress.finish()
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") == 4 and "10/10 cases (100%)" in text
    assert text.endswith("\r") and text.rsplit("\r", 2)[-2].strip() == ""


def test_cli_checks_several_sizes_with_one_report_each_and_a_combined_status(tmp_path, capsys):
    path = tmp_path / "report.json"
    status = check_command.run(parse(["-n", "1-2", "--backend", f"{HERE}:reversed_allgather", "--quick",
                                      "--collectives", "allgather", "--dtypes", "uint8", "--json", str(path)]))
    out, _ = capsys.readouterr()
    assert status == 1  # reversing one rank's blocks changes nothing; two ranks' fails
    report = json.loads(path.read_text())
    assert report["sizes"] == [1, 2] and not report["ok"]
    assert [(r["size"], r["ok"]) for r in report["reports"]] == [(1, True), (2, False)]
    assert "== 1 rank(s) ==" in out and "== 2 rank(s) ==" in out
    assert out.rstrip().splitlines()[-1] == "2 sizes: failed on 2 rank(s)"
    assert check_command.run(parse(["-n", "2,3", "--quick", "--collectives", "barrier"])) == 0


def test_cli_first_failure_stops_the_sweep_and_the_sizes_after_it(capsys):
    status = check_command.run(parse(["-n", "2,3", "-x", "--backend", f"{HERE}:summing_mean", "--quick",
                                      "--collectives", "allreduce,reduce", "--dtypes", "float64,int32"]))
    out, _ = capsys.readouterr()
    assert status == 1
    assert "== 2 rank(s) ==" in out and "== 3 rank(s) ==" not in out
    assert "FAIL allreduce float64 mean" in out
    summary = [line for line in out.splitlines() if line.endswith("rows not run")]
    assert len(summary) == 1, out
    shown, not_run = re.fullmatch(r"(\d+) rows: .*; stopped at the first failure, (\d+) rows not run",
                                  summary[0]).groups()
    assert int(shown) + int(not_run) == 1 + 2 * (10 + 5)  # rank/size; allreduce and reduce: int32's ops, float64's
    assert 0 < int(not_run) < 15  # the reduce rows of the failed batch ran, the rest did not
    assert out.rstrip().splitlines()[-1] == "2 sizes: failed on 2 rank(s); stopped at the first failure, not run on 3"


def test_cli_refuses_bad_arguments_with_status_2(capsys):
    assert check_command.run(parse(["-n", "0"])) == 2
    assert check_command.run(parse(["-n", "2-x"])) == 2
    assert check_command.run(parse(["-n", "2", "--backend", "nosuchmodule_xyz:f"])) == 2
    assert check_command.run(parse(["-n", "2", "--backend", f"{HERE}:identity", "--factory", f"{HERE}:identity"])) == 2
    err = capsys.readouterr().err
    assert "cannot import module 'nosuchmodule_xyz'" in err and "either" in err
    assert "-n '2-x': give a size (4), a range (2-5) or a list (2,3,5,8)" in err


@pytest.mark.slow
def test_simdist_check_is_a_subcommand_of_the_cli(tmp_path):
    import json

    import simdist.cli

    out = tmp_path / "check.json"
    assert simdist.cli.main(["check", "-n", "2", "--quick", "--collectives", "allreduce", "--ops", "sum",
                             "--dtypes", "float32", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["rows"] and all(row["verdict"] == "pass" for row in report["rows"])
    props = report["properties"]    # the property suite runs after the sweep, narrowed alike
    assert props["ok"] and props["failed"] == [] and props["seed"] == 0
    assert "--simdist-collectives allreduce --simdist-ops sum --simdist-dtypes float32" in props["command"]
    assert 8 <= props["passed"] <= 20   # of some 146 cases: those of allreduce with sum
