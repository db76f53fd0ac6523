"""The property suite against real backends and against every fake: the kill table."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

import fake_backends
from conftest import mpiexec_or_skip
from properties.kill_table import kill_table


def _suite(tmp_path, *args, examples=10):
    env = dict(os.environ, SIMDIST_PROPERTY_EXAMPLES=str(examples))
    return subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "properties", "-p", "no:cacheprovider",
                           *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)


def _shows_example(out: str) -> bool:
    """Hypothesis' report of the example (its heading changed in 6.16x)."""
    return "Falsifying example" in out or "Failing test case" in out


def _suite_passes_on_the_simulator(tmp_path, size):
    done = _suite(tmp_path, "--simdist-np", str(size), "--hypothesis-seed=0", examples=3)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    passed = re.search(r"\b(\d+) passed\b", done.stdout)
    assert passed and int(passed.group(1)) >= 18 and "skipped" not in done.stdout, done.stdout[-2000:]


def test_the_property_suite_passes_on_the_simulator_at_three_ranks(tmp_path):
    """Every property, a few examples each: the fast tier's run of the suite,
    at an odd size, where a mean's division by the size rounds."""
    _suite_passes_on_the_simulator(tmp_path, 3)


@pytest.mark.slow
@pytest.mark.parametrize("size", [2, 5])
def test_the_property_suite_passes_on_the_simulator_at_other_sizes(tmp_path, size):
    _suite_passes_on_the_simulator(tmp_path, size)


@pytest.fixture(scope="module")
def table():
    rows = kill_table(size=4, examples=10, seed=0, timeout=3.0, first_failure=True,
                      dtypes=["float64", "int32", "complex128"])
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
    assert row["properties_failed"] == 0 and row["properties_run"] >= 18, f"{name}: {row}"
    assert row["check"]["ok"], f"simdist check failed {name}: {row['check']}"


@pytest.mark.slow
@pytest.mark.parametrize("size", [2, 3])
def test_the_property_suite_passes_on_open_mpi(tmp_path, size):
    mpiexec_or_skip()
    done = _suite(tmp_path, "--simdist-backend", "mpi", "--simdist-np", str(size), "-q", "--hypothesis-seed=0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"\b18 passed\b", done.stdout)


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
