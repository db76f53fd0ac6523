"""Point-to-point messages of the mpi4py stand-in: the protocol, MPI's
matching, and the progress engine.

Transport
---------
Every MPI message of every communicator of a rank travels over one
simulator transport, the world SimComm's (``SimComm.transport``), with one
tag (``TRANSPORT_TAG``), as *records*: each record is one message of the
transport, a uint8 array that starts with 9 int64 header words. Messages to
the rank itself never touch the transport; their records go to a local
queue. The transport only carries bytes in order, per ordered pair of
ranks; MPI's matching (communicator, source or ANY_SOURCE, tag or ANY_TAG,
in posting and arrival order) is done here, on the envelopes the engine
has received::

    EAGER  kind, ctx, source, tag, nbytes, flags, 0, clock, noted | payload, note   a whole message
    RTS    kind, ctx, source, tag, nbytes, flags, id, clock, noted | note      a larger message is ready
    CTS    kind, id                                        its receiver matched it: send it
    DATA   kind, id, offset | payload                      a piece of it
    ACK    kind, consumed                                  flow control (below)

``ctx`` is the communicator's transport context (the same on all its ranks),
``source`` the sender's rank in that communicator, ``id`` numbers the
sender's large messages; ``clock`` is the race check's Lamport clock
(``_schedule``), ``noted`` the size of the misuse checks' note that
follows the payload (``_misuse``); both are 0 without those checks. A message up to the eager limit (64 KiB, less on
large worlds) goes at once, and its send completes at once, as under MPI.
A larger one, or any synchronous send (Ssend), is a rendezvous: the sender
sends RTS; the receiver, once a receive matches the envelope, answers CTS
and the sender streams DATA records, each at most a quarter of the budget
below, which the receiver copies into the receive buffer. The send
completes when its last piece is handed to the transport. Unsafe programs
(both ranks Send a large message, then Recv) therefore hang here as under
MPI, and are reported as hangs.

Never waiting in a send
-----------------------
The transport's ``send`` waits when a record does not fit in the ring's
free space, until the receiver takes enough bytes. Waiting there could
deadlock a correct MPI program (two ranks that each Isend 16 MB to the
other, then Recv, then Wait; or a rank that Isends and enters a Barrier its
peer is already in). So the engine never waits in a send: it writes a
record only through the transport's ``try_send``, only when its credit
allows, and otherwise queues the record (in order, per destination) for a
later attempt.

Credit: of each ring of ``R`` bytes, the sender may have at most
``B = R - 4096`` bytes of records (their full ring size, the transport's
``record_bytes``: 48 bytes of header, payload padded to 8) that the
receiver has not acknowledged. The receiver counts the bytes it takes from
each sender and sends an ACK (with the running total) whenever it has
taken ``B / 4`` since its last ACK. ACKs take no credit. Why this never
waits and never stalls:

* a ring holds at most ``B`` bytes of records plus the ACKs not yet read;
  a sender sends new records only after reading ACKs (reading takes all
  ACKs in order), and ``B`` bytes produce at most 4 ACKs, so the ACKs in a
  ring never exceed 4 x 64 bytes, well within the 4096 reserved: every
  ``try_send`` succeeds (a failure only queues the record);
* a sender short of credit has more than ``3B / 4`` bytes unacknowledged
  (no record exceeds ``B / 4``); once its receiver has taken them, it has
  taken at least ``B / 4`` bytes since its last ACK, so it sends one: a
  queued record always gets its credit back, and the sender is woken by the
  ACK's arrival.

Progress
--------
The engine runs only inside calls of the stand-in: ``progress()`` takes
every record that has arrived (matching envelopes, storing pieces,
noting ACKs) and writes the queued records that have credit. Blocking calls
(Recv, Wait*, Probe, Send of a large message, ...) run it once, then loop:
test their condition and, while it does not hold, wait in the transport's
``probe`` for the next record from any rank, take it and write what it gave
credit for. Everything that can make a condition true
arrives as a record (a message, a CTS, an ACK that lets a queued piece go),
so that wait is never missed. While it waits, the engine states the MPI
call it is in and the rank whose record would end the wait (the source of
a Recv, the destination of a rendezvous send, a Wait's or Waitall's first
pending request; any rank for ANY_SOURCE) through the transport's
``waiting_in``: the simulator's deadlock and hang reports then show
``rank 0 in Recv(source=1, tag=0) at prog.py:11 <- rank 1 in ...``, not
its probe from any rank. A peer that failed unwinds the wait. Collectives run
``progress()`` before they start, and while the rank waits in one of the
simulator's collectives the simulator calls ``_move`` at every wake-up (any
record into the rank brings one), as long as a message is in flight: a
large send freed or still pending before a Barrier is carried on, as MPI's
progress rule has it. Nonblocking calls (Isend, Irecv) post their operation
and write what has credit, and take nothing.

Which message ANY_SOURCE matches when several are ready depends on timing,
as under MPI.
"""

from __future__ import annotations

import collections

import numpy as np

from simdist._errors import CollectiveMismatch

from . import _misuse, _schedule
from ._errors import ERR_TRUNCATE, Exception as MPIException, earlier_run
from ._waits import NO_PEER, release_sends, state_wait

#: The transport tag every record of the stand-in travels with.
TRANSPORT_TAG = 0x4D5049
ANY_SOURCE, ANY_TAG, PROC_NULL = -1, -1, -2

HEADER = 72  # bytes: 9 int64 words
EAGER_MAX = 64 << 10
RESERVE = 4096  # ring bytes kept for ACKs
EAGER, RTS, CTS, DATA, ACK = 1, 2, 3, 4, 5
PICKLED = 1  # flags: the payload is a pickle (lowercase API)


def _record(kind: int, *words: int, payload: np.ndarray | None = None) -> np.ndarray:
    n = 0 if payload is None else payload.size
    rec = np.empty(HEADER + n, np.uint8)
    head = rec[:HEADER].view(np.int64)
    head[0] = kind
    head[1:1 + len(words)] = words
    head[1 + len(words):] = 0
    if n:
        rec[HEADER:] = payload
    return rec


class Envelope:
    """A message that arrived and is not yet matched: EAGER (``payload``
    set) or RTS (``msg_id`` set, the data still at the sender)."""

    __slots__ = ("ctx", "source", "tag", "nbytes", "flags", "world", "payload", "msg_id", "note", "arrival")

    def __init__(self, ctx, source, tag, nbytes, flags, world, payload, msg_id, note=None):
        self.ctx, self.source, self.tag, self.nbytes = ctx, source, tag, nbytes
        self.flags, self.world, self.payload, self.msg_id = flags, world, payload, msg_id
        self.note = note  # what the sender's checks sent along (``_misuse.note``), or None
        self.arrival = None  # its index in the race log (--check=race)


class SendOp:
    """A send in progress. ``done`` once the data is handed over."""

    __slots__ = ("done", "dest", "data", "offset", "msg_id", "pending", "error", "desc", "checked")

    def __init__(self, dest: int, desc, checked: bool = False):
        self.checked = checked  # a standard send run synchronous for the buffering check
        self.done = False
        self.dest = dest
        self.data = None
        self.offset = 0
        self.msg_id = 0
        self.pending = None  # a DATA record built but not yet sent (no credit)
        self.error = None
        self.desc = desc

    pickled = False


class RecvOp:
    """A receive in progress. ``sink`` is the uint8 view of the receive
    buffer (None: a pickle, kept in ``data``); ``status`` is (source, tag,
    nbytes) once matched. ``unpack(nbytes)``, if given, runs once the bytes
    are in the sink (a derived datatype's sink is packed)."""

    __slots__ = ("done", "ctx", "source", "tag", "sink", "pickled", "status", "data", "buf", "received",
                 "error", "cancelled", "desc", "unpack", "peer", "check", "wildcard")

    def __init__(self, ctx, source, tag, sink, desc, unpack=None, peer=None, check=None):
        self.unpack = unpack
        self.peer = peer  # the world rank of the source (None: any, until matched)
        self.check = check  # the misuse checks' record of the receive (``_misuse.RecvCheck``), or None
        self.wildcard = None  # its decision number in the race log (--check=race)
        self.done = False
        self.ctx, self.source, self.tag = ctx, source, tag
        self.sink = sink
        self.pickled = sink is None
        self.status = None
        self.data = None
        self.buf = None
        self.received = 0
        self.error = None
        self.cancelled = False
        self.desc = desc

    def matches(self, env: Envelope) -> bool:
        return (env.ctx == self.ctx and (self.source == ANY_SOURCE or self.source == env.source)
                and (self.tag == ANY_TAG or self.tag == env.tag))

    def _finish(self, data: np.ndarray, in_place: bool = False) -> None:
        """Store a complete message (``in_place``: it is already in the sink)."""
        if self.sink is None:
            self.data = data
        else:
            n = data.size
            if n > self.sink.size:
                n = self.sink.size
                self.error = MPIException(
                    ERR_TRUNCATE, f"a message of {data.size} bytes for a receive buffer of {self.sink.size} bytes"
                )
            if not in_place:
                self.sink[:n] = data[:n]
            if self.check is not None:
                self.check.stored(self.sink, n)
            if self.unpack is not None:
                self.unpack(n)
        self.done = True


class PairOp:
    """The send and the receive of one Sendrecv (Isendrecv): done when both
    are; its error, status and received data are the receive's (or the
    send's error)."""

    __slots__ = ("send", "recv")
    cancelled = False

    def __init__(self, send, recv):
        self.send, self.recv = send, recv

    @property
    def done(self) -> bool:
        return self.send.done and self.recv.done

    @property
    def error(self):
        return self.recv.error or self.send.error

    def __getattr__(self, name):  # status, sink, data, desc: the receive's
        return getattr(self.recv, name)


def _matches(env: Envelope, ctx: int, source: int, tag: int) -> bool:
    return env.ctx == ctx and (source == ANY_SOURCE or source == env.source) and (tag == ANY_TAG or tag == env.tag)


class _Ended:
    """The transport of an engine whose run has ended: any use raises."""

    def __init__(self, rank: int):
        self._rank = rank

    def __getattr__(self, name):
        raise earlier_run(self._rank, "a request or message")


class Engine:
    """The p2p state of one rank for one run, over the world SimComm's
    transport (``SimComm.transport``)."""

    def __init__(self, transport):
        self._transport = transport
        self._me = transport.rank
        size = transport.size
        self._budget = budget = transport.ring_bytes - RESERVE
        self._piece = budget // 4 - self._ring_size(HEADER) - 8  # payload of the largest record
        self.eager_limit = min(EAGER_MAX, self._piece)
        self._sent = [0] * size  # ring bytes of records sent to each rank
        self._acked = [0] * size  # ... of which each rank has acknowledged
        self._taken = [0] * size  # ring bytes taken from each rank
        self._ack_sent = [0] * size  # ... as last acknowledged to it
        self._outq = [collections.deque() for _ in range(size)]  # records (and pieces) waiting for credit
        self._busy: set[int] = set()  # ranks with a non-empty queue
        self._acks_due: set[int] = set()  # ranks owed an ACK that did not fit
        self._local: collections.deque = collections.deque()  # records to this rank itself
        self._unexpected: list[Envelope] = []
        self._posted: list[RecvOp] = []
        self._awaiting_cts: dict[int, SendOp] = {}
        self._incoming: dict[tuple[int, int], RecvOp] = {}
        self._next_id = 0
        self.attached = None  # the buffer of MPI.Attach_buffer (see _buffered)
        self._buffered_lines: set = set()  # the user's lines of sends reported by ``release_sends``
        self.races = _schedule.new_log(self._me)
        transport.move_in_collectives(self._move)

    def close(self) -> None:
        """Forget the transport and every message (the run is over): a
        request or message kept for a later run is refused there."""
        self._transport.move_in_collectives(None)
        self._transport = _Ended(self._me)
        self._outq = []
        self._busy.clear()
        self._local.clear()
        self._unexpected.clear()
        self._posted.clear()
        self._awaiting_cts.clear()
        self._incoming.clear()
        self.attached = None
        if self.races is not None:
            self.races.dump()
            self.races = None

    # -- posting --------------------------------------------------------------------
    def send(self, dest: int, ctx: int, source: int, tag: int, data: np.ndarray, flags: int, sync: bool,
             desc=None, checked: bool = False, note=None) -> SendOp:
        """Start sending ``data`` (uint8) to world rank ``dest``; never waits.
        ``checked``: a standard send that ``sync`` makes synchronous only for
        the buffering check (``release``). ``note`` (uint8, the checks')
        follows the payload; header word 7 is its size."""
        op = SendOp(dest, desc, checked and sync)
        n = data.size
        noted = 0 if note is None else note.size
        clock = 0 if self.races is None else self.races.stamp()
        if n <= self.eager_limit and not sync:
            payload = data if note is None else np.concatenate([data, note])
            self._post(dest, _record(EAGER, ctx, source, tag, n, flags, 0, clock, noted, payload=payload))
            op.done = True
            return op
        self._next_id += 1
        op.msg_id = self._next_id
        op.data = data
        self._awaiting_cts[op.msg_id] = op
        self._post(dest, _record(RTS, ctx, source, tag, n, flags, op.msg_id, clock, noted, payload=note))
        return op

    def recv(self, ctx: int, source: int, tag: int, sink: np.ndarray | None, desc=None, unpack=None,
             peer: int | None = None, check=None) -> RecvOp:
        """Post a receive; it matches the earliest arrived envelope that fits.
        ``peer``: the world rank of ``source`` (None for ANY_SOURCE)."""
        wildcard = None
        if self.races is not None:
            wildcard, source = self.races.wildcard(source, desc)
        op = RecvOp(ctx, source, tag, sink, desc, unpack, peer, check)
        op.wildcard = wildcard
        for i, env in enumerate(self._unexpected):
            if op.matches(env):
                del self._unexpected[i]
                self._match(env, op)
                return op
        self._posted.append(op)
        return op

    def recv_matched(self, env: Envelope, sink: np.ndarray | None, desc=None, unpack=None, check=None) -> RecvOp:
        """Receive the envelope a matched probe took (Mprobe)."""
        op = RecvOp(env.ctx, env.source, env.tag, sink, desc, unpack, check)
        self._match(env, op)
        return op

    def cancel(self, op: RecvOp) -> bool:
        """Cancel a receive not yet matched; False if it was."""
        try:
            self._posted.remove(op)
        except ValueError:
            return False
        op.cancelled = True
        op.done = True
        return True

    def find(self, ctx: int, source: int, tag: int, take: bool = False) -> Envelope | None:
        """The earliest arrived envelope a receive would match (removed if ``take``)."""
        requested = source
        if self.races is not None:
            source = self.races.probe_source(source)
        for i, env in enumerate(self._unexpected):
            if _matches(env, ctx, source, tag):
                if take:
                    del self._unexpected[i]
                if self.races is not None:
                    self.races.probed(requested, tag, env.arrival, _schedule.probe_call(requested, tag, take))
                return env
        return None

    # -- waiting ----------------------------------------------------------------------
    def wait_until(self, condition, what: str, ops=(), peer=NO_PEER):
        """Progress until ``condition()`` is truthy; return its value.

        ``what`` names the MPI call, for the message when every peer has
        returned without sending what it waits for, and for the reports
        of a hang (``waiting_in``, see the module docstring): the rank it
        waits for is ``peer`` (a world rank, None: any), or that of the
        first of ``ops`` not done; with neither, the engine states nothing."""
        transport = self._transport
        self.progress()
        stated = None
        try:
            while True:
                value = condition()
                if value:
                    return value
                stated = state_wait(transport, what, ops, peer, stated)
                try:
                    found = transport.probe(None, TRANSPORT_TAG, block=True)
                except CollectiveMismatch as exc:
                    raise CollectiveMismatch(f"{what}: {exc}", exc.calls) from None
                if found is None:  # the driver released a deadlock of synchronous standard sends
                    release_sends(self._me, what, ops, self._buffered_lines)
                    stated = None
                    continue
                self._handle(found[0], transport.recv(found[0], TRANSPORT_TAG))
                self._settle()
        finally:
            if stated is not None:
                transport.waiting_in(None)

    def flush(self) -> None:
        """Before the rank ends (MPI_Finalize): hand over every queued record
        and every payload whose receiver has matched it. Messages that no
        rank will ever receive are dropped when all peers have returned."""
        try:
            self.wait_until(lambda: not self._busy and not self._acks_due and not self._local, "MPI_Finalize")
        except CollectiveMismatch:
            pass

    # -- progress -----------------------------------------------------------------------
    def progress(self) -> None:
        """Take every record that has arrived; send what has credit. Never waits."""
        transport, handle = self._transport, self._handle
        while transport.may_have_mail():
            hit = transport.probe(None, TRANSPORT_TAG, block=False)
            if hit is None:
                break
            handle(hit[0], transport.recv(hit[0], TRANSPORT_TAG))
        self._settle()

    def _move(self) -> bool:
        """While this rank waits in a collective (``move_in_collectives``):
        progress, and say whether a message is still in flight, one whose
        next step needs this rank (a queued record or piece, a send awaiting
        its CTS, a posted or matched receive, an ACK owed)."""
        if not self.in_flight():
            return False
        self.progress()
        return self.in_flight()

    def in_flight(self) -> bool:
        return bool(self._busy or self._acks_due or self._local or self._posted or self._awaiting_cts
                    or self._incoming)

    #: What ``in_flight`` reads, by name (for ``simdist.sim._repeated``, which reads it in C).
    FLIGHT = ("_busy", "_acks_due", "_local", "_posted", "_awaiting_cts", "_incoming")

    def _settle(self) -> None:
        """Handle the records to this rank itself and send what has credit
        (which may make more records to itself), taking nothing new."""
        local = self._local
        while True:
            while local:
                self._handle(self._me, local.popleft())
            if self._busy or self._acks_due:
                self._flush()
            if not local:
                return

    def _post(self, dest: int, rec: np.ndarray) -> None:
        if dest == self._me:
            self._local.append(rec)
        elif self._outq[dest] or not self._try(dest, rec):
            self._outq[dest].append(rec)
            self._busy.add(dest)

    def _ring_size(self, nbytes: int) -> int:
        """Ring bytes of a record of ``nbytes`` (a 1-D uint8 array)."""
        return self._transport.record_bytes(nbytes, 1)

    def _try(self, dest: int, rec: np.ndarray) -> bool:
        size = self._ring_size(rec.size)
        if self._sent[dest] - self._acked[dest] + size > self._budget:
            return False
        if not self._transport.try_send(rec, dest, TRANSPORT_TAG):
            return False
        self._sent[dest] += size
        return True

    def _flush(self) -> None:
        for src in list(self._acks_due):
            if self._transport.try_send(_record(ACK, self._taken[src]), src, TRANSPORT_TAG):
                self._ack_sent[src] = self._taken[src]
                self._acks_due.discard(src)
        for dest in list(self._busy):
            queue = self._outq[dest]
            while queue:
                item = queue[0]
                if isinstance(item, SendOp):
                    if not self._push(item):
                        break
                elif not self._try(dest, item):
                    break
                queue.popleft()
            if not queue:
                self._busy.discard(dest)

    def _push(self, op: SendOp) -> bool:
        """Send the pieces of a matched large message while credit lasts;
        True once all are sent."""
        data, n = op.data, op.data.size
        while op.offset < n:
            rec = op.pending
            if rec is None:
                k = min(self._piece, n - op.offset)
                rec = op.pending = _record(DATA, op.msg_id, op.offset, payload=data[op.offset:op.offset + k])
            if not self._try(op.dest, rec):
                return False
            op.offset += rec.size - HEADER
            op.pending = None
        op.data = None
        op.done = True
        return True

    # -- arrivals -------------------------------------------------------------------------
    def _handle(self, src: int, rec: np.ndarray) -> None:
        head = rec[:HEADER].view(np.int64)
        kind = int(head[0])
        if kind == ACK:
            self._acked[src] = max(self._acked[src], int(head[1]))
            return
        if src != self._me:
            self._take(src, rec.size)
        if kind == EAGER or kind == RTS:
            ctx, source, tag, nbytes, flags, msg_id, clock, noted = (int(v) for v in head[1:9])
            payload = rec[HEADER:HEADER + nbytes] if kind == EAGER else None
            note = rec[rec.size - noted:] if noted else None
            env = Envelope(ctx, source, tag, nbytes, flags, src, payload, msg_id, note)
            if self.races is not None:
                env.arrival = self.races.arrived(src, ctx, source, tag, clock)
            self._arrive(env)
        elif kind == CTS:
            op = self._awaiting_cts.pop(int(head[1]))
            if op.data.size == 0:  # an empty synchronous send: matched is all it waited for
                op.data = None
                op.done = True
            elif op.dest == self._me:  # to itself: the whole payload at once
                self._local.append(_record(DATA, op.msg_id, 0, payload=op.data))
                op.data = None
                op.done = True
            else:
                self._outq[op.dest].append(op)
                self._busy.add(op.dest)
        elif kind == DATA:
            key = (src, int(head[1]))
            op = self._incoming[key]
            offset = int(head[2])
            piece = rec[HEADER:]
            op.buf[offset:offset + piece.size] = piece
            op.received += piece.size
            if op.received >= op.buf.size:
                del self._incoming[key]
                op._finish(op.buf, in_place=op.sink is not None and op.buf.size <= op.sink.size)
        else:  # pragma: no cover - a record this engine never writes
            raise RuntimeError(f"mpi4py stand-in: unknown record kind {kind} from rank {src}")

    def _take(self, src: int, nbytes: int) -> None:
        self._taken[src] += self._ring_size(nbytes)
        if self._taken[src] - self._ack_sent[src] >= self._budget // 4:
            if self._transport.try_send(_record(ACK, self._taken[src]), src, TRANSPORT_TAG):
                self._ack_sent[src] = self._taken[src]
            else:
                self._acks_due.add(src)

    def _arrive(self, env: Envelope) -> None:
        for i, op in enumerate(self._posted):
            if op.matches(env):
                del self._posted[i]
                self._match(env, op)
                return
        self._unexpected.append(env)

    def _match(self, env: Envelope, op: RecvOp) -> None:
        if self.races is not None:
            self.races.consume(env.arrival, op.wildcard, op.tag)
        op.status = (env.source, env.tag, env.nbytes)
        op.peer = env.world
        op.pickled = bool(env.flags & 1)
        if op.check is not None:
            _misuse.matched(env, op)
        if env.payload is not None:
            op._finish(env.payload)
            return
        self._post(env.world, _record(CTS, env.msg_id))
        if env.nbytes == 0:  # an empty synchronous send: no DATA follows
            op._finish(np.empty(0, np.uint8))
            return
        fits = op.sink is not None and env.nbytes <= op.sink.size
        op.buf = op.sink[:env.nbytes] if fits else np.empty(env.nbytes, np.uint8)
        self._incoming[(env.world, env.msg_id)] = op
