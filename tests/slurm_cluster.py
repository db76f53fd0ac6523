"""A private one-machine Slurm cluster for the srun tests.

:class:`SlurmCluster` starts its own ``munged``, ``slurmctld`` and
``slurmd`` (Debian's ``slurm-wlm`` and ``munge``; as root) in a directory
of its own: a fresh munge key and socket, a ``slurm.conf`` with ports the
kernel found free, its state, spool, temporary directory (``TmpFS``), logs
and pid files, and job ids of its own (``FirstJobId``). Nothing of the
machine's own Slurm or munge is used or changed, and clients reach the
cluster through ``SLURM_CONF`` (:meth:`SlurmCluster.environment`).

One node, this machine by its hostname, with more CPUs than it has
(``SlurmdParameters=config_overrides``), so that a job of 4 tasks runs on
2 cores. No cgroups: ``proctrack/linuxproc`` tracks a step's processes
through their parents, and ``task/none`` binds nothing.

:meth:`SlurmCluster.stop` cancels every job, waits for the step daemons
(``slurmstepd``, which slurmd leaves to init) to end, then ends the daemons
it started, by the pids it holds, and removes the directory; a step daemon
with no task left that has not ended by then is killed by its pid
(:meth:`SlurmCluster.end_stuck_step_daemons`). Run as a script to try it by hand::

    python tests/slurm_cluster.py            # start, print the SLURM_CONF line, wait for Enter, stop
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

DAEMONS = ("munged", "slurmctld", "slurmd")
CONFIG = """\
ClusterName=simdist
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
TmpFS={root}/tmp
FirstJobId={first_job}
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=2
InactiveLimit=0
MinJobAge=2
MessageTimeout=20
SlurmdTimeout=300
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=simdist Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def why_not() -> str | None:
    """Why a private Slurm cannot run here, or None."""
    missing = [tool for tool in (*DAEMONS, "srun", "sinfo", "scancel") if shutil.which(tool) is None]
    if missing:
        return f"Slurm is not installed (no {', '.join(missing)}): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "a private Slurm cluster (slurmd as root) needs root"
    return None


def _first_job_id() -> int:
    """Job ids no earlier cluster on this machine is likely to have used.
    A step daemon of an earlier cluster that never ended still holds its
    step's name (``spmix_appdir_UID_JOB.STEP``, PMIx's rendezvous), and a
    new step of the same id fails to launch."""
    return 1000 + int.from_bytes(os.urandom(3), "little") * 3  # below MaxJobId (0x3ff0000)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class SlurmCluster:
    """A running private cluster; a context manager that stops it."""

    def __init__(self, cpus: int = 8):
        self.cpus = cpus
        self.host = socket.gethostname()
        self.root = tempfile.mkdtemp(prefix="slurm-", dir="/tmp")
        self.conf = os.path.join(self.root, "slurm.conf")
        self.munge_socket = os.path.join(self.root, "munge.socket")
        self._daemons: dict[str, subprocess.Popen] = {}

    def environment(self, base: dict | None = None) -> dict[str, str]:
        """``base`` (default: this process's environment) with this
        cluster's ``SLURM_CONF``, and no variables of an enclosing job."""
        env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("SLURM_")}
        env["SLURM_CONF"] = self.conf
        return env

    # -- start --------------------------------------------------------------------
    def start(self) -> "SlurmCluster":
        try:
            self._write_files()
            self._spawn("munged", ["munged", "--foreground", "--force", f"--socket={self.munge_socket}",
                                   f"--key-file={self.root}/munge.key", f"--pid-file={self.root}/munged.pid",
                                   f"--log-file={self.root}/munged.log", f"--seed-file={self.root}/munged.seed"])
            self._wait_for(lambda: os.path.exists(self.munge_socket), "munged's socket")
            self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", self.conf])
            self._spawn("slurmd", ["slurmd", "-D", "-f", self.conf, "-N", self.host])
            self._wait_for(self._node_ready, "the node to be idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _write_files(self) -> None:
        for sub in ("state", "spool", "tmp"):
            os.makedirs(os.path.join(self.root, sub))
        key = os.path.join(self.root, "munge.key")
        with open(key, "wb") as fh:
            fh.write(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(self.root, 0o755)
        with open(self.conf, "w") as fh:
            fh.write(CONFIG.format(host=self.host, ctld_port=_free_port(), slurmd_port=_free_port(),
                                   munge_socket=self.munge_socket, root=self.root, cpus=self.cpus,
                                   first_job=_first_job_id()))

    def _spawn(self, name: str, command: list[str]) -> None:
        log = open(os.path.join(self.root, f"{name}.out"), "wb")
        with log:
            self._daemons[name] = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                   env=self.environment(), start_new_session=True)

    def _wait_for(self, condition, what: str, within: float = 60.0) -> None:
        deadline = time.monotonic() + within
        while not condition():
            for name, daemon in self._daemons.items():
                if daemon.poll() is not None:
                    raise RuntimeError(f"{name} exited with status {daemon.returncode} while waiting for {what}:\n"
                                       + self.log(name))
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {within:.0f} s:\n" + self.log("slurmctld") + self.log("slurmd"))
            time.sleep(0.2)

    def _node_ready(self) -> bool:
        state = self.run(["sinfo", "-h", "-N", "-o", "%T"], check=False).stdout.strip()
        return state in ("idle", "mixed", "allocated")

    def log(self, name: str) -> str:
        """The tail of a daemon's log (its own log file and its output)."""
        text = ""
        for suffix in (".log", ".out"):
            try:
                with open(os.path.join(self.root, name + suffix), errors="replace") as fh:
                    text += fh.read()[-3000:]
            except OSError:
                pass
        return text

    def run(self, command: list[str], *, check: bool = True, timeout: float = 60, **kwargs):
        """A Slurm client command against this cluster, its output captured."""
        done = subprocess.run(command, env=kwargs.pop("env", None) or self.environment(), capture_output=True,
                              text=True, timeout=timeout, **kwargs)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: status {done.returncode}\n{done.stdout}{done.stderr}")
        return done

    # -- stop ---------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel the jobs, wait for their steps, end the daemons (by pid)
        and remove the directory."""
        if "slurmctld" in self._daemons and self._daemons["slurmctld"].poll() is None:
            self.run(["scancel", "--full", "--user", "root"], check=False)
            self.wait_strays_gone()
        self.end_stuck_step_daemons()
        for name in reversed(DAEMONS):
            daemon = self._daemons.pop(name, None)
            if daemon is None:
                continue
            if daemon.poll() is None:
                daemon.send_signal(signal.SIGTERM)
                try:
                    daemon.wait(15)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def strays(self) -> list[str]:
        """What runs for this cluster but is no daemon of it, a line each
        (``pid N: command``): see ``_stray_processes``."""
        return [f"pid {pid}: {command[:120]}" for pid, _, command in self._stray_processes()]

    def _stray_processes(self) -> list[tuple[int, int, str]]:
        """``(pid, ppid, command)`` of the step daemons (``slurmstepd``) and
        tasks of this cluster, found by its ``SLURM_CONF`` in their
        environment (slurmd's, which they inherit, or the client's).
        simdist's janitor, which outlives a world by design (one per
        process), is left out."""
        ours = {daemon.pid for daemon in self._daemons.values()}
        mark = f"SLURM_CONF={self.conf}\0".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in ours or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    state, ppid = fh.read().rsplit(")", 1)[1].split()[:2]
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    marked = mark in fh.read()
                with open(f"/proc/{entry}/cmdline", "rb") as fh:
                    command = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            if marked and state != "Z" and int(ppid) not in ours and "simdist-janitor" not in command:
                found.append((int(entry), int(ppid), command))
        return found

    def end_stuck_step_daemons(self) -> list[str]:
        """Kill (by pid) the step daemons with no task left: what they still
        run is Slurm's own teardown. Slurm 22.05's step daemon can stay in
        ``PMIx_server_finalize`` for good after a step whose tasks were
        killed at once (an ``MPI_Abort``); seen with Debian's libpmix2 under
        load, and reported upstream (openpmix issue 4269). Returns what was
        killed, as ``strays`` shows it."""
        strays = self._stray_processes()
        parents = {ppid for _, ppid, command in strays if "slurmstepd" not in command}
        killed = []
        for pid, _, command in strays:
            if "slurmstepd" not in command or pid in parents:
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(f"pid {pid}: {command[:120]}")
            except ProcessLookupError:
                pass
        return killed

    def wait_strays_gone(self, within: float = 30.0) -> list[str]:
        """Wait until nothing but the daemons runs; return what still does."""
        deadline = time.monotonic() + within
        while (left := self.strays()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    reason = why_not()
    if reason:
        sys.exit(reason)
    with SlurmCluster() as cluster:
        print(f"export SLURM_CONF={cluster.conf}")
        print(cluster.run(["sinfo"]).stdout, end="")
        input("Enter stops the cluster: ")
