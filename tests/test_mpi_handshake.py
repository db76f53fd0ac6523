"""The MPI backend's handshake: other connections to a world's listener delay no rank.

Any local process can connect to the loopback port on which an MPI world's
driver admits its ranks. Silent peers and peers with a wrong secret must
neither stop nor slow down the start of a world, nor the new MPI job that
follows a failed run; each is dropped after a short deadline.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import threading
import time
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

import numpy as np
import pytest

import simdist
from conftest import mpiexec_or_skip
from simdist.mpi._driver import MpiDriver
from simdist.mpi import _handshake
from simdist.mpi._handshake import HANDSHAKE, Handshakes

SILENT = 7  # peers that connect and say nothing (7 of them took 62 s when handshakes ran one by one)
QUICKLY = 20.0  # seconds: a world starts in about 2 on a loaded 2-CPU machine


class Crowd:
    """Peers on a world's port: ``SILENT`` that say nothing and one that
    answers the challenge with a wrong secret."""

    def __init__(self, port: int):
        self.silent = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(SILENT)]
        self.impostor_told: list[str] = []
        impostor = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.thread = threading.Thread(target=self._impostor, args=(impostor,), daemon=True)
        self.thread.start()

    def _impostor(self, sock: socket.socket) -> None:
        sock.settimeout(None)  # a Connection needs a blocking descriptor
        conn = Connection(sock.detach())
        try:
            answer_challenge(conn, b"not the secret")
            self.impostor_told.append("welcome")
        except Exception as exc:
            self.impostor_told.append(type(exc).__name__)
        finally:
            conn.close()

    def dropped(self) -> bool:
        """True once the driver has refused the impostor and closed every silent peer."""
        self.thread.join(HANDSHAKE + 10)
        for sock in self.silent:
            sock.settimeout(HANDSHAKE + 10)
            while sock.recv(4096):  # the driver's challenge, then end of file
                pass
        assert self.impostor_told == ["AuthenticationError"], self.impostor_told
        return True

    def close(self) -> None:
        for sock in self.silent:
            sock.close()
        self.thread.join(HANDSHAKE + 10)


@pytest.fixture
def crowds():
    made: list[Crowd] = []
    yield made
    for crowd in made:
        crowd.close()


def rank_side(port: int, key: bytes, rank: int) -> None:
    """What an MPI rank does to join its world (simdist.mpi's worker)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.settimeout(None)
    conn = Connection(sock.detach())
    answer_challenge(conn, key)
    deliver_challenge(conn, key)
    conn.send_bytes(pickle.dumps(("hello", rank, os.getpid(), 2, "a test", "a-host")))
    try:
        conn.recv_bytes()  # until the driver's end closes
    except EOFError:
        pass
    conn.close()


def test_a_rank_behind_silent_and_impostor_peers_is_admitted_at_once(crowds):
    key = os.urandom(32)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        crowds.append(Crowd(port))  # before the rank, in the listen backlog
        rank = threading.Thread(target=rank_side, args=(port, key, 1), daemon=True)
        rank.start()
        handshakes = Handshakes(listener, key)
        started = time.monotonic()
        try:
            hello, conn = handshakes.take(HANDSHAKE + 10)
            took = time.monotonic() - started
            conn.close()
            crowds[0].thread.join(10)  # the impostor's refusal, which needs no take()
        finally:
            handshakes.close()  # drops the silent peers
        rank.join(10)
    assert hello[:2] == ("hello", 1) and took < HANDSHAKE / 2, f"{hello}, after {took:.2f} s"
    assert crowds[0].dropped()


def trickle(port: int, stopped: list) -> None:
    """A peer that reads the challenge and announces a 200-byte answer, sent
    one byte every 0.1 s: no receive of the driver waits long, yet the
    handshake would take 20 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.recv(4096)
        started = time.monotonic()
        try:
            sock.sendall((200).to_bytes(4, "big"))
            for _ in range(200):
                sock.sendall(b"x")
                time.sleep(0.1)
        except OSError:
            stopped.append(time.monotonic() - started)


@pytest.mark.slow
def test_a_peer_that_has_not_finished_its_handshake_in_time_is_dropped(monkeypatch, caplog):
    monkeypatch.setattr(_handshake, "HANDSHAKE", 0.5)
    stopped: list[float] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        silent = socket.create_connection(("127.0.0.1", port), timeout=30)
        trickler = threading.Thread(target=trickle, args=(port, stopped), daemon=True)
        trickler.start()
        handshakes = Handshakes(listener, os.urandom(32))
        try:
            assert handshakes.take(1.0) is None
            silent.settimeout(0.5)
            received = b""
            while chunk := silent.recv(4096):  # the challenge, then end of file before close()
                received += chunk
            trickler.join(10)
        finally:
            handshakes.close()
            silent.close()
    assert b"#CHALLENGE#" in received
    assert stopped and stopped[0] < 1.5, stopped
    dropped = [r for r in caplog.records if r.levelno == logging.WARNING and "no handshake within 0.5 s" in r.getMessage()]
    assert len(dropped) == 2, [r.getMessage() for r in caplog.records]


def test_a_silent_peer_is_reported_out_of_time_when_its_own_receive_times_out_first(monkeypatch, caplog):
    """The handshake's receive is bounded by the same time as the driver's
    drop; whichever ends it, the report is the same."""
    monkeypatch.setattr(_handshake, "HANDSHAKE", 0.3)
    monkeypatch.setattr(Handshakes, "_drop_overdue", lambda self, now: None)  # only the receive's bound ends it
    with socket.create_server(("127.0.0.1", 0)) as listener:
        silent = socket.create_connection(("127.0.0.1", listener.getsockname()[1]), timeout=30)
        handshakes = Handshakes(listener, os.urandom(32))
        try:
            assert handshakes.take(1.0) is None
        finally:
            handshakes.close()
            silent.close()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert messages == ["backend 'mpi': refused a connection to the world's listener: no handshake within 0.3 s"]


@pytest.mark.slow
def test_silent_and_impostor_peers_do_not_delay_the_start_of_an_mpi_world(monkeypatch, crowds):
    launch = MpiDriver._launch

    def crowded_launch(driver):  # the peers connect before mpiexec starts the ranks
        crowds.append(Crowd(driver._listener.getsockname()[1]))
        launch(driver)

    mpiexec_or_skip()
    monkeypatch.setattr(MpiDriver, "_launch", crowded_launch)
    started = time.monotonic()
    with simdist.World(2, backend="mpi", timeout=20) as world:
        took = time.monotonic() - started
        assert world.run(lambda comm: comm.allreduce(np.array([comm.rank + 1]))) == [np.array([3])] * 2
    assert took < QUICKLY, f"the world took {took:.1f} s to start"
    assert len(crowds) == 1 and crowds[0].dropped()


@pytest.mark.slow
def test_silent_and_impostor_peers_do_not_delay_the_new_job_after_a_failed_run(crowds):
    def program(comm):
        if comm.rank == 1:
            raise ValueError("rank 1 fails")
        comm.barrier()  # rank 0 waits in MPI: the run ends the job, the next starts a new one

    mpiexec_or_skip()
    with simdist.World(2, backend="mpi", timeout=20) as world:
        crowds.append(Crowd(world._driver._listener.getsockname()[1]))  # waiting in the listen backlog
        started = time.monotonic()
        with pytest.raises(simdist.RankError):
            world.run(program)
        assert world.run(lambda comm: comm.allreduce(np.array([comm.rank + 1]))) == [np.array([3])] * 2
        took = time.monotonic() - started
    assert took < QUICKLY, f"the failed run and the next took {took:.1f} s"
    assert crowds[0].dropped()
