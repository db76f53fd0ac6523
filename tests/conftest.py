"""Shared test setup: Hypothesis profiles and a guard against leaked resources.

Every test is checked for what it leaves behind: descendant processes of the
pytest process, entries in /dev/shm (a /dev/shm of the pytest process's own
where it can have one, so that other jobs' files are not taken for the
test's: ``private_shm``), simdist memfds (open descriptors or
mappings) held by the pytest process, and temporary directories of simdist
(``simdist-*``) or multiprocessing (``pymp-*``). Multiprocessing's forkserver
and resource_tracker helpers, and simdist's janitor, persist by design (one
per process) and are ignored (their children, such as forkserver-started
workers, are not), as is the pytest process's own ``pymp-*`` directory.

The session runs with a temporary directory of its own (``TMPDIR``), so that
the temporary directories of other test runs on the machine are not taken
for this run's leaks; it is removed at the end.
"""

from __future__ import annotations

import collections
import compileall
import importlib
import importlib.util
import multiprocessing
import multiprocessing.util
import os
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

import private_shm
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=2000, max_examples=100)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Under pytest-xdist (the README runs the suite on 2 workers) a worker's
# environment says it is one; the pytest runs the tests start (a user's suite
# under mpiexec or simdist run, the property suite) are not workers and must
# not inherit that (pytest-benchmark, for one, then warns at start).
for _name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
    os.environ.pop(_name, None)

# pytest rewrites the asserts of every test module as it imports it, and
# keeps the result only where bytecode is written: where it is not
# (``PYTHONDONTWRITEBYTECODE``, as on CI's machines), each pytest worker spent
# 6 s of its collection on that, in every session. Test modules are imported
# after this file, so they are kept (in ``tests/__pycache__``, ignored by git).
sys.dont_write_bytecode = False

# Open MPI's libfabric transport (btl ofi) sleeps a second in every MPI_Init on
# a machine with no fabric (docs/mpi.md, "Start-up"); the tests' MPI jobs run
# on one host, where shared memory carries every message whatever is listed.
os.environ.setdefault("OMPI_MCA_btl", "^ofi")


def pytest_configure(config):
    """Give this pytest process a /dev/shm of its own where it can
    (``private_shm``), so that other jobs on the machine cannot pass for a
    test's leaks.

    Then compile the project's packages once, before any test: the tests start
    hundreds of Python processes (``simdist run``, MPI ranks, workers of the
    spawn start method), and where bytecode is not written on import
    (``PYTHONDONTWRITEBYTECODE``, as on CI's machines) each of them compiled
    simdist and its mpi4py stand-in again: 0.4 s more per ``simdist run``."""
    private_shm.make_private()
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: its controller has compiled them
        return
    root = Path(__file__).resolve().parent.parent
    for package in ("simdist", "fake_backends", "properties"):
        compileall.compile_dir(root / package, quiet=1)


# ------------------------------------------------------ torch, once its tests run

class Deferred:
    """A module a test module uses only once its tests run (``torch``): its
    name holds this at collection, and the real module from the first test on.

    A test module that uses torch in this process marks itself
    ``pytestmark = pytest.mark.torch`` and binds ``torch = Deferred("torch")``;
    ``pytest_runtest_setup`` imports it (or skips where torch is missing) and
    puts it in place, and the torch modules run after every other module
    (``pytest_collection_modifyitems``). A pytest worker that has imported
    torch holds 290 MB more of its own memory, and every rank a test forks
    from it costs 35 ms more of the kernel's time to fork and to end (2 ms
    otherwise): the fast tier took 95-101 s instead of 73-76 s with torch
    imported at collection."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, attr):
        raise RuntimeError(f"{self.name} is imported when the module's first test runs, not at collection")


def pytest_collection_modifyitems(config, items):
    """The modules marked ``torch`` last (each in one piece, in their order):
    a worker imports torch only once it has run everything else."""
    uses_torch = {item for item in items if item.get_closest_marker("torch")}
    items.sort(key=lambda item: item in uses_torch)  # stable: each part keeps its order


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("torch") is None:
        return
    installed_or_skip("torch", "torch")
    module = item.module
    for name, value in list(vars(module).items()):
        if isinstance(value, Deferred):
            setattr(module, name, importlib.import_module(value.name))


def installed_or_skip(module: str, extra: str) -> None:
    """Skip (a test, or a test module at its top) where ``module`` is not
    installed, without importing it here, but fail in CI (``CI`` set), which
    installs every extra: ``extra`` is the project's extra that installs it."""
    if importlib.util.find_spec(module) is None:
        if os.environ.get("CI"):
            raise RuntimeError(f"CI must run the tests that need {module}, but it is missing")
        pytest.skip(f"needs {module}: pip install -e '.[{extra}]'", allow_module_level=True)

LEAK_GRACE = 5.0  # seconds a test's processes get to be reaped before it fails
HELPERS = ("multiprocessing.forkserver", "multiprocessing.resource_tracker", "simdist-janitor")

SYSTEM_TMPDIR = tempfile.gettempdir()
# Short: the fork server's and Open MPI's sockets live below it (at most 107 bytes).
SESSION_TMPDIR = tempfile.mkdtemp(prefix="pt-")
os.environ["TMPDIR"] = tempfile.tempdir = SESSION_TMPDIR
# Removed at exit after multiprocessing's own pymp-* directory (priority -100).
multiprocessing.util.Finalize(None, shutil.rmtree, args=(SESSION_TMPDIR, True), exitpriority=-101)


def _read(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def process_table() -> dict[int, tuple[int, str, str]]:
    """``{pid: (ppid, state, cmdline)}`` of every process on the machine."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read(f"/proc/{entry}/stat")
        if not stat:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        table[int(entry)] = (int(ppid), state, _read(f"/proc/{entry}/cmdline"))
    return table


def _children(pid: int) -> list[int] | None:
    """The children of ``pid`` from /proc/PID/task/TID/children, or None
    where the kernel does not provide that file."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                kids += [int(k) for k in fh.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None
        except OSError:
            continue
    return kids


def _children_table(root: int) -> dict[int, list[int]] | None:
    """``{pid: children}`` of ``root``'s tree, walked down from ``root``
    (a few reads per descendant, instead of one per process on the machine)."""
    table, todo = {}, [root]
    while todo:
        pid = todo.pop()
        kids = _children(pid)
        if kids is None:
            return None
        table[pid] = kids
        todo.extend(kids)
    return table


def descendants(root: int | None = None) -> dict[int, str]:
    """``{pid: description}`` of the descendants of ``root`` (default: this
    process), without multiprocessing's long-lived helper processes."""
    root = os.getpid() if root is None else root
    children = _children_table(root)
    if children is None:  # no /proc/PID/task/TID/children: scan every process
        children = collections.defaultdict(list)
        for pid, (ppid, _, _) in process_table().items():
            children[ppid].append(pid)
    found, todo = {}, [(kid, root) for kid in children.get(root, ())]
    cmdlines = {root: _read(f"/proc/{root}/cmdline")}
    while todo:
        pid, ppid = todo.pop()
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            continue  # gone meanwhile
        state = stat.rsplit(")", 1)[1].split()[0]
        cmdline = cmdlines[pid] = _read(f"/proc/{pid}/cmdline")
        todo.extend((kid, pid) for kid in children.get(pid, ()))
        is_helper = any(h in cmdline for h in HELPERS)
        parent_is_helper = any(h in cmdlines.get(ppid, "") for h in HELPERS)
        if is_helper and not parent_is_helper:
            continue
        found[pid] = f"pid {pid} (state {state}): {cmdline[:120] or '?'}"
    return found


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    stat = _read(f"/proc/{pid}/stat")
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids, within: float = LEAK_GRACE) -> list[int]:
    """Wait until none of ``pids`` is alive; return those still alive."""
    deadline = time.monotonic() + within
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def memfds() -> collections.Counter:
    """simdist memfds held by this process: open descriptors and mappings."""
    held = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/memfd:simdist"):
            held[f"fd -> {target}"] += 1
    with open("/proc/self/maps") as maps:
        for line in maps:
            if "/memfd:simdist" in line:
                held["mapping " + line.split(None, 5)[-1].strip()] += 1
    return held


def dev_shm() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def temp_dirs() -> set[str]:
    """simdist's and multiprocessing's directories in the temporary directory
    (without this process's own ``pymp-*``, which lives as long as it does)."""
    own = multiprocessing.current_process()._config.get("tempdir")
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return set()
    return {os.path.join(root, name) for name in names if name.startswith(("simdist-", "pymp-"))} - {own}


def _mapped_by_others(names: set[str], ours: set[int]) -> set[str]:
    """The MPI library's entries of ``names`` in /dev/shm that a live process
    outside this test process's tree maps: another MPI job's on the machine
    (a developer's, running beside the tests), not a leak. simdist's own
    entries always count."""
    names = {name for name in names if name.startswith(("sm_segment.", "vader_segment."))}
    others = set()
    if not names:
        return others
    for maps in Path("/proc").glob("[0-9]*/maps"):
        if int(maps.parent.name) in ours:
            continue
        try:
            text = maps.read_text()
        except OSError:
            continue
        others |= {name for name in names if f"/dev/shm/{name}" in text}
    return others


def _leaks(before) -> list[str]:
    procs, shm, fds, tmp = before
    now = descendants()
    found = [f"process {desc}" for pid, desc in now.items() if pid not in procs]
    new = dev_shm() - shm
    if new and not private_shm.is_private():
        new -= _mapped_by_others(new, {os.getpid(), *now})
    found += [f"/dev/shm/{name}" for name in sorted(new)]
    found += [f"memfd {what} (x{n})" for what, n in (memfds() - fds).items()]
    found += [f"temporary directory {path}" for path in sorted(temp_dirs() - tmp)]
    return found


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail the test if it leaves processes, /dev/shm entries, memfds or
    temporary directories behind."""
    before = (set(descendants()), dev_shm(), memfds(), temp_dirs())
    yield
    deadline = time.monotonic() + LEAK_GRACE
    while (leaked := _leaks(before)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if leaked:
        pytest.fail("the test leaked:\n  " + "\n  ".join(leaked), pytrace=False)


@pytest.fixture
def procs():
    """Process helpers: ``procs.alive(pid)``, ``procs.wait_gone(pids, within)``,
    ``procs.table()`` (every process: ``{pid: (ppid, state, cmdline)}``) and
    ``procs.memfds()`` (the simdist memfds this process holds)."""
    return types.SimpleNamespace(alive=alive, wait_gone=wait_gone, table=process_table, memfds=memfds)


#: The kill table's settings in the tests (tests/test_properties_suite.py and
#: its torch column, tests/test_properties_torch_column.py).
KILL_FOCUS = dict(size=3, examples=5, seed=0, timeout=3.0, first_failure=True,
                  dtypes=["float64", "int32", "complex128"], ops=["sum", "mean", "max", "band"])


def mpiexec_or_skip() -> str:
    """The mpiexec the MPI tests use: skips where no MPI is installed, but
    fails in CI (``CI`` set), which must run them."""
    from simdist.mpi._driver import find_mpiexec

    try:
        import mpi4py  # noqa: F401  (the package only: MPI is not initialised)

        return find_mpiexec()
    except Exception as exc:
        if os.environ.get("CI"):
            raise RuntimeError(f"CI must run the MPI tests, but MPI is missing: {exc}") from exc
        pytest.skip(f"no MPI installed ({exc}); pip install -e '.[mpi]'", allow_module_level=True)
