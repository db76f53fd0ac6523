"""A rank's traceback names the user's file, line and source text.

``World.run`` ships the function by value; whatever cloudpickle does to code
objects' file names, the frames of the user's code must point at the user's
file (``simdist._pickling``). The same holds for ``simdist run`` scripts and
``simdist run -m pytest``. The cloudpickle matrix (the oldest version
pyproject.toml allows and the newest on PyPI) runs the same program with
each version installed into a folder of its own, first on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The oldest cloudpickle pyproject.toml allows (the first with Python 3.11's code objects).
OLDEST_CLOUDPICKLE = re.search(r'"cloudpickle>=([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)

# Every case raises on rank 1 from a line that ends with its own marker
# comment; the test finds that line by the marker, then looks for it in the
# traceback with its file name and line number.
PROGRAM = textwrap.dedent('''
    import json, sys
    import simdist

    def nested_case():
        def program(comm):
            if comm.rank == 1:
                raise ValueError("nested")  # MARK:nested
        return program

    lambda_case = lambda comm: comm.rank == 1 and {}["lambda"]  # MARK:lambda

    def closure_case():
        label = "closure"
        def outer():
            def inner():
                def program(comm):
                    if comm.rank == 1:
                        raise KeyError(label)  # MARK:closure
                return program
            return inner()
        return outer()

    def main_case(comm):
        if comm.rank == 1:
            raise RuntimeError("main")  # MARK:main

    if __name__ == "__main__":
        cases = {"nested": nested_case(), "lambda": lambda_case, "closure": closure_case(), "main": main_case}
        failures = {}
        with simdist.World(2, timeout=60) as world:
            for name, fn in cases.items():
                try:
                    world.run(fn)
                except simdist.RankError as err:
                    failures[name] = err.failures[1]
        import cloudpickle
        print(json.dumps({"cloudpickle": cloudpickle.__version__, "failures": failures}))
''')

CASES = ("nested", "lambda", "closure", "main")


def _marked_lines(path: Path) -> dict[str, tuple[int, str]]:
    """Each marker's line number and stripped source text."""
    found = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        match = re.search(r"# MARK:(\w+)", line)
        if match:
            found[match.group(1)] = (number, line.strip())
    return found


def _assert_names_the_user_code(traceback_text: str, path: Path, line: int, source: str) -> None:
    assert f'File "{path}", line {line}' in traceback_text, traceback_text
    assert source in traceback_text, traceback_text  # the source line, read back from the user's file
    assert "<dynamic-code>" not in traceback_text
    assert "simdist/_worker.py" not in traceback_text  # the frame that only called the user's function


def _run_program(tmp_path: Path, extra_path: str | None = None) -> dict:
    script = tmp_path / "ranks_program.py"
    script.write_text(PROGRAM)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, str(ROOT), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _check_every_case(tmp_path: Path, result: dict) -> None:
    script = tmp_path / "ranks_program.py"
    marks = _marked_lines(script)
    assert sorted(result["failures"]) == sorted(CASES)
    for name in CASES:
        line, source = marks[name]
        _assert_names_the_user_code(result["failures"][name], script, line, source)


def test_functions_shipped_by_value_keep_their_file_and_source_line(tmp_path):
    import cloudpickle

    result = _run_program(tmp_path)
    assert result["cloudpickle"] == cloudpickle.__version__
    _check_every_case(tmp_path, result)


@pytest.fixture(scope="session")
def cloudpickle_installs(tmp_path_factory):
    """Folders holding the oldest allowed and the newest cloudpickle, by version asked for."""
    installs = {}
    for wanted in (OLDEST_CLOUDPICKLE, "newest"):
        target = tmp_path_factory.mktemp(f"cloudpickle-{wanted}")
        spec = "cloudpickle" if wanted == "newest" else f"cloudpickle=={wanted}"
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                        "--target", str(target), spec], check=True, stdin=subprocess.DEVNULL, timeout=300)
        installs[wanted] = target
    return installs


@pytest.mark.slow
@pytest.mark.parametrize("wanted", [OLDEST_CLOUDPICKLE, "newest"])
def test_tracebacks_with_the_oldest_and_newest_cloudpickle(tmp_path, cloudpickle_installs, wanted):
    result = _run_program(tmp_path, extra_path=str(cloudpickle_installs[wanted]))
    if wanted != "newest":
        assert result["cloudpickle"] == wanted
    _check_every_case(tmp_path, result)


def _simdist_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "simdist", "run", "-n", "2", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)


def test_a_run_script_traceback_names_the_script_and_line(tmp_path):
    script = tmp_path / "spmd_script.py"
    script.write_text(textwrap.dedent('''
        import simdist

        def step(comm):
            if comm.rank == 1:
                raise ValueError("script")  # MARK:script

        step(simdist.comm())
    '''))
    done = _simdist_run(tmp_path, str(script))
    assert done.returncode != 0
    line, source = _marked_lines(script)["script"]
    _assert_names_the_user_code(done.stdout + done.stderr, script, line, source)


@pytest.mark.slow
def test_a_run_pytest_failure_names_the_test_file_and_line(tmp_path):
    test_file = tmp_path / "test_ranks.py"
    test_file.write_text(textwrap.dedent('''
        import simdist

        def test_rank_one_fails():
            comm = simdist.comm()
            assert comm.rank != 1  # MARK:pytest
    '''))
    done = _simdist_run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no", "test_ranks.py")
    assert done.returncode != 0
    output = done.stdout + done.stderr
    line, source = _marked_lines(test_file)["pytest"]
    assert f"test_ranks.py:{line}: AssertionError" in output, output
    assert source.split("  #")[0] in output, output
