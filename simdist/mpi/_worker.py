"""An MPI rank's process, started by ``mpiexec``: runs the functions its
driver sends, each with an :class:`MpiComm` over a duplicate of
``MPI_COMM_WORLD`` of its own (``RunComms``).

It reaches the driver over loopback TCP and proves it knows the world's
secret (``SIMDIST_AUTHKEY``, from the environment) before anything is
unpickled on either side. A reader thread answers the driver's "where are
you?" while the main thread runs user code or waits inside MPI, and exits
the process when the driver's end closes.
"""

from __future__ import annotations

import os
import pickle
import queue
import socket
import sys
import threading
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

from .._stdin import VARIABLE, mpi_rank_stdin, take_stdin
from .._whereabouts import FAILED, RETURNED, USER
from .._worker import Channel, die_with_parent, execute, forward_logs, ignore_interrupts
from ._segments import unlink_segments_once_mapped
from ._spmd import driven
from ._tracking import TrackedComm, Whereabouts


def _connect(address: str, key: bytes) -> Connection:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=60)
    sock.settimeout(None)
    conn = Connection(sock.detach())
    answer_challenge(conn, key)
    deliver_challenge(conn, key)
    return conn


def _read_commands(conn: Connection, channel: Channel, where: Whereabouts, commands: queue.Queue) -> None:
    try:
        while True:
            msg = pickle.loads(conn.recv_bytes())
            if msg[0] == "where":
                channel.send(("where", msg[1], where.snapshot()))
            else:
                commands.put(msg)
    except (EOFError, OSError):
        os._exit(70)  # the driver is gone: so is this rank


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()
    ignore_interrupts()
    driven()  # the launcher's variables are simdist's own mpiexec's here
    key = bytes.fromhex(os.environ.pop("SIMDIST_AUTHKEY"))
    options = {"check_calls": True} if os.environ.pop("SIMDIST_CHECK_CALLS", "") == "1" else {}
    if os.environ.pop("SIMDIST_SYNC_SENDS", "") == "1":
        options["sync_sends"] = True
    from mpi4py import MPI

    from ._comm import RunComms

    left = unlink_segments_once_mapped(MPI.COMM_WORLD)  # before anything can fail
    conn = _connect(argv[0], key)
    channel = Channel(conn)
    rank = MPI.COMM_WORLD.Get_rank()
    forward_logs(channel)
    # rank 0 reads the driver's standard input, the others /dev/null, as under mpiexec (see simdist._stdin)
    take_stdin(mpi_rank_stdin(rank, os.environ.pop(VARIABLE, "")))
    # The world's size and the library let the driver tell an mpiexec of
    # another MPI (whose ranks each find a world of 1) from a slow start.
    library = MPI.Get_library_version().splitlines()[0].split(",")[0].strip()
    channel.send(("hello", rank, os.getpid(), MPI.COMM_WORLD.Get_size(), library, socket.gethostname()))
    channel.send(("segments", left))
    where = Whereabouts()
    runs = RunComms(**options)
    commands: queue.Queue = queue.Queue()
    threading.Thread(target=_read_commands, args=(conn, channel, where, commands), daemon=True).start()

    def set_state(value):
        where.state = value

    while True:
        msg = commands.get()
        if msg[0] == "exit":
            break
        where.__init__()
        outcome = execute(
            rank,
            lambda: TrackedComm(runs.start(), where),
            *msg[2:],
            started=lambda: set_state(USER),
            failed=lambda: set_state(FAILED),
            returned=lambda: set_state(RETURNED),
        )
        channel.send(("done", msg[1], *outcome))


if __name__ == "__main__":
    main()
