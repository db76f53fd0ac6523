"""Run PyTorch's own distributed tests on Gloo and on the simulator, and compare.

    python tests/torch_suite_table.py [--world-size 3] [-k EXPRESSION] [--backends gloo,simdist]
        [--json results.json] [--resume]

The tests are the ones the torch wheel ships,
``torch/testing/_internal/distributed/distributed_test.py``, run as PyTorch's
own ``test/distributed/test_distributed_spawn.py`` runs them (that file is
not in the wheel; the few lines of it needed are written to a temporary
folder): ``BACKEND=gloo``, ``WORLD_SIZE=N``, every test in new processes
that ``MultiProcessTestCase`` spawns. For ``simdist`` the environment also
holds ``SIMDIST_GLOO=1``, so every ``"gloo"`` the tests ask for is the
simulator (``docs/torch.md``). Each backend's run is one pytest command;
its outcomes come from pytest's JUnit XML. The script prints a Markdown
table: the tests passed, failed and skipped on each backend, then every test
that passes on Gloo and not on the simulator with the first line of its
failure there (and the reverse). ``--json`` keeps every outcome;
``--resume`` reuses the runs a previous ``--json`` file holds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

SPAWN = '''
from torch.testing._internal.common_utils import run_tests
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
'''


def run(backend: str, world_size: int, expression: str | None, folder: Path) -> dict:
    """One backend's outcome of every test: name -> (outcome, message)."""
    module = folder / "test_distributed_spawn.py"
    module.write_text(SPAWN)
    temp = folder / f"temp-{backend}"
    temp.mkdir(exist_ok=True)
    env = {**os.environ, "BACKEND": "gloo", "WORLD_SIZE": str(world_size), "TEMP_DIR": str(temp)}
    if backend == "simdist":
        env["SIMDIST_GLOO"] = "1"
    report = folder / f"{backend}.xml"
    argv = [sys.executable, "-m", "pytest", str(module), "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    if expression:
        argv += ["-k", expression]
    began = time.monotonic()
    subprocess.run(argv, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   stdin=subprocess.DEVNULL)
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = "skipped" if child.tag == "skipped" else "failed"
                message = (child.get("message") or child.text or "").strip().splitlines()[:1]
                message = message[0][:200] if message else ""
                break
        outcomes[case.get("name")] = (outcome, message)
    print(f"{backend}: {len(outcomes)} tests in {time.monotonic() - began:.0f} s", file=sys.stderr)
    return outcomes


def table(results: dict) -> str:
    backends = list(results)
    lines = ["| backend | passed | failed | skipped |", "| --- | --- | --- | --- |"]
    for backend in backends:
        kinds = [o for o, _ in results[backend].values()]
        lines.append(f"| {backend} | {kinds.count('passed')} | {kinds.count('failed')} | {kinds.count('skipped')} |")
    if len(backends) == 2:
        a, b = backends
        for first, second in ((a, b), (b, a)):
            differ = sorted(name for name, (o, _) in results[first].items()
                            if o == "passed" and results[second].get(name, ("missing", ""))[0] != "passed")
            lines += ["", f"Passed on {first}, not on {second}: {len(differ)}", ""]
            lines += [f"- `{name}`: {results[second].get(name, ('missing', ''))[0]}: "
                      f"{results[second].get(name, ('', ''))[1]}" for name in differ]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world-size", type=int, default=3)
    parser.add_argument("-k", dest="expression")
    parser.add_argument("--backends", default="gloo,simdist")
    parser.add_argument("--json")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)
    results = {}
    if args.resume and args.json and os.path.exists(args.json):
        with open(args.json) as f:
            results = {b: {n: tuple(v) for n, v in r.items()} for b, r in json.load(f).items()}
    with tempfile.TemporaryDirectory() as folder:
        for backend in args.backends.split(","):
            if backend not in results:
                results[backend] = run(backend, args.world_size, args.expression, Path(folder))
                if args.json:
                    with open(args.json, "w") as f:
                        json.dump(results, f, indent=1)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
