"""The MPI backend's handshake: other connections to a world's listener delay no rank.

Any local process can connect to the loopback port on which an MPI world's
driver admits its ranks. Silent peers and peers with a wrong secret must
neither stop nor slow down the start of a world, nor the new MPI job that
follows a failed run; each is dropped after a short deadline.
"""

from __future__ import annotations

import socket
import threading
import time
from multiprocessing.connection import Connection, answer_challenge

import numpy as np
import pytest

import simdist
from conftest import mpiexec_or_skip
from simdist.mpi._driver import MpiDriver
from simdist.mpi._handshake import HANDSHAKE

mpiexec_or_skip()

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


@pytest.mark.slow
def test_silent_and_impostor_peers_do_not_delay_the_start_of_an_mpi_world(monkeypatch, crowds):
    launch = MpiDriver._launch

    def crowded_launch(driver):  # the peers connect before mpiexec starts the ranks
        crowds.append(Crowd(driver._listener.getsockname()[1]))
        launch(driver)

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

    with simdist.World(2, backend="mpi", timeout=20) as world:
        crowds.append(Crowd(world._driver._listener.getsockname()[1]))  # waiting in the listen backlog
        started = time.monotonic()
        with pytest.raises(simdist.RankError):
            world.run(program)
        assert world.run(lambda comm: comm.allreduce(np.array([comm.rank + 1]))) == [np.array([3])] * 2
        took = time.monotonic() - started
    assert took < QUICKLY, f"the failed run and the next took {took:.1f} s"
    assert crowds[0].dropped()
