"""The simulator's communicator: the contract's collectives over the arena.

``SimComm`` assembles the simulator's parts, one module each:

- ``_phases.PhaseProtocol``: how members meet -- signatures, epochs,
  banks, arriving, waiting, ``done``;
- ``_one_phase.OnePhaseCalls``: the fast path, small calls in one phase
  with a cached plan;
- ``_chunked.ChunkedCalls``: the algorithms of every other call, in
  phases of at most a slot (chunking, the folds, the copies);
- ``_transport.Transport``: point-to-point (``send``, ``recv``, and the
  probe and non-waiting send the simulated mpi4py needs), over ``_p2p``.

Here each public method checks its arguments and picks the path: a call
whose plan is cached goes straight to the one-phase exchange, a small one
builds its plan, any other runs in phases. ``split`` and ``free`` manage
the communicator contexts; ``close_run`` closes a run's communicators when
its function returns, so one kept past its run is refused.

The three collective parts are mixins rather than separate objects: they
share one rank's state (its words, banks and caches), and the hot path of
a small call reads that state as attributes of ``self`` at every step; as
mixins each step is one method lookup, where composition would add an
attribute hop per step. The transport is an object of its own: the mpi4py
stand-in holds it, and it needs none of the collectives' state.
"""

from __future__ import annotations

import numpy as np

from .._arguments import OP_CODE, as_input, check_blocks, check_int, check_op, check_rank_arg, check_stackable
from .._communicator import Communicator
from .._errors import InvalidValue, SimdistError
from .._reduction import fold_ufunc
from .. import _signature as sig
from ._chunked import SMALL_REDUCTION, ChunkedCalls
from ._layout import CONTEXTS, SPLIT_HEAD_WORDS, USER
from ._one_phase import SIZED_HEAD, OnePhaseCalls
from ._p2p import Mailboxes
from ._phases import PhaseProtocol, kept_views
from ._transport import EARLIER_RUN, FREED, Transport, closed_error

_K = sig.KIND_CODE
_ALLREDUCE, _REDUCE, _BROADCAST = _K["allreduce"], _K["reduce"], _K["broadcast"]
_ALLGATHER, _GATHER, _ALLTOALL = _K["allgather"], _K["gather"], _K["alltoall"]
_REDUCE_SCATTER, _BARRIER, _SPLIT = _K["reduce_scatter"], _K["barrier"], _K["split"]
_BARRIER_CALL = (_BARRIER, 0, -1, 0, -1)  # its static signature (see _phases)

# The words each member contributes to split, in its slot: its color, its
# key, how many contexts it has used (``Arena.contexts_used``), the bitmap of
# the contexts it has free (``Layout.contexts`` bits, 64 to a word), then its
# arrive epoch in each context it has used: in the others it is 0.
_COLOR, _KEY, _USED, _FREE_CONTEXTS = 0, 1, 2, SPLIT_HEAD_WORDS
#: A message key holds the context index in its low bits, the epoch above:
#: below bit 58 for epochs below 2**47 (the simulated mpi4py flips bits 58-61).
_INDEX_BITS = (CONTEXTS - 1).bit_length()


def message_context(ctx: int, epoch: int) -> int:
    """The key of a communicator's point-to-point messages: its context
    index ``ctx`` and the ``epoch`` it starts at (see ``SimComm.split``)."""
    return epoch << _INDEX_BITS | ctx


def _lowest_common(bitmaps: list[np.ndarray]) -> int:
    """The lowest bit set in every one of ``bitmaps`` (int64 words, the
    lowest bits first), or -1 if none is."""
    common = -1
    for bitmap in bitmaps:  # as Python ints: a few calls, where numpy's reduction costs several microseconds
        common &= int.from_bytes(bitmap.tobytes(), "little")
    return (common & -common).bit_length() - 1


def close_run(arena) -> None:
    """The run's function returned: close every communicator it made on this
    rank and did not free, so that one kept for a later run is refused."""
    for comm in arena.live_comms.values():
        comm._close(EARLIER_RUN)
    arena.live_comms.clear()


class SimComm(PhaseProtocol, OnePhaseCalls, ChunkedCalls, Communicator):
    """A communicator of the simulator; see :class:`simdist.Communicator`.

    ``members`` are the world ranks of the communicator in its rank order;
    ``ctx`` is the context index its members' control entries use; ``epoch``
    the last epoch any member's entry of that context holds (see ``split``).
    It stays in ``arena.live_comms`` until freed or closed by ``close_run``.
    """

    def __init__(self, arena, mailboxes: Mailboxes, members: list[int], ctx: int, epoch: int = 0, order: str = "fold"):
        lay = arena.layout
        kept = kept_views(arena, tuple(members), ctx)
        self._init_phases(arena, members, ctx, epoch, kept)
        self._init_one_phase(lay, members, ctx, kept)
        self._init_slots(lay, members, kept)
        self._mail = mailboxes
        self._order = order
        self._transport = Transport(mailboxes, members, message_context(ctx, epoch), self._rank, arena.size,
                                    lay.ring_bytes)
        arena.live_comms[ctx] = self

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def transport(self) -> Transport:
        """This communicator's point-to-point endpoint, for the simulated
        mpi4py: probe, a send that never waits, the context and members."""
        return self._transport

    # -- reductions -----------------------------------------------------------
    def allreduce(self, x, op="sum"):
        if type(x) is np.ndarray and type(op) is str:
            plan = self._plans.get((_ALLREDUCE, x.dtype, x.shape, op))
            if plan is not None:
                return self._exchange(x, plan, self._fold_all)
        x = as_input(x, self._rank, "allreduce")
        check_op(op, x.dtype, self._rank, "allreduce")
        ufunc = fold_ufunc(op, x.dtype)
        if (ufunc is not None and x.nbytes <= min(SMALL_REDUCTION, self._half_bytes) and not self._closed
                and self._order == "fold"):
            divisor = self._size if op == "mean" else None
            plan = self._plan((_ALLREDUCE, x.dtype, x.shape, op), OP_CODE[op], -1, ufunc, divisor)
            return self._exchange(x, plan, self._fold_all)
        return self._reduction(_ALLREDUCE, "allreduce", x, op, -1)

    def reduce(self, x, root=0, op="sum"):
        x = as_input(x, self._rank, "reduce")
        root = check_rank_arg(root, self._size, self._rank, "reduce", "root")
        check_op(op, x.dtype, self._rank, "reduce")
        return self._reduction(_REDUCE, "reduce", x, op, root)

    def reduce_scatter(self, x, op="sum"):
        if type(x) is np.ndarray and type(op) is str:
            plan = self._plans.get((_REDUCE_SCATTER, x.dtype, x.shape, op))
            if plan is not None:
                return self._exchange(x, plan, self._fold_mine)
        x = as_input(x, self._rank, "reduce_scatter")
        check_blocks(x, self._size, self._rank, "reduce_scatter")
        check_op(op, x.dtype, self._rank, "reduce_scatter")
        ufunc = fold_ufunc(op, x.dtype)
        if ufunc is not None and x.nbytes <= self._half_bytes and not self._closed and self._order == "fold":
            divisor = self._size if op == "mean" else None
            plan = self._plan((_REDUCE_SCATTER, x.dtype, x.shape, op), OP_CODE[op], -1, ufunc, divisor)
            return self._exchange(x, plan, self._fold_mine)
        return self._reduce_scatter_phases(x, op)

    # -- data movement ----------------------------------------------------------
    def broadcast(self, x, root=0):
        if type(x) is np.ndarray and type(root) is int:
            plan = self._plans.get((_BROADCAST, x.dtype, x.shape, root))
            if plan is not None:
                return self._small_broadcast(x, plan)
        root = check_rank_arg(root, self._size, self._rank, "broadcast", "root")
        if x is not None or self._rank == root:
            x = as_input(x, self._rank, "broadcast")
        if x is not None and x.nbytes <= self._half_bytes and not self._closed:
            return self._small_broadcast(x, self._plan((_BROADCAST, x.dtype, x.shape, root), 0, root))
        return self._broadcast_phases(x, root)

    def broadcast_from(self, x, root=0):
        """``broadcast``, but a root whose array is larger than half a slot
        gets None back instead of a copy of it: each rank's large array sent
        in turn (a fold of one element per rank too large to gather) costs
        the root no memory."""
        root = check_rank_arg(root, self._size, self._rank, "broadcast", "root")
        if self._rank == root and x is not None and not self._closed:
            x = as_input(x, self._rank, "broadcast")
            if x.nbytes > self._half_bytes:
                return self._broadcast_phases(x, root, root_copy=False)
        return self.broadcast(x, root)

    def allgather(self, x):
        if type(x) is np.ndarray:
            plan = self._plans.get((_ALLGATHER, x.dtype, x.shape, -1))
            if plan is not None:
                return self._exchange(x, plan, self._stack_all)
        x = as_input(x, self._rank, "allgather")
        check_stackable(x, self._rank, "allgather")
        if x.nbytes <= self._half_bytes and not self._closed:
            return self._exchange(x, self._plan((_ALLGATHER, x.dtype, x.shape, -1), 0, -1), self._stack_all)
        return self._gather("allgather", _ALLGATHER, x, -1)

    def gather(self, x, root=0):
        x = as_input(x, self._rank, "gather")
        check_stackable(x, self._rank, "gather")
        root = check_rank_arg(root, self._size, self._rank, "gather", "root")
        return self._gather("gather", _GATHER, x, root)

    def scatter(self, x, root=0):
        root = check_rank_arg(root, self._size, self._rank, "scatter", "root")
        is_root = self._rank == root
        if x is not None or is_root:
            x = as_input(x, self._rank, "scatter")
            if is_root:
                check_blocks(x, self._size, self._rank, "scatter")
        return self._scatter_phases(x, root)

    def alltoall(self, x):
        if type(x) is np.ndarray:
            plan = self._plans.get((_ALLTOALL, x.dtype, x.shape, -1))
            if plan is not None:
                return self._exchange(x, plan, self._take_mine)
        x = as_input(x, self._rank, "alltoall")
        check_blocks(x, self._size, self._rank, "alltoall")
        if x.nbytes <= self._half_bytes and not self._closed:
            return self._exchange(x, self._plan((_ALLTOALL, x.dtype, x.shape, -1), 0, -1), self._take_mine)
        return self._alltoall_phases(x)

    def alltoall_sized(self, sizes, pack, unpack, expected, rows=None, own=None) -> tuple[list[int], bool]:
        """An alltoall of blocks of any lengths that never holds the message,
        for the simulated mpi4py's Alltoallv and Alltoallw: this rank's
        block for member ``j`` is ``sizes[j]`` bytes, ``pack(j, lo, out)``
        writes its bytes ``lo:lo + out.size`` straight into this rank's slot,
        and ``unpack(j, lo, data)`` reads those of member ``j``'s block for
        this rank straight from ``j``'s slot. Returns the lengths the members
        sent this rank, and whether ``rows`` moved every block; unpacks
        nothing unless the lengths equal ``expected``.

        ``rows``, where the caller's blocks are the rows of one array each
        way, is ``(send_rows, recv_rows)``: row ``j`` of ``send_rows`` is this
        rank's block for member ``j`` (``sizes[j]`` bytes), row ``j`` of
        ``recv_rows`` takes member ``j``'s block for this rank; one copy each
        way moves every block (this rank's own too). Used where every block
        fits in its row and the members' rows step evenly; else ``pack`` and
        ``unpack`` move each block, and ``own()``, where given, this rank's
        own block, once the lengths are known to be ``expected``.

        One meeting when every block fits in its row (a member's share of
        half a slot, headed by the block's length): no exchange of lengths
        first. Otherwise that meeting tells every member the longest block,
        and an alltoall of that width in phases moves the blocks (after an
        allgather of the lengths instead, where so many members share half
        a slot that a row cannot hold its head)."""
        if self._closed:
            raise closed_error(self._rank, "alltoall", self._closed)
        if self._half_bytes // self._size < 2 * SIZED_HEAD:  # rows too short for their heads: lengths first
            lengths = self.allgather(np.asarray(sizes, np.int64))
            got, longest, room, whole = lengths[:, self._rank].tolist(), int(lengths.max()), -1, False
        else:
            got, longest, room, whole = self._exchange_sized(sizes, pack, unpack, expected, rows, own)
        if longest > room:
            self.sized_phases(sizes, pack, unpack, expected, got, longest)
        return got, whole

    def sized_phases(self, sizes, pack, unpack, expected, got: list[int], longest: int) -> None:
        """The rest of ``alltoall_sized`` once its meeting found a block
        longer than a row (``longest``, of any member): the blocks in phases
        of that width, each as long as its sender's length says; unpacks
        nothing unless ``got``, what the members send this rank, is
        ``expected``."""
        accept = got == expected

        def part(j, lo, out):
            if lo < sizes[j]:
                pack(j, lo, out[:sizes[j] - lo])

        def take(j, lo, data):
            if accept and lo < got[j]:
                unpack(j, lo, data[:got[j] - lo])

        self._alltoall_block_phases(longest, part, take)

    def barrier(self):
        if self._closed:
            raise closed_error(self._rank, "barrier", self._closed)
        try:
            self._meet(_BARRIER_CALL)
        finally:  # _end, written out
            q = self._arena.q
            q[self._my_done] = self._epoch
            q[self._progress] += 1
            q[self._state] = USER

    # -- point to point ---------------------------------------------------------
    def send(self, x, dest, tag=0):
        self._transport.send(x, dest, tag)

    def recv(self, source, tag=0):
        return self._transport.recv(source, tag)

    # -- communicators ------------------------------------------------------------
    def split(self, color, key=0):
        if color is not None:
            color = check_int(color, self._rank, "split", "color", minimum=0)
        key = check_int(key, self._rank, "split", "key")
        arena = self._arena
        contexts = arena.layout.contexts
        epochs_at = _FREE_CONTEXTS + contexts // 64
        nbytes = self._begin("split", _SPLIT, None)
        try:
            views = self._flat_views(np.dtype(np.int64), epochs_at + contexts)
            row = views[self._rank]
            row[_COLOR] = -1 if color is None else color
            row[_KEY] = key
            row[_USED] = used = arena.contexts_used
            free = arena.free_contexts.to_bytes(contexts // 8, "little")
            row[_FREE_CONTEXTS:epochs_at] = np.frombuffer(free, np.int64)
            arena.arrive_epochs_into(row[epochs_at : epochs_at + used])
            self._arrive()
            self._check(nbytes)
            heads = [v[:_FREE_CONTEXTS].tolist() for v in views]  # color, key, used
            ctx = _lowest_common([v[_FREE_CONTEXTS:epochs_at] for v in views])
            # Each member's epoch in that context, read before _done lets it
            # write its slot again.
            arrive = [int(v[epochs_at + ctx]) if 0 <= ctx < h[_USED] else 0 for v, h in zip(views, heads)]
            self._done()
            if color is not None and ctx >= 0:
                self._wait_for_readers(ctx)
        finally:
            self._end()
        if color is None:
            return None
        if ctx < 0:
            raise SimdistError(
                f"rank {self._rank}: split: every communicator context is in use "
                f"({contexts - 1} sub-communicators alive); call free() on the ones you no longer need"
            )
        group = sorted((h[_KEY], j) for j, h in enumerate(heads) if h[_COLOR] == color)
        ranks = [j for _, j in group]
        # Above every stale epoch of the new members' entries of that context.
        # So the new communicator's message key (index and first epoch) is
        # not that of any earlier one on the index whose message a member
        # could receive: that member freed the earlier one, arriving above
        # its first epoch, before this split.
        epoch = max(arrive[j] for j in ranks)
        arena.reserve_context(ctx)
        arena.free_contexts &= ~(1 << ctx)
        arena.contexts_used = max(arena.contexts_used, ctx + 1)
        return SimComm(arena, self._mail, [self._members[j] for j in ranks], ctx, epoch, self._order)

    def free(self):
        if self._ctx == 0:
            raise InvalidValue(f"rank {self._rank}: free: the world communicator cannot be freed")
        if self._closed is FREED:
            return
        if self._closed:
            raise closed_error(self._rank, "free", self._closed)
        # Local, as in Open MPI and MPICH: a rank waits for no member, so a
        # program may free from a destructor, at another point on each rank.
        # A member may still be reading this rank's entry of the context in
        # the last call: a new communicator on it waits for that (split).
        arena = self._arena
        if self._seq:
            arena.retired[self._ctx] = (self._peer_done, self._epoch, self._peers)  # as pending_release's
        # One epoch on, so a later communicator on the context has message keys of its own.
        self._epoch += 1
        self._publish(self._my_arrive, self._epoch)
        self._close(FREED)
        del arena.live_comms[self._ctx]
        arena.free_contexts |= 1 << self._ctx

    def _wait_for_readers(self, ctx: int) -> None:
        """Before a new communicator takes context ``ctx``: wait until each
        member of the one this rank freed there has finished its last call
        (it stores its done epoch at the end of every call), as its reads of
        this rank's entry must precede the new calls' writes. Each has
        arrived in that call, so it finishes without this rank."""
        readers = self._arena.retired.pop(ctx, None)
        if readers is not None:
            self._arena.wait_words(*readers)

    def _close(self, why: str) -> None:
        """Refuse every later call, saying ``why``."""
        self._closed = why
        self._arena.names.pop(self._ctx, None)
        self._transport.close(why)
        self._plans = {}  # the fast path must see the check (the kept plans stay for the next communicator)

    def __repr__(self):
        return f"<SimComm rank {self._rank} of {self._size} on {self.name}>"
