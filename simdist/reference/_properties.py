"""The property suite as part of ``simdist check``.

:func:`run_properties` runs ``python -m pytest --pyargs properties`` against
the backend in a child process (so that pytest's and Hypothesis' global
state stay out of the caller) with a fixed Hypothesis seed, and reads the
outcome of each property from pytest's JUnit XML. Each failure comes back
with its message and the command that replays it. Under an MPI launcher
(``mpiexec -n N simdist check --backend mpi``) the suite runs in the
process instead, on every rank of the launcher's job, which may span hosts.

The suite needs pytest and Hypothesis, which simdist itself does not: they
come with the ``check`` extra (:data:`INSTALL`). Where either cannot be
imported the suite is skipped, and the report says which and how to add them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from typing import Callable

from .._environ import patched
from ..mpi._spmd import launched
from ._focus import EXTRA_DTYPES

__all__ = ["run_properties", "missing_requirements", "REQUIREMENTS", "INSTALL"]

#: What the property suite needs besides simdist's own dependencies.
REQUIREMENTS = ("pytest", "hypothesis")
#: The command that adds them.
INSTALL = 'pip install "simdist[check]"'

# Run in a child, like the suite: it sees the same sys.path and environment.
_IMPORT_EACH = """
import importlib, sys
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:
        print(name)
"""


def missing_requirements() -> list[str]:
    """The names of :data:`REQUIREMENTS` that the suite's Python cannot import."""
    done = subprocess.run([sys.executable, "-c", _IMPORT_EACH, *REQUIREMENTS], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True)
    if done.returncode != 0:  # the probe itself broke: let the suite's run say why
        return []
    return done.stdout.split()


def _command(backend: str, factory: str | None, size: int, timeout: float, seed: int, focus: dict,
             sync_sends: bool | None = None) -> list[str]:
    args = [sys.executable, "-m", "pytest", "--pyargs", "properties", "-q", "-p", "no:cacheprovider",
            "--simdist-backend", backend, "--simdist-np", str(size), "--simdist-timeout", str(timeout),
            f"--hypothesis-seed={seed}"]
    if factory:
        args += ["--simdist-factory", factory]
    for option, names in focus.items():
        if names is not None:
            args += [f"--simdist-{option}", ",".join(names)]
    if sync_sends is not None:  # else the suite's default: synchronous
        args.append("--simdist-sync-sends" if sync_sends else "--simdist-buffered-sends")
    return args


def run_properties(backend: str, factory: str | None, size: int, *, timeout: float, seed: int,
                   examples: int, announce: Callable[[], None] | None = None, collectives=None, ops=None,
                   dtypes=None, sync_sends: bool | None = None, first_failure: bool = False) -> dict:
    """Run the property suite; ``{"ok", "skipped": False, "passed", "failed": [...], "seconds",
    "command"}``, or, when pytest or Hypothesis is missing, ``{"ok": None, "skipped": True,
    "reason", "missing", "install"}``. ``announce()``, if given, is called just before the suite
    starts. ``collectives``, ``ops`` and ``dtypes`` (lists of names, None: all) narrow the suite
    (``--simdist-collectives`` ...). ``sync_sends`` (None: the suite's default, synchronous) sets
    the suite's ``--simdist-sync-sends``/``--simdist-buffered-sends``; ``first_failure`` stops it at
    its first failing property (``--simdist-first-failure``)."""
    missing = missing_requirements()
    if missing:
        return _skipped(missing)
    if dtypes is not None:  # the suite draws the contract's dtypes; the sweep checks the others
        beyond = [d for d in dtypes if d in EXTRA_DTYPES]
        dtypes = [d for d in dtypes if d not in EXTRA_DTYPES]
        if not dtypes:
            return {"ok": None, "skipped": True, "missing": [], "install": None,
                    "reason": f"the suite draws the contract's dtypes, and {', '.join(beyond)} is none of them "
                              f"(the sweep checked it)"}
    started = time.perf_counter()
    command = _command(backend, factory, size, timeout, seed,
                       {"collectives": collectives, "ops": ops, "dtypes": dtypes}, sync_sends)
    if first_failure:
        command.append("--simdist-first-failure")
    if announce is not None:
        announce()
    with tempfile.TemporaryDirectory(prefix="simdist-check-") as tmp:
        xml = os.path.join(tmp, "properties.xml")
        run = _in_this_job if backend == "mpi" and launched() else _in_a_child
        done = run([*command, f"--junitxml={xml}"], {"SIMDIST_PROPERTY_EXAMPLES": str(examples)})
        cases = _cases(xml) if os.path.exists(xml) else []
    failed = [c for c in cases if c["outcome"] == "failed"]
    for case in failed:
        case["replay"] = shlex.join([*command[:3], f"{case['file']}::{case['test']}", *command[5:]])
    report = {
        "ok": done.returncode == 0 and bool(cases),
        "skipped": False,
        "passed": sum(c["outcome"] == "passed" for c in cases),
        "failed": failed,
        "seconds": round(time.perf_counter() - started, 2),
        "seed": seed,
        "command": shlex.join(command),
    }
    if not cases:
        report["error"] = (done.stdout + done.stderr).strip()[-2000:] or f"pytest exited with {done.returncode}"
    return report


def _in_a_child(command: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=dict(os.environ, **env), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True)


def _in_this_job(command: list[str], env: dict) -> subprocess.CompletedProcess:
    """The suite in this process, on every rank of the MPI launcher's job
    (a child would not be a rank of it): each test's World joins the job,
    and every rank draws the same examples (the seed is fixed)."""
    import pytest

    out = io.StringIO()
    with patched(env), contextlib.redirect_stdout(out):
        status = int(pytest.main(command[3:]))  # after "python -m pytest"
    return subprocess.CompletedProcess(command, status, out.getvalue(), "")


def _skipped(missing: list[str]) -> dict:
    verb = "is" if len(missing) == 1 else "are"
    return {
        "ok": None,
        "skipped": True,
        "reason": f"{' and '.join(missing)} {verb} not installed",
        "missing": missing,
        "install": INSTALL,
    }


def _cases(path: str) -> list[dict]:
    where = importlib.util.find_spec("properties").submodule_search_locations[0]  # found, not imported
    out = []
    for case in ET.parse(path).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skipped = case.find("skipped") is not None
        module = case.get("classname", "").rsplit(".", 1)[-1]
        out.append({
            "test": case.get("name"),
            "file": os.path.join(where, module + ".py"),
            "outcome": "failed" if problem is not None else "skipped" if skipped else "passed",
            "message": "" if problem is None else _first_line(problem.get("message") or problem.text or ""),
        })
    return out


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:300] if lines else ""
