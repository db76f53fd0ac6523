"""Point-to-point bugs: messages that arrive, but not as sent.

The contract says messages from one rank to another with one tag arrive in
the order they were sent (MPI's non-overtaking rule). A transport that
sends over several connections, or retries a lost packet, breaks it.
"""

from __future__ import annotations

import numpy as np

from simdist._arguments import as_input, check_int, check_rank_arg

from ._base import Wrapper

__all__ = ["ReorderedMessages"]


class ReorderedMessages(Wrapper):
    """Consecutive sends to the same destination with the same tag are
    delivered swapped: the first is held back and sent right after the
    second, so pairs (1st, 2nd), (3rd, 4th), ... trade places.

    Shows as ``recv`` returning the second message first (wrong values,
    perhaps a wrong shape or dtype); single messages, and messages with
    other tags or destinations in between, arrive as sent. A held message
    is sent (so nothing is lost or deadlocks) before this rank's next send
    elsewhere and before every call that may block: ``recv``, any collective,
    ``barrier``, ``split``, ``free`` -- on this communicator or any split
    from it. A program whose last call is a send should end with
    :meth:`flush` (or any of those calls), or that message is never sent.
    """

    name = "reordered_messages"
    touches = frozenset(("send", "recv"))

    def __init__(self, base, *, seed=0):
        super().__init__(base, seed=seed)
        # [None] or [(communicator, dest, tag, copy of x)]: at most one message
        # is held, shared with the sub-communicators split from this one
        self._held: list = [None]

    def _child(self, sub):
        child = super()._child(sub)
        child._held = self._held
        return child

    def send(self, x, dest, tag=0):
        # checked now, with the base's messages, rather than when the message leaves
        x = as_input(x, self.rank, "send")
        dest = check_rank_arg(dest, self.size, self.rank, "send", "dest")
        tag = check_int(tag, self.rank, "send", "tag", minimum=0)
        held = self._held[0]
        if held is not None and held[0] is self and held[1:3] == (dest, tag):
            self._held[0] = None
            self.base.send(x, dest, tag=tag)  # the later message overtakes
            self.base.send(held[3], dest, tag=tag)  # the one held back
            return
        self.flush()
        self._held[0] = (self, dest, tag, np.array(x, copy=True))  # the caller may reuse x once send returns

    def flush(self) -> None:
        """Send the message held back, if any (not part of the contract)."""
        held, self._held[0] = self._held[0], None
        if held is not None:
            comm, dest, tag, x = held
            comm.base.send(x, dest, tag=tag)

    def _before(self, name: str) -> None:
        self.flush()
