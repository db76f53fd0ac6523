"""MPI worlds across hosts: launcher options passed through, and the
address the driver listens on (the two-host test itself is in
test_two_hosts.py)."""

from __future__ import annotations

import pickle
import socket
import threading
from contextlib import suppress
from multiprocessing.connection import Connection, answer_challenge

import numpy as np
import pytest

import simdist
import simdist.cli
from simdist.mpi._hosts import Placement, _route_source, forwarded, host_options, hostfile_hosts, listen_address, placement


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(hosts=[""]), simdist.InvalidType, "give host names"),
    (dict(hosts=3), simdist.InvalidType, "give host names"),
    (dict(hostfile="/no/such/hostfile"), simdist.InvalidValue, "no such file"),
    (dict(launcher=""), simdist.InvalidType, "give a command, such as 'srun --mpi=pmix'"),
    (dict(listen="10.0.0.1:http"), simdist.InvalidValue, "a port number after a colon"),
    (dict(listen="10.0.0.1:70000"), simdist.InvalidValue, "the port must be in 0..65535"),
])
def test_bad_placements_are_refused_with_the_argument(kwargs, error, message):
    with pytest.raises(error, match=message):
        placement(**kwargs)


def test_hosts_and_hostfile_together_are_refused(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=1\n")
    with pytest.raises(simdist.InvalidValue, match="give one of them, not both"):
        placement(hosts="a,b", hostfile=hostfile)


def test_hosts_options_on_the_simulator_are_refused():
    with pytest.raises(simdist.InvalidValue, match="these place MPI ranks; use backend='mpi'"):
        simdist.World(2, hosts="a,b")


def test_simdist_run_with_hosts_needs_the_mpi_backend(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        simdist.cli.main(["run", "-n", "2", "--host", "a,b", str(tmp_path / "x.py")])
    assert exited.value.code == 2
    assert "--host places MPI ranks: add --backend mpi" in capsys.readouterr().err


def test_host_options_are_spelled_for_each_launcher(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# nodes\nnode1 slots=2\n\nnode2:4  # Hydra's form\n")
    assert host_options("openmpi", placement(hosts="n1,n2")) == ["--host", "n1,n2"]
    assert host_options("mpich", placement(hosts=["n1", "n2"])) == ["-hosts", "n1,n2"]
    assert host_options("openmpi", placement(hostfile=hostfile)) == ["--hostfile", str(hostfile)]
    assert host_options("mpich", placement(hostfile=hostfile)) == ["-f", str(hostfile)]
    assert host_options("openmpi", placement()) == []
    assert hostfile_hosts(str(hostfile)) == ["node1", "node2"]


def test_only_open_mpi_across_hosts_is_told_which_variables_to_pass():
    env = {"SIMDIST_AUTHKEY": "00", "PYTHONPATH": "/p"}
    names = ("SIMDIST_AUTHKEY", "SIMDIST_CHECK_CALLS", "PYTHONPATH")
    spread = placement(hosts="n1,n2")
    assert forwarded("openmpi", spread, env, names) == ["-x", "SIMDIST_AUTHKEY", "-x", "PYTHONPATH"]
    assert forwarded("mpich", spread, env, names) == []
    assert forwarded("openmpi", Placement(), env, names) == []


def test_the_driver_listens_on_loopback_unless_a_host_is_remote():
    assert listen_address(Placement()) == ("127.0.0.1", 0)
    assert listen_address(placement(hosts="localhost:2,127.0.0.1")) == ("127.0.0.1", 0)
    assert listen_address(placement(hosts="localhost", listen="127.0.0.2:5555")) == ("127.0.0.2", 5555)


def test_the_driver_listens_on_the_interface_that_routes_to_the_first_remote_host():
    remote = "192.0.2.77"  # TEST-NET-1: routed (by the default route, if any), never this machine
    try:
        expected = _route_source(remote)
    except OSError:
        pytest.skip("no route out of this machine")
    assert listen_address(placement(hosts=["localhost", remote])) == (expected, 0)
    assert expected != "127.0.0.1"


def test_an_unknown_host_says_to_pass_listen():
    with pytest.raises(simdist.SimdistError, match=r"cannot reach host 'no-such-host\.invalid'.*pass listen="):
        listen_address(placement(hosts="no-such-host.invalid"))


@pytest.mark.slow
def test_a_world_with_a_hostfile_and_a_fixed_port_runs_and_refuses_a_wrong_secret_there(tmp_path):
    from conftest import mpiexec_or_skip

    from simdist.mpi._driver import flavor

    openmpi = flavor(mpiexec_or_skip()) == "openmpi"
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n" if openmpi else "localhost:2\n")  # each MPI's format
    with socket.socket() as probe:  # a free port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with simdist.World(2, backend="mpi", hostfile=hostfile, listen=f"127.0.0.1:{port}", timeout=20) as world:
        driver = world._driver
        assert driver._listener.getsockname() == ("127.0.0.1", port)
        assert ["--hostfile" if openmpi else "-f", str(hostfile)] == driver.command()[3:5]
        assert world.run(lambda comm: comm.allreduce(np.array([comm.rank + 1])).item()) == [3, 3]

        unpickled = []

        class Trap:
            def __reduce__(self):
                return unpickled.append, ("unpickled!",)

        def impostor():  # over TCP to the fixed port, with a wrong secret and a booby-trapped hello
            with Connection(socket.create_connection(("127.0.0.1", port)).detach()) as conn, suppress(Exception):
                answer_challenge(conn, b"not the secret")
                conn.send_bytes(pickle.dumps(("hello", 0, 1, 2, "x", Trap())))

        thread = threading.Thread(target=impostor)
        thread.start()
        driver._listener.setblocking(True)
        accepted, _ = driver._listener.accept()
        before = list(driver._conns)
        driver._admit(accepted)
        thread.join(10)
        assert driver._conns == before and unpickled == []
        assert world.run(lambda comm: comm.rank) == [0, 1]
