"""``simdist check`` on the install it documents.

A plain ``pip install simdist`` has neither pytest nor Hypothesis (they come
with the ``check`` extra): there ``simdist check`` runs the sweep, says in one
line that the property suite was skipped and how to add it, and exits with
the sweep's status. With them installed it runs both (tests/test_check.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import simdist

ROOT = Path(simdist.__file__).resolve().parent.parent  # the project being tested
INSTALL = 'pip install "simdist[check]"'
SMALL = ["-n", "2", "--quick", "--collectives", "allreduce", "--dtypes", "float32"]


@pytest.fixture
def plain_install_env(tmp_path):
    """The environment of a Python where ``import pytest`` and ``import
    hypothesis`` fail. Modules of those names that raise ImportError, first on
    the path, stand for a plain install: the import fails with the very error
    it gives when the package is absent, while this Python keeps numpy and
    simdist (a real plain install is the slow test below)."""
    stubs = tmp_path / "without_check_extra"
    stubs.mkdir()
    for name in ("pytest", "hypothesis"):
        (stubs / f"{name}.py").write_text(f"raise ImportError({f'No module named {name!r}'!r}, name={name!r})\n")
    path = os.pathsep.join(p for p in (str(stubs), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path)


def _check(env, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", "simdist", "check", *args], env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def test_without_the_check_extra_the_sweep_runs_and_one_line_says_how_to_add_the_properties(
        plain_install_env, tmp_path):
    path = tmp_path / "report.json"
    done = _check(plain_install_env, *SMALL, "--json", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.startswith("property suite")]
    assert skipped == [done.stdout.splitlines()[-1]]  # one line, after the table
    assert "skipped" in skipped[0] and INSTALL in skipped[0] and "pytest and hypothesis" in skipped[0]
    assert "running the property suite" not in done.stderr
    report = json.loads(path.read_text())
    assert report["ok"] is True and all(row["verdict"] == "pass" for row in report["rows"])
    props = report["properties"]
    assert props["skipped"] is True and props["ok"] is None and props["install"] == INSTALL
    assert props["missing"] == ["pytest", "hypothesis"] and "not installed" in props["reason"]


@pytest.mark.slow
def test_without_the_check_extra_the_exit_status_is_the_sweeps(plain_install_env):
    done = _check(plain_install_env, *SMALL, "--backend", "fake_backends:sum_for_mean", "--json", "-")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)  # only the JSON on stdout; the skip is said on stderr
    assert report["ok"] is False and report["properties"]["skipped"] is True
    assert INSTALL in done.stderr


@pytest.mark.slow
def test_simdist_check_runs_on_a_plain_install_in_a_fresh_venv():
    """``python -m venv`` and ``pip install -e`` without extras (pip's cache
    or the index provides numpy and cloudpickle), then ``simdist check``."""
    egg_info = ROOT / "simdist.egg-info"
    had_egg_info = egg_info.exists()
    venv = Path(tempfile.mkdtemp(prefix="simdist-plain-venv-"))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(ROOT)],
                             env=env, capture_output=True, text=True, timeout=900)
        assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
        python = str(venv / "bin" / "python")
        for name in ("pytest", "hypothesis"):  # what makes it plain
            absent = subprocess.run([python, "-c", f"import {name}"], env=env, capture_output=True)
            assert absent.returncode != 0, f"{name} is installed in the plain venv"
        done = subprocess.run([str(venv / "bin" / "simdist"), "check", "-n", "2", "--quick"], env=env, cwd=venv,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        last = done.stdout.splitlines()[-1]
        assert last.startswith("property suite: skipped") and INSTALL in last
    finally:
        shutil.rmtree(venv, ignore_errors=True)
        if not had_egg_info:
            shutil.rmtree(egg_info, ignore_errors=True)
