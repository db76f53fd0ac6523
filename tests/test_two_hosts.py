"""Two "hosts" on this machine: the MPI backend across a network.

Each host is a network namespace with an address of its own, joined to the
other by a veth pair, and a hostname of its own (a UTS namespace: with one
hostname for both, Open MPI takes the ranks for neighbours and uses shared
memory between them). The driver, or the user's ``mpiexec``, runs on host
A; Open MPI starts its daemon on host B through a launch agent that enters
B's namespaces, as ssh would log in (``--mca plm_ssh_agent AGENT``). The
namespaces, and anything still running in them, are removed when the
module ends, also after a failure. Needs root and ``ip`` (iproute2) with
network namespaces; skipped otherwise, with the reason.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.slow

AGENT = """\
#!/bin/sh
# AGENT HOST COMMAND...: run COMMAND on HOST, as ssh would: in HOST's network
# namespace, with HOST's hostname, in a fresh environment.
host=$1; shift
case $host in
  {a_address}) ns={a_ns}; name={a_name};;
  {b_address}) ns={b_ns}; name={b_name};;
  *) echo "agent: unknown host $host" >&2; exit 255;;
esac
exec ip netns exec $ns unshare --uts sh -c 'hostname "$0" && exec env -i HOME="$HOME" PATH="$1" sh -c "$2"' \\
    "$name" "$PATH" "$*"
"""


def _why_not() -> str | None:
    """Why two hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"no {tool} command (apt-get install iproute2 util-linux)"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns is not available: {probe.stderr.strip()}"
    return None


class TwoHosts:
    """Hosts A and B (network namespaces) and the launch agent between them."""

    def __init__(self, directory):
        tag = f"{os.getpid() % 100000}"
        self.ns = (f"sdA{tag}", f"sdB{tag}")
        self.names = (f"simdist-a-{tag}", f"simdist-b-{tag}")
        subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
        self.addresses = (f"{subnet}.1", f"{subnet}.2")
        self.agent = str(directory / "agent.sh")
        with open(self.agent, "w") as fh:
            fh.write(AGENT.format(a_address=self.addresses[0], b_address=self.addresses[1], a_ns=self.ns[0],
                                  b_ns=self.ns[1], a_name=self.names[0], b_name=self.names[1]))
        os.chmod(self.agent, 0o755)
        self.hosts = f"{self.addresses[0]}:1,{self.addresses[1]}:1"
        self.mpiexec_options = ["--map-by", "node", "--mca", "plm_ssh_agent", self.agent]

    def make(self) -> None:
        veth = (f"sdv{self.ns[0][2:]}", f"sdv{self.ns[1][2:]}")
        for ns in self.ns:
            _ip("netns", "add", ns)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for ns, link, address in zip(self.ns, veth, self.addresses):
            _ip("link", "set", link, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", link)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", link, "up")

    def pids(self) -> dict[str, list[int]]:
        """The processes still running in each host's namespace."""
        found = {}
        for ns in self.ns:
            out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
            found[ns] = [int(p) for p in out.split()]
        return found

    def leftovers(self, wait: float = 10.0) -> dict[str, list[int]]:
        """Processes left in the namespaces after ``wait`` seconds (empty lists: none)."""
        deadline = time.monotonic() + wait
        while any(self.pids().values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.pids()

    def remove(self) -> None:
        self.remove_processes()
        for ns in self.ns:  # the veth pair goes with its namespaces
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def on_a(self, args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run ``args`` on host A (its namespaces and hostname); afterwards
        nothing may be left running on either host."""
        from simdist.mpi._driver import launch_environment, session_tmpdir

        tmpdir = session_tmpdir()
        full_env = dict(launch_environment(_mpiexec(), tmpdir), PYTHONPATH=os.pathsep.join(sys.path), **(env or {}))
        command = ["ip", "netns", "exec", self.ns[0], "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                   self.names[0], *args]
        try:
            return subprocess.run(command, env=full_env, capture_output=True, text=True, timeout=timeout)
        finally:
            left = self.leftovers()
            self.remove_processes()
            shutil.rmtree(tmpdir, ignore_errors=True)
            assert not any(left.values()), f"processes left on the hosts: {left}"

    def remove_processes(self) -> None:
        for pids in self.pids().values():
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass

    def mpiexec(self, n: int, args: list[str], variables=("PYTHONPATH",)) -> list[str]:
        """The user's own ``mpiexec`` over both hosts, one rank per host,
        passing ``variables`` to host B."""
        passed = [word for name in variables for word in ("-x", name)]
        return [_mpiexec(), "-n", str(n), "--host", self.hosts, *self.mpiexec_options, *passed, sys.executable, *args]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _mpiexec() -> str:
    from conftest import mpiexec_or_skip

    return mpiexec_or_skip()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    reason = _why_not()
    if reason:
        pytest.skip(reason)
    from simdist.mpi._driver import flavor

    if flavor(_mpiexec()) != "openmpi":
        pytest.skip("the launch agent is Open MPI's (plm_ssh_agent); this mpiexec is not Open MPI's")
    two = TwoHosts(tmp_path_factory.mktemp("hosts"))
    try:
        two.make()
        yield two
    finally:
        two.remove()


def _script(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


PROGRAM = """
    import socket
    import numpy as np
    import simdist

    comm = simdist.comm()
    total = comm.allreduce(np.arange(4.0) * (comm.rank + 1))
    names = comm.allgather(np.frombuffer(socket.gethostname().encode().ljust(32), np.uint8))
    print(comm.rank, total.tolist(), sorted(bytes(n).decode().strip() for n in names), flush=True)
"""


def test_simdist_run_places_ranks_on_both_hosts(hosts, tmp_path):
    program = _script(tmp_path, "program.py", PROGRAM)
    launcher = " ".join([_mpiexec(), *hosts.mpiexec_options])
    done = hosts.on_a([sys.executable, "-m", "simdist", "run", "-n", "2", "--backend", "mpi", "--host", hosts.hosts,
                       "--launcher", launcher, program])
    assert done.returncode == 0, done.stderr
    expected = f"[0.0, 3.0, 6.0, 9.0] {sorted(hosts.names)}"
    assert sorted(done.stdout.splitlines()) == [f"0 {expected}", f"1 {expected}"]


FAILURES = """
    import socket, sys, time
    import numpy as np
    import simdist

    def raises(comm):
        if comm.rank == 1:
            raise ValueError(f"bad batch on {socket.gethostname()}")
        return comm.allreduce(np.ones(2))

    def hangs(comm):
        if comm.rank == 0:
            time.sleep(600)
        return comm.allreduce(np.ones(4, np.float32))

    def crashes(comm):
        if comm.rank == 1:
            import os
            os._exit(3)
        comm.barrier()

    with simdist.World(2, backend="mpi", timeout=3, hosts=sys.argv[1], launcher=sys.argv[2]) as world:
        print("listening on", world._driver._listener.getsockname()[0], flush=True)
        for fn in (raises, hangs, crashes):
            try:
                world.run(fn)
            except simdist.SimdistError as exc:
                print("---", type(exc).__name__, flush=True)
                print(exc, flush=True)
        print("after", world.run(lambda comm: socket.gethostname()), flush=True)
"""


def test_a_crash_and_a_hang_on_the_other_host_keep_the_failure_semantics(hosts, tmp_path):
    program = _script(tmp_path, "failures.py", FAILURES)
    launcher = " ".join([_mpiexec(), *hosts.mpiexec_options])
    done = hosts.on_a([sys.executable, program, hosts.hosts, launcher])
    out = done.stdout
    assert done.returncode == 0, done.stderr
    assert f"listening on {hosts.addresses[0]}" in out  # the address that routes to host B
    assert f"--- RankError\nrank 1 raised ValueError: bad batch on {hosts.names[1]}" in out
    assert f'raise ValueError(f"bad batch on {{socket.gethostname()}}")' in out
    assert ("--- CollectiveTimeout\nno progress for 3 s (the world's timeout); where each rank is:\n"
            "  rank 0: running user code (0 calls completed)\n"
            "  rank 1: waiting in allreduce #1 (float32 (4,), op=sum) for 3.") in out
    # Open MPI's mpiexec then kills the job's other ranks: rank 0 may be found dead too, before the report.
    assert re.search(r"--- RankDied\n(rank 0 exited or was killed \(its process has ended\); )?rank 1 lost its "
                     r"connection to the driver \(its process on another host ended", out), out
    assert f"after {list(hosts.names)}" in out


def test_the_collective_sweep_and_the_property_suite_pass_across_the_two_hosts(hosts):
    # every collective and property, on two dtypes for the time
    done = hosts.on_a(hosts.mpiexec(2, ["-m", "simdist", "check", "-n", "2", "--backend", "mpi", "--quick",
                                        "--dtypes", "float64,int32"]))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summaries = [line for line in done.stdout.splitlines() if " rows: " in line]
    assert len(summaries) == 1 and " 0 failed" in summaries[0], done.stdout[-3000:]  # rank 0 alone reports
    suite = re.search(r"property suite: (\d+) passed, (\d+) failed", done.stdout)
    assert suite and int(suite.group(1)) >= 100 and suite.group(2) == "0", done.stdout[-3000:]


def test_training_across_the_two_hosts_trains_and_verifies(hosts):
    from conftest import installed_or_skip

    installed_or_skip("sklearn", "examples")
    done = hosts.on_a(hosts.mpiexec(2, ["-m", "simdist.train", "--epochs", "1", "--json", "-"]))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["config"]["size"] == 2
    assert all(report["verification"].values()), report["verification"]


CRASH = """
    import socket, time
    import numpy as np
    import simdist

    comm = simdist.comm()
    comm.barrier()
    if comm.rank == 1:
        raise RuntimeError(f"crashed on {socket.gethostname()}")
    comm.allreduce(np.ones(3))
"""

HANG = """
    import time
    import numpy as np
    import simdist

    comm = simdist.comm()
    if comm.rank == 0:
        time.sleep(600)
    comm.allreduce(np.ones(3))
"""


def test_a_crash_and_a_hang_abort_a_job_of_the_users_mpiexec_across_the_hosts(hosts, tmp_path):
    crashed = hosts.on_a(hosts.mpiexec(2, [_script(tmp_path, "crash.py", CRASH)]))
    assert crashed.returncode != 0
    assert "simdist: rank 1 of 2 raised RuntimeError; aborting the MPI job" in crashed.stderr
    assert f"RuntimeError: crashed on {hosts.names[1]}" in crashed.stderr
    started = time.monotonic()
    hung = hosts.on_a(hosts.mpiexec(2, [_script(tmp_path, "hang.py", HANG)], ("PYTHONPATH", "SIMDIST_TIMEOUT")),
                      env={"SIMDIST_TIMEOUT": "2"})
    assert hung.returncode != 0
    assert "simdist: rank 1 of 2: no progress for 2 s; waiting in allreduce #1 (float64 (3,), op=sum)" in hung.stderr
    assert time.monotonic() - started < 60
