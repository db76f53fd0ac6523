"""The property suite as part of ``simdist check``.

:func:`run_properties` runs ``python -m pytest --pyargs properties`` against
the backend in a child process (so that pytest's and Hypothesis' global
state stay out of the caller) with a fixed Hypothesis seed, and reads the
outcome of each property from pytest's JUnit XML. Each failure comes back
with its message and the command that replays it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

__all__ = ["run_properties", "format_properties"]


def _command(backend: str, factory: str | None, size: int, timeout: float, seed: int) -> list[str]:
    args = [sys.executable, "-m", "pytest", "--pyargs", "properties", "-q", "-p", "no:cacheprovider",
            "--simdist-backend", backend, "--simdist-np", str(size), "--simdist-timeout", str(timeout),
            f"--hypothesis-seed={seed}"]
    if factory:
        args += ["--simdist-factory", factory]
    return args


def run_properties(backend: str, factory: str | None, size: int, *, timeout: float, seed: int,
                   examples: int) -> dict:
    """Run the property suite; ``{"ok", "passed", "failed": [...], "seconds", "command"}``."""
    started = time.perf_counter()
    command = _command(backend, factory, size, timeout, seed)
    env = dict(os.environ, SIMDIST_PROPERTY_EXAMPLES=str(examples))
    with tempfile.TemporaryDirectory(prefix="simdist-check-") as tmp:
        xml = os.path.join(tmp, "properties.xml")
        done = subprocess.run([*command, f"--junitxml={xml}"], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
        cases = _cases(xml) if os.path.exists(xml) else []
    failed = [c for c in cases if c["outcome"] == "failed"]
    for case in failed:
        case["replay"] = shlex.join([*command[:3], f"{case['file']}::{case['test']}", *command[5:]])
    report = {
        "ok": done.returncode == 0 and bool(cases),
        "passed": sum(c["outcome"] == "passed" for c in cases),
        "failed": failed,
        "seconds": round(time.perf_counter() - started, 2),
        "seed": seed,
        "command": shlex.join(command),
    }
    if not cases:
        report["error"] = (done.stdout + done.stderr).strip()[-2000:] or f"pytest exited with {done.returncode}"
    return report


def _cases(path: str) -> list[dict]:
    import properties

    where = os.path.dirname(properties.__file__)
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


def format_properties(report: dict) -> str:
    """The property suite's outcome as text: a summary line, then each failure."""
    failed = report["failed"]
    lines = [f"property suite: {report['passed']} passed, {len(failed)} failed in {report['seconds']:.1f} s "
             f"(hypothesis seed {report['seed']})"]
    if "error" in report:
        lines.append(f"  the suite did not run: {report['error']}")
    for case in failed:
        lines.append(f"FAIL {case['test']}: {case['message']}")
        lines.append(f"  replay: {case['replay']}")
    return "\n".join(lines)
