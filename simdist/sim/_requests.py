"""What a rank asks its driver during a run, over the worker's pipe.

Between runs the worker reads the pipe; during a run only the rank's own
code does, so a request is sent and its answer read in one step. The one
request is a rank's Spawn (``Transport.spawn``; the driver serves it in
``_spares``).
"""

from __future__ import annotations

import pickle

#: This worker's pipe to the driver: its Channel and Connection (``_worker.main`` sets it).
pipe = None


def ask_driver(request: tuple):
    """Send ``request`` to the driver and wait for its answer."""
    channel, conn = pipe
    channel.send(("request", request))
    return pickle.loads(conn.recv_bytes())
