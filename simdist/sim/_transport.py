"""A simulator communicator's point-to-point endpoint: what the simulated
mpi4py builds on.

``SimComm.transport`` is this object. It maps the communicator's ranks to
world ranks over the rank's ``Mailboxes`` (``_p2p``, the byte rings), and
``SimComm.send``/``recv`` are its ``send``/``recv``. The mpi4py stand-in
(``fake_backends.mpi4py``) runs MPI's matching, its eager and rendezvous
protocols and its progress engine over it, and uses nothing else of the
simulator but the contract's collectives, ``split`` and ``free``: it needs
to look at a message before taking it (``probe``), to send without ever
waiting (``try_send``), to state the MPI call it waits in (``waiting_in``),
to move its messages while the rank waits in a collective
(``move_in_collectives``), a shared file for what a run's ranks share
(``run_file``), the context id that keys a communicator's
messages, the members' world ranks, and the ring size its flow control
budgets.

Every method checks its arguments as the contract's ``send``/``recv`` do
(``InvalidValue``/``InvalidType`` naming the rank and argument) and raises
``SimdistError`` once the communicator is closed: freed, or left from an
earlier run (``close``).
"""

from __future__ import annotations

import os
import sys

from .. import _pickling
from .._arguments import as_input, check_int, check_rank_arg
from .._driver import log_levels
from .._errors import InvalidValue, SimdistError
from ._layout import H_UNIVERSE_SIZE
from ._p2p import Mailboxes, record_bytes
from ._requests import ask_driver

#: Why a communicator refuses every call (``closed_error``): ``free`` was
#: called, or the run that made it has ended (the worker closes every
#: communicator of a run when its function returns).
FREED = "that was freed"
EARLIER_RUN = ("that belongs to an earlier run; a communicator lasts only for the World.run call that made it: "
               "use the one this run passes to the function (and split it again)")


def closed_error(rank: int, name: str, why: str) -> SimdistError:
    """The error of a call ``name`` on a closed communicator (``why``)."""
    return SimdistError(f"rank {rank}: {name} on a communicator {why}")


class Transport:
    """Point-to-point over one communicator of the simulator.

    Attributes (read-only by convention):

    ``rank``, ``size``
        This rank in the communicator, and the communicator's size.
    ``context``
        The key of the communicator's messages: the same on all its
        members, and never that of another communicator the rank had in the
        run, live or freed (it holds the context index and the first epoch:
        see ``SimComm.split``); messages of one context are never seen by
        another's ``probe`` or ``recv``, so a message left unreceived on a
        freed communicator never reaches one that reuses its index.
    ``members``
        The members' world ranks, in communicator rank order (a tuple).
    ``world_size``
        The number of ranks of the world.
    ``ring_bytes``
        The capacity of each ordered pair's ring. A message takes
        ``record_bytes(nbytes, ndim)`` of it while it is not received.
    """

    __slots__ = ("rank", "size", "context", "members", "world_size", "ring_bytes", "_mail", "_closed")

    def __init__(self, mailboxes: Mailboxes, members: list[int], ctx: int, rank: int, world_size: int,
                 ring_bytes: int):
        self._mail = mailboxes
        self.members = tuple(members)
        self.context = ctx
        self.rank = rank
        self.size = len(members)
        self.world_size = world_size
        self.ring_bytes = ring_bytes
        self._closed = None  # why every call raises: FREED, EARLIER_RUN (see close)

    #: ``record_bytes(nbytes, ndim)``: the ring bytes a message of ``nbytes``
    #: with ``ndim`` dimensions takes until it is received (its payload plus
    #: 40 + 8 * ndim bytes of header, padded to 8).
    record_bytes = staticmethod(record_bytes)

    def close(self, why: str) -> None:
        """Every later call raises, saying ``why`` (``FREED``, ``EARLIER_RUN``)."""
        self._closed = why

    def send(self, x, dest: int, tag: int = 0) -> None:
        """The contract's ``send``: waits while the message's record does not
        fit in the free space of the ring to ``dest`` (see ``try_send``), and
        in a world with ``sync_sends`` until ``dest``'s ``recv`` takes it."""
        x, world_dest, tag = self._outgoing(x, dest, tag)
        self._mail.send(x, world_dest, tag, self.context, self._mail.sync_sends)

    def recv(self, source: int, tag: int = 0):
        """The contract's ``recv``."""
        source = check_rank_arg(source, self.size, self.rank, "recv", "source")
        tag = check_int(tag, self.rank, "recv", "tag", minimum=0)
        self._check_open("recv")
        return self._mail.recv(self.members[source], tag, self.context)

    def probe(self, source: int | None = None, tag: int | None = None, block: bool = True):
        """The first message on this communicator from ``source`` (a rank of
        this communicator; None: any) with ``tag`` (an int >= 0; None: any),
        as ``(source, tag)``, without receiving it: a following
        ``recv(source, tag)`` with the returned source and tag returns
        exactly that message.

        From one source it is the earliest sent that matches. With
        ``source=None`` the sources are checked in ascending rank order and
        the first with a matching message *at the time of its check* wins,
        so which source wins depends on timing, as with MPI_ANY_SOURCE.
        Messages of other communicators are never seen.

        ``block=False`` returns None at once when nothing matches;
        ``block=True`` returns None only when the driver released a
        ``waiting_in(..., releasable=True)`` wait.
        ``block=True`` waits as ``recv`` does: the rank is "waiting in probe
        #n from rank r (tag=t)" (or "from any rank", "tag=any") for the hang
        watch and its reports, and a peer that fails, or an abort, unwinds
        it. A message larger than the ring is reported as soon as its header
        is in the ring; to look past a message that does not match, the
        probe receives it into the per-rank stash ``recv`` uses, which may
        wait (in a non-blocking probe too) for its sender to finish writing
        it, and no longer."""
        if source is not None:
            source = check_rank_arg(source, self.size, self.rank, "probe", "source")
        if tag is not None:
            tag = check_int(tag, self.rank, "probe", "tag", minimum=0)
        self._check_open("probe")
        members = self.members
        sources = members if source is None else (members[source],)
        found = self._mail.probe(sources, tag, self.context, bool(block), source is None)
        if found is None:
            return None
        world, found_tag = found
        return (source if source is not None else members.index(world)), found_tag

    def may_have_mail(self) -> bool:
        """False only if no message from a member waits for this rank, on
        any communicator: a cheap look before a non-blocking ``probe``
        (where the members are consecutive world ranks, one comparison of
        their rings' head and tail words)."""
        return self._mail.may_have_mail(self.members)

    def waiting_in(self, call: str | None, peer: int | None = None, releasable: bool = False) -> None:
        """State the MPI call this rank is in while an engine built over the
        transport waits in ``probe`` for its records: ``call`` is its text as
        the user wrote it (``"Recv(source=1, tag=0)"``), ``peer`` the world
        rank whose record would end the wait (None: any rank). Until
        ``waiting_in(None)`` clears it, deadlock and hang reports show this
        call and follow ``peer`` in the wait-for cycle instead of the
        transport's probe from any rank. Whether the run is deadlocked is
        still decided from the transport's own waits, so a wrong ``peer``
        can only make a report name the wrong rank, never call a run that
        can move deadlocked.

        ``releasable=True`` says the engine can end this call's wait itself
        (its sends run synchronous only for the buffering check): when the
        driver finds the rank in a deadlock, it releases the wait instead of
        failing the run, and the blocking ``probe`` returns None; the engine
        then completes those sends as MPI would have buffered them."""
        if call is not None:
            call = str(call)
            if peer is not None:
                peer = check_int(peer, self.rank, "waiting_in", "peer", minimum=0)
                if peer >= self.world_size:
                    raise InvalidValue(f"rank {self.rank}: waiting_in peer={peer} is not a world rank "
                                       f"(the world has {self.world_size})")
        self._check_open("waiting_in")
        self._mail.state_mpi_call(call, peer, bool(releasable))

    def failed(self, world_rank: int) -> bool:
        """Whether world rank ``world_rank`` has failed in this run (raised,
        or died): what it has not sent yet will never come. An engine that
        polls (``probe(block=False)``) asks this to stop waiting for it."""
        return self._mail.failed(world_rank)

    def move_in_collectives(self, mover) -> None:
        """Have ``mover()`` called while this rank waits in a collective of
        any communicator (None: no longer), as MPI's progress rule wants an
        engine's messages to move then: it must never wait, and returns
        True while it has messages in flight. Until it returns False, such
        a wait is not a deadlock for the driver (a record could wake the
        rank and let it send); a hang still ends at the world's timeout."""
        self._mail._arena.mover = mover

    def run_file(self) -> tuple[int, int]:
        """``(fd, offset)``: the world's shared-memory file, which every rank
        maps, and the offset past the simulator's own bytes. An engine over
        the transport may keep state there that all ranks of a run share
        (the mpi4py stand-in's name service): it grows the file itself and
        locks what it writes (``fcntl`` record locks past ``offset``). The
        simulator cuts the file back to ``offset`` before each run, so
        nothing written there outlives its run."""
        self._check_open("run_file")
        arena = self._mail._arena
        return arena.fd, arena.layout.total

    def universe(self) -> "Transport":
        """The transport over every slot of the world's arena, the spare
        slots of ``World(universe=U)`` included (``world_size`` of them, in
        slot order; this rank is its slot), with the message key of the
        run's first world: the one an engine uses to reach processes of
        other worlds (spawned ones, their parents). When the arena holds
        one world that is the world's own transport."""
        self._check_open("universe")
        members = tuple(range(self.world_size))
        if self.context == 0 and self.members == members:
            return self
        return Transport(self._mail, list(members), 0, self._mail._arena.rank, self.world_size, self.ring_bytes)

    def universe_size(self) -> int:
        """What ``MPI.UNIVERSE_SIZE`` answers: the universe's slots, or with
        ``World(universe="oversubscribe")`` the host's (see ``_spares``)."""
        return int(self._mail._arena.q[H_UNIVERSE_SIZE]) or self.world_size

    def spawn(self, count: int, fn, args: tuple) -> list[int]:
        """Start ``count`` processes in spare slots of the universe, each
        running ``fn(comm, *args)`` as a rank of a world of their own (``comm``
        its world communicator), with this process's ``sys.path`` and
        working directory; return their slots, their ranks in
        ``universe()``. Raises ``SimdistError`` when too few slots are free."""
        self._check_open("spawn")
        payload = _pickling.dumps((fn, tuple(args), {}))
        kind, answer = ask_driver(("spawn", int(count), (payload, list(sys.path), os.getcwd(), log_levels())))
        if kind != "ok":
            raise SimdistError(f"rank {self.rank}: {answer}")
        return answer

    def try_send(self, x, dest: int, tag: int = 0) -> bool:
        """``send`` if it would not wait, else nothing.

        ``send`` waits whenever the message's record (``record_bytes``) does
        not fit in the free space of the ring to ``dest`` -- always for a
        message larger than the ring, but also for a small one behind
        unreceived messages -- until ``dest`` receives enough of it.
        ``try_send`` sends and returns True when the record fits now (then
        the send does not wait, since only the receiver frees space), and
        returns False without sending otherwise."""
        x, world_dest, tag = self._outgoing(x, dest, tag)
        if not self._mail.fits(x, world_dest):
            return False
        self._mail.send(x, world_dest, tag, self.context)
        return True

    def _outgoing(self, x, dest: int, tag: int) -> tuple:
        """A send's checked arguments: the array, the destination's world rank, the tag."""
        x = as_input(x, self.rank, "send")
        dest = check_rank_arg(dest, self.size, self.rank, "send", "dest")
        tag = check_int(tag, self.rank, "send", "tag", minimum=0)
        self._check_open("send")
        return x, self.members[dest], tag

    def _check_open(self, name: str) -> None:
        if self._closed:
            raise closed_error(self.rank, name, self._closed)

    def __repr__(self):
        return f"<Transport rank {self.rank} of {self.size}, context {self.context}>"
