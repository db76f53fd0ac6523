"""The property suite against real backends and against every fake: the kill table."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

import fake_backends
from conftest import KILL_FOCUS, installed_or_skip, mpiexec_or_skip
from properties.kill_table import kill_table


def _suite(tmp_path, *args, examples=10, env=None):
    env = dict(os.environ if env is None else env)
    env.pop("SIMDIST_PROPERTY_EXAMPLES", None)
    if examples is not None:
        env["SIMDIST_PROPERTY_EXAMPLES"] = str(examples)
    return subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "properties", "-p", "no:cacheprovider",
                           *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)


def _shows_example(out: str) -> bool:
    """Hypothesis' report of the example (its heading changed in 6.16x)."""
    return "Falsifying example" in out or "Failing test case" in out


def _counts(out: str) -> dict:
    return {word: int(n) for n, word in re.findall(r"\b(\d+) (passed|failed|skipped|deselected)\b", out)}


def _failed(out: str) -> list[str]:
    return re.findall(r"^FAILED \S+::(\S+)", out, re.M)


@pytest.mark.slow
def test_the_property_suite_passes_on_the_simulator_at_two_and_five_ranks(tmp_path):
    """Every case of every property, a few examples each, at an even and an
    odd size (at odd ones a mean's division by the size rounds; the kill
    table runs 3 ranks)."""
    done = _suite(tmp_path, "--simdist-np", "2,5", examples=3)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    counts = _counts(done.stdout)
    assert counts.get("passed", 0) >= 2 * 140 and "skipped" not in counts, done.stdout[-2000:]


@pytest.mark.slow
def test_a_ring_that_aliases_its_input_is_caught_and_the_correct_ring_passes_at_an_even_and_an_odd_size(tmp_path):
    """With the default number of examples, the cases of allreduce catch the
    ring that writes into the caller's array at an even and an odd size, and
    pass the correct ring (each case's examples depend only on its id, so the
    cases of allreduce alone find what the whole suite finds)."""
    done = _suite(tmp_path, "--simdist-backend", "fake_backends:ring_aliases_input,fake_backends:ring_allreduce",
                  "--simdist-np", "2,3", "--simdist-collectives", "allreduce", "--simdist-first-failure",
                  "-rf", examples=None)
    failed = _failed(done.stdout)
    assert all("ring_aliases_input" in name for name in failed), done.stdout[-4000:]
    for size in (2, 3):
        assert f"test_inputs_are_never_modified[fake_backends:ring_aliases_input-np{size}-allreduce-sum]" in failed, \
            done.stdout[-4000:]
    assert _counts(done.stdout)["passed"] >= 2 * 60


@pytest.fixture(scope="module")
def table():
    # A focus (conftest.KILL_FOCUS) keeps the time in check: the legal backends
    # run every case left, the faulty ones until their first failure (a
    # failed property; a failed row of the sweep).
    # (The torch column: tests/test_properties_torch_column.py, which runs beside this file.)
    rows = kill_table(**KILL_FOCUS, sweep_first_failure=True)
    return {row["backend"].partition(":")[2] or "sim": row for row in rows}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(fake_backends.FAULTY))
def test_the_property_suite_and_simdist_check_catch_every_faulty_fake(table, name):
    row = table[name]
    assert row["properties_failed"] >= 1, f"no property caught {name}: {row}"
    assert not row["check"]["ok"] and row["check"]["failed_rows"] >= 1, f"simdist check missed {name}: {row}"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sim", *sorted(fake_backends.LEGAL)])
def test_the_simulator_and_legal_nondeterminism_pass_both(table, name):
    row = table[name]
    assert row["properties_failed"] == 0 and row["properties_run"] >= 60, f"{name}: {row}"
    assert row["check"]["ok"], f"simdist check failed {name}: {row['check']}"


@pytest.mark.slow
@pytest.mark.parametrize("size", [2, 3])
def test_the_property_suite_passes_on_open_mpi(tmp_path, size):
    mpiexec_or_skip()
    done = _suite(tmp_path, "--simdist-backend", "mpi", "--simdist-np", str(size), "-q", "--hypothesis-seed=0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert _counts(done.stdout).get("passed", 0) >= 140


@pytest.mark.slow
def test_a_failing_property_prints_its_example_seed_and_a_command_that_replays_it(tmp_path):
    done = _suite(tmp_path, "--simdist-backend", "fake_backends:wrong_reduce_scatter_block", "-q", "-x",
                  "--hypothesis-seed=7", "properties.test_collectives")
    assert done.returncode == 1
    out = done.stdout
    assert _shows_example(out) and "seed 7; replay this failure with:" in out
    command = out.split("replay this failure with:\n", 1)[1].splitlines()[0].strip()
    assert "--hypothesis-seed=7" in command and "wrong_reduce_scatter_block" in command
    failed = re.search(r"FAILED \S+::(\w+)", out).group(1)
    replay = subprocess.run(shlex.split(command) + ["-p", "no:cacheprovider", "-q"], cwd=tmp_path,
                            env=dict(os.environ, SIMDIST_PROPERTY_EXAMPLES="10"),
                            stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert replay.returncode == 1 and f"::{failed}" in replay.stdout and _shows_example(replay.stdout)


@pytest.mark.slow
def test_comm_fixture_runs_the_test_body_on_every_rank(tmp_path):
    (tmp_path / "test_mine.py").write_text(
        "import numpy as np, pytest\n"
        "@pytest.mark.world_size(3)\n"
        "def test_sum_of_ranks(comm):\n"
        "    assert comm.allreduce(np.array(comm.rank)) == 3\n"
        "def test_a_rank_that_fails(comm):\n"
        "    assert comm.rank != 1, 'rank 1 disagrees'\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py"],
                          cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert "1 failed, 1 passed" in done.stdout, done.stdout
    assert "rank 1 disagrees" in done.stdout


COMM_GIVEN = '''
import numpy as np
import pytest
from hypothesis import given, strategies as st


@pytest.mark.world_size(3)
@given(st.integers(0, 10**6))
def test_every_rank_gets_the_example(comm, x):
    assert len({int(v) for v in comm.allgather(np.array(x))}) == 1


@pytest.mark.world_size(3)
@given(st.integers(0, 10**6))
def test_rank_1_refuses_large_values(comm, x):
    assert comm.rank != 1 or x < 1000, f"rank 1 got {x}"
'''


@pytest.mark.slow
def test_a_hypothesis_test_taking_comm_runs_each_example_on_every_rank_and_shrinks_a_failure_of_one(tmp_path):
    (tmp_path / "test_given.py").write_text(COMM_GIVEN)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_given.py"],
                          cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-3000:]
    assert _failed(done.stdout) == ["test_rank_1_refuses_large_values"]
    assert _shows_example(done.stdout) and "x=1000," in done.stdout, done.stdout[-3000:]  # shrunk: the least failing
    assert "rank 1 got 1000" in done.stdout


DRAWS = '''
import os

import pytest
from hypothesis import given, strategies as st


@pytest.mark.world_size(1)
@given(st.integers(0, 10**9))
def test_draws(world, x):
    with open(os.environ["DRAWS"], "a") as fh:
        fh.write(f"{x}\\n")
    assert not os.environ.get("FAIL") or x < 10**6, "too large"
'''


def _draws(tmp_path, run: str, *args, ci: str | None = None, fail: bool = False, source: str = DRAWS,
           env: dict | None = None):
    """The values a test (``source``) draws in one session, and the session's output."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("CI", "FAIL")}, **(env or {})}
    if fail:
        env["FAIL"] = "1"
    if ci is not None:
        env["CI"] = ci
    env["DRAWS"] = str(tmp_path / f"{run}.txt")
    (tmp_path / "test_draws.py").write_text(source)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_draws.py", *args],
                          cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    return (tmp_path / f"{run}.txt").read_text().split(), done.stdout


@pytest.mark.slow
def test_examples_are_derived_from_the_test_id_unless_exploring_and_always_in_ci(tmp_path):
    first, out = _draws(tmp_path, "first")
    again, _ = _draws(tmp_path, "again")
    assert first == again and len(set(first)) > 10, "the same command must draw the same examples"
    assert "examples seeded from each test's id" in out
    explored, out = _draws(tmp_path, "explored", "--simdist-explore")
    explored_again, _ = _draws(tmp_path, "explored_again", "--simdist-explore")
    assert explored != first and explored != explored_again
    assert re.search(r"hypothesis seed \d+ \(--simdist-explore\)", out)
    in_ci, out = _draws(tmp_path, "in_ci", "--simdist-explore", ci="true")
    assert in_ci == first and "CI is set: --simdist-explore ignored" in out


@pytest.mark.slow
def test_a_failure_names_its_derived_seed_and_its_replay_draws_the_same_examples(tmp_path):
    draws, out = _draws(tmp_path, "failing", fail=True)
    assert "1 failed" in out and _shows_example(out)
    seed = re.search(r"seed (\d+); replay this failure with:\n\s*(.*)", out)
    assert seed, out[-3000:]
    command = shlex.split(seed.group(2))
    assert f"--hypothesis-seed={seed.group(1)}" in command and command[3].endswith("test_draws.py::test_draws")
    env = dict(os.environ, DRAWS=str(tmp_path / "replay.txt"), FAIL="1")
    replay = subprocess.run(command + ["-p", "no:cacheprovider", "-q"], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert "1 failed" in replay.stdout
    assert (tmp_path / "replay.txt").read_text().split() == draws


FLOAT_DRAWS = '''
import os

import pytest
from hypothesis import given, strategies as st

if os.environ.get("IMPORT_MORE"):
    import more_constants  # noqa: F401  (as one rank of a job may import a module another has not)


@pytest.mark.world_size(1)
@given(st.lists(st.floats(-1e3, 1e3), min_size=20, max_size=20))
def test_draws(world, xs):
    with open(os.environ["DRAWS"], "a") as fh:
        fh.write(" ".join(map(repr, xs)) + "\\n")
'''


@pytest.mark.slow
def test_a_seed_draws_the_same_examples_whatever_else_the_process_has_imported(tmp_path):
    # Hypothesis mixes constants from the source of imported local modules into
    # its draws; under mpiexec each rank draws for itself, so they must not count.
    constants = ", ".join(f"{777 + k / 64!r}" for k in range(300))
    (tmp_path / "more_constants.py").write_text(f"VALUES = [{constants}]\n")
    draws = {}
    for run, more in (("plain", ""), ("more", "1"), ("more_again", "1")):
        draws[run], out = _draws(tmp_path, run, "--hypothesis-seed=3", source=FLOAT_DRAWS, env={"IMPORT_MORE": more})
        assert "1 passed" in out, out[-3000:]
    assert len(draws["plain"]) >= 1000
    assert draws["more"] == draws["plain"] == draws["more_again"]


@pytest.mark.slow
def test_a_backend_whose_name_has_a_dash_gets_the_same_seed_and_a_replay_that_runs(tmp_path):
    installed_or_skip("torch", "torch")
    _, out = _draws(tmp_path, "both", "--simdist-backend", "sim,torch-gloo", fail=True)
    assert "2 failed" in out, out[-3000:]
    replays = re.findall(r"seed (\d+); replay this failure with:\n\s*(.*)", out)
    assert len(replays) == 2 and replays[0][0] == replays[1][0], replays  # the seed ignores the backend
    command = shlex.split(next(command for _, command in replays if "torch-gloo" in command))
    assert command[3].endswith("test_draws.py::test_draws"), command
    env = dict(os.environ, DRAWS=str(tmp_path / "replay.txt"), FAIL="1")
    replay = subprocess.run(command + ["-p", "no:cacheprovider", "-q"], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert "1 failed" in replay.stdout, replay.stdout[-3000:] + replay.stderr[-2000:]


def _collect(tmp_path, *args) -> list[str]:
    done = _suite(tmp_path, "--collect-only", "-q", *args)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return [line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line]


@pytest.mark.slow
def test_each_collective_and_op_is_a_case_of_its_own_and_the_focus_narrows_the_suite(tmp_path):
    everything = _collect(tmp_path)
    assert {"test_inputs_are_never_modified[allreduce-sum]", "test_inputs_are_never_modified[broadcast]",
            "test_every_collective_gives_what_the_contract_allows[reduce_scatter-band]",
            "test_reduce_then_broadcast_equals_allreduce[mean]"} <= set(everything)
    selected = _collect(tmp_path, "-k", "inputs_are_never_modified and allreduce-sum")
    assert selected == ["test_inputs_are_never_modified[allreduce-sum]"]
    focused = _collect(tmp_path, "--simdist-collectives", "allreduce", "--simdist-ops", "sum,mean")
    assert "test_inputs_are_never_modified[allreduce-mean]" in focused
    assert not [t for t in focused if "[" in t and not re.search(r"\[(allreduce-)?(sum|mean)\]", t)], focused
    assert "test_alltoall_twice_is_the_identity" not in focused
    assert "test_a_data_parallel_step_equals_one_device_on_the_global_batch" in focused


IMPLEMENTS = '''
def make(base):
    return base


make.implements = {"allreduce"}
'''


@pytest.mark.slow
def test_a_factory_that_implements_one_collective_is_tested_on_it_only(tmp_path):
    (tmp_path / "onlyallreduce.py").write_text(IMPLEMENTS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    done = _suite(tmp_path, "--collect-only", "-q", "--simdist-backend", "onlyallreduce:make", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    names = [line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line]
    assert "test_inputs_are_never_modified[allreduce-sum]" in names
    assert not [n for n in names if re.search(r"\[(reduce|broadcast|gather|scatter|alltoall|allgather)", n)]


@pytest.mark.slow
def test_the_dtype_focus_narrows_what_the_strategies_draw(tmp_path):
    (tmp_path / "test_dtypes.py").write_text(
        "import os\n"
        "from hypothesis import given, strategies as st\n"
        "from properties import strategies as s\n"
        "def test_dtypes(world):\n"
        "    @given(s.dtypes())\n"
        "    def draw(dtype):\n"
        "        with open(os.environ['DRAWS'], 'a') as fh:\n"
        "            fh.write(f'{dtype}\\n')\n"
        "    draw()\n")
    env = dict(os.environ, DRAWS=str(tmp_path / "dtypes.txt"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_dtypes.py",
                           "--simdist-np", "1", "--simdist-dtypes", "int8,float32"],
                          cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    assert "1 passed" in done.stdout, done.stdout[-3000:]
    assert set((tmp_path / "dtypes.txt").read_text().split()) == {"int8", "float32"}
