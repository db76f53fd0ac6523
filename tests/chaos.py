"""Random faults on one reused World, each followed by a correct allreduce.

Each trial injects one fault, drawn from a seeded generator: a rank raises,
calls a mismatched collective, deadlocks, is killed by SIGKILL, exits with
``os._exit``, forks a child and dies, uses a communicator kept from an
earlier run; or two threads call ``run`` at once; or nothing. The faulty run
must raise the error its fault calls for (or, for threads and no fault,
return the right values) within the world's timeout plus two seconds, and
the allreduce after it must be right to the bit. At the end the world is
closed and what is left is counted: processes (descendants and children the
ranks forked), descriptors, simdist memfds, /dev/shm entries and temporary
directories. Every count must be 0.

    python tests/chaos.py --trials 1000 [--size 3] [--backend sim] [--json out.json]

``tests/test_chaos.py`` runs a few dozen trials in the slow tier.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

import numpy as np

import simdist

FAULTS = ("none", "raise", "mismatch", "deadlock", "sigkill", "exit", "fork_then_die", "threads", "stale_comm")
EXPECTED = {
    "raise": simdist.RankError,
    "mismatch": simdist.CollectiveMismatch,
    "deadlock": simdist.CollectiveTimeout,
    "sigkill": simdist.RankDied,
    "exit": simdist.RankDied,
    "fork_then_die": simdist.RankDied,
    "stale_comm": simdist.RankError,
}
#: What the error's message must say, where the type alone does not tell.
EXPECTED_TEXT = {"stale_comm": "earlier run"}
SLACK = 2.0  # seconds a failed run may take beyond the world's timeout (and, on MPI, a new job's start)

_kept: list = []  # on a rank: communicators kept for the stale_comm fault


# -- what the ranks run ---------------------------------------------------------------


def _faulty(comm, fault: str, victim: int, calls: int, scratch: str):
    """``calls`` allreduces, then the fault on ``victim``, then one more allreduce."""
    x = np.full(4, comm.rank + 1.0)
    for _ in range(calls):
        x = comm.allreduce(x) / comm.size
    if comm.rank == victim:
        if fault == "raise":
            raise RuntimeError(f"chaos: rank {victim} raises")
        if fault == "mismatch":
            comm.broadcast(x, root=0)
        elif fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif fault == "exit":
            os._exit(3)
        elif fault == "fork_then_die":
            _fork_a_sleeper(scratch)
            os._exit(4)
        elif fault == "stale_comm":
            return _kept[-1].allreduce(x)
    if fault == "deadlock":  # every rank waits for a message no one sends
        comm.recv(source=(comm.rank + 1) % comm.size, tag=99)
    return comm.allreduce(x)


def _fork_a_sleeper(scratch: str) -> None:
    """Fork a child that holds every descriptor of this rank for a minute;
    return once the child has written its pid into ``scratch``."""
    pid = os.fork()
    if pid == 0:
        with open(os.path.join(scratch, f"child-{os.getpid()}"), "w"):
            pass
        time.sleep(60)
        os._exit(0)
    path = os.path.join(scratch, f"child-{pid}")
    while not os.path.exists(path):
        time.sleep(0.005)


def _keep(comm):
    _kept.append(comm)
    return comm.rank


def _allreduce(comm, seed: int):
    return comm.allreduce(np.random.default_rng([seed, comm.rank]).standard_normal(17))


def _expected_sum(seed: int, size: int) -> np.ndarray:
    total = np.random.default_rng([seed, 0]).standard_normal(17)
    for rank in range(1, size):
        total = total + np.random.default_rng([seed, rank]).standard_normal(17)
    return total


# -- one trial ------------------------------------------------------------------------


def trial(world: simdist.World, rng: random.Random, scratch: str, restart: float = 0.0) -> dict:
    """Run one fault and the check after it; return what happened. A run
    hangs if it takes longer than the timeout, ``SLACK`` and ``restart``
    (what the MPI backend takes to start the new job that a failed run needs)."""
    fault = rng.choice(FAULTS)
    victim, calls = rng.randrange(world.size), rng.randrange(3)
    if fault == "stale_comm":
        world.run(_keep)
    start = time.monotonic()
    outcome = _threads(world, rng) if fault == "threads" else _one_run(world, fault, victim, calls, scratch)
    elapsed = time.monotonic() - start
    seed = rng.randrange(2**32)
    try:
        got = world.run(_allreduce, seed)
        want = _expected_sum(seed, world.size)
        right = all(np.array_equal(g, want) for g in got)
    except simdist.SimdistError as exc:
        right, outcome = False, outcome or f"the check after it raised {type(exc).__name__}: {exc}"
    return {"fault": fault, "victim": victim, "seconds": round(elapsed, 3), "problem": outcome,
            "hang": elapsed > world.timeout + SLACK + restart, "check_right": right}


def _one_run(world, fault, victim, calls, scratch) -> str | None:
    """None if the run ended as ``fault`` calls for, else what went wrong."""
    expected = EXPECTED.get(fault)
    try:
        world.run(_faulty, fault, victim, calls, scratch)
    except simdist.SimdistError as exc:
        if expected is None or not isinstance(exc, expected) or EXPECTED_TEXT.get(fault, "") not in str(exc):
            return f"{fault}: raised {type(exc).__name__}: {str(exc)[:300]}"
        return None
    return None if expected is None else f"{fault}: returned instead of raising {expected.__name__}"


def _threads(world, rng) -> str | None:
    seeds = [rng.randrange(2**32) for _ in range(2)]
    results: dict = {}
    threads = [threading.Thread(target=lambda s=s: results.__setitem__(s, world.run(_allreduce, s))) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(world.timeout * 4 + 10)
    if any(t.is_alive() for t in threads):
        return "threads: a run never returned"
    wrong = [s for s in seeds if s not in results or not all(np.array_equal(g, _expected_sum(s, world.size)) for g in results[s])]
    return f"threads: wrong or missing results for seeds {wrong}" if wrong else None


# -- what is left -----------------------------------------------------------------------


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found.update(kids)
        todo += kids
    return found


def _forked_children_alive(scratch: str) -> list[int]:
    alive = []
    for name in os.listdir(scratch):
        pid = int(name.split("-")[1])
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        except OSError:
            pass
    return alive


def _memfds() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:simdist")
        except OSError:
            pass
    with open("/proc/self/maps") as maps:
        return count + sum("/memfd:simdist" in line for line in maps)


def _snapshot(tmp: str) -> dict:
    return {"fds": set(os.listdir("/proc/self/fd")), "shm": set(os.listdir("/dev/shm")), "tmp": set(os.listdir(tmp)),
            "memfds": _memfds()}


def leaks(before: dict, tmp: str, scratch: str, within: float = 5.0) -> dict:
    """What is left after the world closed, waiting up to ``within`` s for it to go."""
    deadline = time.monotonic() + within
    while True:
        now = _snapshot(tmp)
        left = {
            "processes": sorted(_descendants(os.getpid()) - before["procs"]) + _forked_children_alive(scratch),
            "descriptors": sorted(now["fds"] - before["fds"]),
            "memfds": max(0, _memfds() - before["memfds"]),  # those held before the run are not its
            "dev_shm": sorted(now["shm"] - before["shm"]),
            "temp_dirs": sorted(now["tmp"] - before["tmp"]),
        }
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


# -- many trials ----------------------------------------------------------------------


def chaos(trials: int, size: int = 3, backend: str = "sim", seed: int = 0, timeout: float = 2.0,
          start_method: str | None = None, progress=None) -> dict:
    """Run ``trials`` trials on one world; return the counts and the failures.

    The world gets a private ``TMPDIR``, so that what it leaves there is its own."""
    # This process's janitor and fork server (each lasts as long as the
    # process) start with a first world, before the count; its start-up
    # time is what a new MPI job takes after a failed run.
    options = dict(backend=backend, start_method=start_method, check_calls=backend == "mpi")
    began = time.monotonic()
    simdist.World(size, timeout=timeout, **options).close()
    restart = time.monotonic() - began if backend == "mpi" else 0.0
    scratch = tempfile.mkdtemp(prefix="chaos-children-")
    tmp = tempfile.mkdtemp(prefix="chaos-tmp-")
    saved = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = tmp, None
    before = _snapshot(tmp) | {"procs": _descendants(os.getpid())}
    rng = random.Random(seed)
    records, start = [], time.monotonic()
    try:
        with simdist.World(size, timeout=timeout, **options) as world:
            for i in range(trials):
                records.append(trial(world, rng, scratch, restart))
                if progress:
                    progress(i + 1, trials, records[-1])
        left = leaks(before, tmp, scratch)
    finally:
        if saved[0] is None:
            del os.environ["TMPDIR"]
        else:
            os.environ["TMPDIR"] = saved[0]
        tempfile.tempdir = saved[1]
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    failures = [r for r in records if r["problem"] or r["hang"] or not r["check_right"]]
    return {
        "trials": trials, "size": size, "backend": backend, "start_method": start_method or "fork", "seed": seed,
        "timeout": timeout, "restart_s": round(restart, 2), "seconds": round(time.monotonic() - start, 1),
        "faults": {f: sum(r["fault"] == f for r in records) for f in FAULTS},
        "wrong_results": sum(not r["check_right"] for r in records),
        "unexpected_outcomes": sum(bool(r["problem"]) for r in records),
        "hangs": sum(r["hang"] for r in records),
        "slowest_run_s": max((r["seconds"] for r in records), default=0.0),
        "leaked": {k: len(v) if isinstance(v, list) else v for k, v in left.items()},
        "leaked_detail": left,
        "failures": failures[:20],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--size", type=int, default=3)
    parser.add_argument("--backend", default="sim", choices=("sim", "mpi"))
    parser.add_argument("--start-method", default=None, choices=("fork", "forkserver", "spawn"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--json", help="also write the report as JSON to this file")
    args = parser.parse_args(argv)

    def progress(done, total, record):
        if done % 50 == 0 or done == total or record["problem"] or not record["check_right"]:
            print(f"  {done}/{total} trials; last: {record['fault']} in {record['seconds']} s"
                  + (f"; PROBLEM: {record['problem']}" if record["problem"] else ""), file=sys.stderr, flush=True)

    report = chaos(args.trials, args.size, args.backend, args.seed, args.timeout, args.start_method, progress)
    print(f"{report['trials']} trials on {report['backend']} ({report['start_method']}), N = {report['size']}, "
          f"timeout {report['timeout']} s, in {report['seconds']} s")
    print("faults: " + ", ".join(f"{k} {v}" for k, v in report["faults"].items()))
    print(f"wrong results: {report['wrong_results']}; unexpected outcomes: {report['unexpected_outcomes']}; "
          f"hangs past timeout + {SLACK:g} s (+ {report['restart_s']} s for a new MPI job): {report['hangs']}; slowest faulty run: {report['slowest_run_s']} s")
    print("leaked: " + ", ".join(f"{k} {v}" for k, v in report["leaked"].items()))
    for failure in report["failures"]:
        print(f"  {failure}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    bad = report["wrong_results"] + report["unexpected_outcomes"] + report["hangs"] + sum(report["leaked"].values())
    return 1 if bad else 0


if __name__ == "__main__":
    import chaos  # so that the ranks' functions travel by reference to this module, and _kept lasts

    sys.exit(chaos.main())
