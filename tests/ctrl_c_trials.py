"""Ctrl-C at random moments while worlds start and close in a loop.

Each trial starts a driver in a session of its own that opens and closes
worlds of ``--size`` ranks in a loop, waits a random time (up to 0.25 s,
from a seeded generator), then sends SIGINT to the driver's process group,
as a terminal's Ctrl-C does. The driver must print ``KeyboardInterrupt``
and exit within ``--within`` seconds. A trial is *lost* when it did not
(the driver went on), and *wrong* when it printed anything else.

    python tests/ctrl_c_trials.py 500 [--start-method fork] [--size 4] [--seed 1] [--json out.json]

``tests/test_driver_end.py`` runs a few trials per start method in the slow tier.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

INTERRUPTED_DRIVER = """
import os, signal, sys
import simdist, simdist._janitor

if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    backend, size = sys.argv[1], int(sys.argv[2])
    options = {"backend": "mpi"} if backend == "mpi" else {"start_method": backend}
    try:
        simdist.World(size, **options).close()
        os.write(1, f"ready {simdist._janitor.janitor().pid}\\n".encode())
        while True:
            with simdist.World(size, **options):
                pass
    except KeyboardInterrupt:
        os.write(1, b"KeyboardInterrupt\\n")
        sys.exit(130)
    except BaseException as exc:
        os.write(1, f"{type(exc).__name__}: {exc}\\n".encode())
        sys.exit(1)
"""


def trial(script: str, backend: str, size: int, delay: float, within: float) -> str:
    """What the driver printed after its Ctrl-C, or "lost"."""
    tmp = tempfile.mkdtemp(prefix="ctrlc-")
    proc = subprocess.Popen([sys.executable, script, backend, str(size)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, TMPDIR=tmp),
                            start_new_session=True)
    try:
        if not select.select([proc.stdout], [], [], 120)[0]:
            return "no first world within 120 s"
        ready = proc.stdout.readline()  # "ready <janitor>": the first world opened and closed
        if not ready.startswith("ready"):
            return ready.strip() or "the driver exited before its first world"
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            return proc.communicate(timeout=within)[0].strip()
        except subprocess.TimeoutExpired:
            return "lost"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        proc.stdout.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trials", type=int)
    parser.add_argument("--start-method", default="fork", help="fork, forkserver, spawn, or mpi (the MPI backend)")
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--within", type=float, default=30.0, help="seconds the driver gets to exit")
    parser.add_argument("--json", help="also write the counts to this file")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    counts = {"trials": 0, "interrupted": 0, "lost": 0, "wrong": 0}
    with tempfile.TemporaryDirectory() as work:
        script = os.path.join(work, "driver.py")
        with open(script, "w") as fh:
            fh.write(INTERRUPTED_DRIVER)
        for n in range(args.trials):
            out = trial(script, args.start_method, args.size, rng.uniform(0.0, 0.25), args.within)
            counts["trials"] += 1
            kind = {"KeyboardInterrupt": "interrupted", "lost": "lost"}.get(out, "wrong")
            counts[kind] += 1
            if kind != "interrupted":
                print(f"trial {n}: {out}", flush=True)
            elif (n + 1) % 50 == 0:
                print(f"{n + 1} trials: {counts['lost']} lost, {counts['wrong']} wrong", file=sys.stderr, flush=True)
    print(f"{counts['trials']} Ctrl-C's ({args.start_method}, {args.size} ranks): {counts['interrupted']} interrupted "
          f"the driver, {counts['lost']} were lost, {counts['wrong']} gave something else")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(counts, fh, indent=1)
    return 0 if counts["interrupted"] == counts["trials"] else 1


if __name__ == "__main__":
    sys.exit(main())
