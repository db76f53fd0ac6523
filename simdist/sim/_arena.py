"""The simulator's transport: one shared-memory arena per world.

Segment
-------
The arena is an anonymous ``memfd`` mapped by the driver and every worker.
It has no name in /dev/shm, so nothing can leak when a process is killed:
the memory goes away with the last mapping. It is also not bounded by the
size of /dev/shm (often 64 MiB in containers). Pages of the control and
collective regions are allocated up front (``posix_fallocate``) so a machine
short of memory fails at world start with a clear error, never with SIGBUS
in the middle of a collective. Of the communicator contexts only the first
64 are: a rank allocates its entry of a later context when its ``split``
takes it (``reserve_context``), and the driver punches the whole sparse
region out again between runs (``reset_control``), so a world commits
memory for the contexts it uses, not for the 2048 it may use.

Layout (all offsets in bytes, every region 64-byte aligned; ``_layout`` computes
them and names the words)::

    header    4096            magic, size, abort word
    sleeping  size x 8        per world rank: its sleeping flag, side by side
                              so that a publisher compares them all at once
    status    size x 640      per world rank: state, progress, current call,
                              futex word (bell), p2p call info, the wait it
                              sleeps in, its call site, the MPI call an
                              engine over the transport states it is in
    contexts  size x 64 x E   per world rank and communicator context 0-63:
                              arrive epoch, done epoch (one line), then two
                              banks: the call's first epoch and signature
                              (576) and the payload of a small one-phase
                              call (3520 up to 16 ranks, 448 beyond);
                              E = 64 + 2 x bank
    p2p index size x size x 64  per ordered pair: head (sender), tail (receiver)
    contexts  size x (C - 64) x E  per world rank: its entries of contexts
                              64 to C - 1 (C = 2048), sparse until used
    p2p rings size x size x R   per ordered pair: a byte ring of messages
    slots     size x SLOT     per world rank: its collective buffer
    names     past the end    the mpi4py stand-in's name service (Publish_name):
                              grows on use, cut off before each run

The p2p words of a status entry describe the point-to-point call a rank is
in (``_p2p``): its kind (send, recv, probe), peer (world rank), tag, bytes
and sequence number. A probe from any rank stores the rank itself as the
peer (so a reader that follows the peer reads a word only this rank
writes) and the ``P2P_ANY_SOURCE`` flag in the bytes word; a probe for any
tag stores tag -1.

Who writes what
---------------
Every word has exactly one writer at a time, so no atomic read-modify-write
is ever needed: a rank writes only its own status, its own context entries,
its own slot (and, in a parallel fold, the slice it folds in another
member's slot: see below), the heads of the rings it sends on and the tails
of the rings it receives on. The driver writes the header (abort), zeroes
the control regions between runs (when no worker runs) and reads everything
for reports.

Why the ordering is safe
------------------------
A collective is a sequence of phases. In a phase each member writes its data
(slot) and call signature, then *publishes* by storing a larger ``arrive``
epoch; a reader waits until every member's ``arrive`` reaches the phase's
epoch, then reads. On x86-64 (total store order) stores become visible in
program order and loads are not reordered with older loads, so a reader that
sees the epoch sees the data written before it. After reading a
member's *slot* it stores ``done``; a writer waits (lazily, just before it
next writes its slot) until every reader of its last slot phase is done.

A bank's signature is preceded by the epoch of the call's first phase,
stored after the signature (and, in a one-phase call, after its payload) and
before the arrival: a one-phase call reads a member's epoch word, then its
signature, so one look per member tells both that it arrived and that its
call matches (``PhaseProtocol._meet`` in ``_phases``).

Signatures and the payloads of small one-phase calls need no ``done``: they
alternate between the entry's two banks by the parity of the phase's epoch.
Every phase waits for every member's arrival, and a member arrives at epoch
e + 1 only after its reads of phase e; so when a rank writes bank b for
phase e + 2, every reader of bank b from phase e is past those reads. A
communicator's members are the same in every phase, which is why the banks
live in the per-context entries and not in the slots, which every context
of a rank shares. ``free`` waits until every member is done with the
context, so a later communicator on it starts with no readers behind.

A parallel fold (``ChunkedCalls._fold_in_parallel`` in ``_chunked``) has two
phases. Each member publishes the slices the others fold; then each folds
its slice in place, into the slot of the communicator's member 0 (member 1
for member 0's own slice), and arrives again; then every member copies the
folded slices and stores ``done``. The slot's owner wrote that slice before its
first arrival, reads it only after the second, and waits for every
member's ``done`` before it writes its slot again, so the in-place writes
fall between its own; the slices are disjoint, so each word has one
writer at a time.

One-phase calls too large for a bank use the half of each slot that their
epoch's parity names, and still store ``done``; but a rank keeps the
pending readers of each half apart (``pending_release``). Before writing a
half (at phase e + 2) it waits for that half's readers of phase e: on the
same communicator they have since arrived at e + 1, after those reads, so
they are done already; only a half last read on another communicator can
make it wait. A multi-phase call uses the whole slot and waits for both
halves' readers.

Epochs only grow within a run; a sub-communicator starts at an epoch above
every stale value of its members' entries (see ``SimComm.split``), so no
stale word satisfies a wait, and its messages' key (that epoch and the
context) is not that of a freed communicator's.

Waiting spins briefly (looks once when ranks share CPUs), then yields, then
sleeps on the waiter's own futex word after raising its ``sleeping`` flag.
A publisher wakes every member whose flag is up by storing a fresh token in
that member's word and calling FUTEX_WAKE. Both sides run a full fence
between their store and their load (Dekker), so either the publisher sees
the flag or the sleeper sees the publication; sleeps also time out so that
aborts and dead peers are noticed.

A rank may also wait for *any* of several words, each with its own writer
and target (``wait_any``: a probe from any source waits on the heads of all
the rings into it). The argument is the same, once per word: the sleeper
raises its one ``sleeping`` flag, fences, then loads every word; each
publisher stores its word, fences, then loads the flag. For every word,
either its publisher sees the flag (and rings the bell, which makes the
sleeper re-check all the words) or the sleeper's load sees the word. The
flag and the bell belong to the rank, not to a word, so any publication to
the rank wakes it; a wake for another word is only a spurious wake-up.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
import threading
import time

import numpy as np

from .._errors import Aborted, CollectiveMismatch, SimdistError
from .._inherited import close_fd, copies_of, disown, unmap_shared
from ._layout import (
    ABORT_DRIVER, ANY_RING, E_ARRIVE, FAILED, H_ABORT, H_MAGIC, H_SIZE, MAGIC, R_HEAD, R_MATCHED, R_TAIL, RETURNED,
    S_BELL, S_BLOCK_TARGET, S_BLOCK_WORD, S_BLOCKED, S_CTX, S_P2P_KIND, S_P2P_NBYTES, S_P2P_PEER, S_P2P_SEQ, S_P2P_TAG,
    S_PROGRESS, S_STATE, S_WAITING_FOR, SPARE, STATUS, Layout,
)
from ._report import record_site

__all__ = ["Arena"]

_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}.get(platform.machine().lower())
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_fence_lock = threading.Lock()
_acquire, _release = _fence_lock.acquire, _fence_lock.release


def fence() -> None:
    """A full memory barrier: an uncontended lock is a locked instruction."""
    _acquire()
    _release()


def _sleep(addr, expected: int, ts) -> None:
    """Sleep on a futex word while it holds ``expected`` (its low 32 bits), for at most ``ts``."""
    if _SYS_FUTEX is not None:
        if expected >= 1 << 31:
            expected -= 1 << 32
        _syscall(_SYS_FUTEX, addr, _FUTEX_WAIT, ctypes.c_int(expected), ctypes.byref(ts), None, 0)
    else:  # pragma: no cover - no futex on this platform
        os.sched_yield()


#: A waiting rank yields for at most this long, then sleeps: one that keeps
#: yielding stays in the run queue and takes turns from the peer it waits
#: for where other programs keep the CPUs busy (docs/performance.md).
YIELD_NS = 50_000


class Arena:
    """A mapping of the world's shared memory, in the driver or in a worker.

    ``rank`` is the world rank of the process that maps it (``None`` in the
    driver). The attributes ``q`` (int64 words) and ``buf`` (bytes) view the
    whole arena.
    """

    def __init__(self, layout: Layout, fd: int, rank: int | None, ncpu: int | None = None):
        self.layout = layout
        self.fd = fd
        self.rank = rank
        self.mm = mmap.mmap(fd, layout.total)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.mm))
        self.copies: list[int] = []  # the mmap's own descriptors of the file (see release_inherited)
        self.buf = memoryview(self.mm)
        self.q = self.buf.cast("q")
        self.size = layout.size
        ncpu = ncpu or len(os.sched_getaffinity(0))
        # Spinning helps only when every rank has a core of its own. When
        # ranks share CPUs, a rank that looks once and yields lets the late
        # rank run sooner: with one look instead of 50, a barrier on 2 CPUs
        # took 12 us instead of 17 at N=4, 34 instead of 48 at N=8 and 103
        # instead of 125 at N=16 (docs/performance.md, "Earlier findings").
        # (The ranks a world starts with: its spare slots run nothing until a Spawn.)
        self.oversubscribed = layout.ranks > ncpu
        self.spin_iters = 1 if self.oversubscribed else 1000
        # Yielding lets the ranks that share a core take turns quickly; with
        # many ranks per core it only churns the run queue, so sleep soon.
        self.yield_iters = (2000 if layout.ranks <= 4 * ncpu else 20) if self.oversubscribed else 100
        self._token = 0
        self._bell_addr = [
            ctypes.addressof(ctypes.c_int32.from_buffer(self.mm, layout.status_word(r, S_BELL) * 8))
            for r in range(layout.size)
        ]
        # For each half of this rank's slot, the last phase that wrote it and
        # whose readers must finish before the rank writes there again:
        # (done word indexes, epoch, their writers), or None.
        self.pending_release: list[tuple[list[int], int, list[int]] | None] = [None, None]
        # Contexts this rank can give a new sub-communicator (bit c: context c
        # is free; 0 is the world's); the readers of one it freed, by context (``SimComm.free``).
        self.initial_free_contexts = ((1 << layout.contexts) - 1) & ~1
        self.free_contexts, self.retired = self.initial_free_contexts, {}
        # 1 + the highest context this rank has used in the run: its entries
        # of the contexts above are zero (``SimComm.split``).
        self.contexts_used = 1
        # This rank's communicators of the current run not yet freed, by
        # context: closed when the run's function returns (``_comm.close_run``).
        self.live_comms: dict = {}
        # An engine over the transport (the mpi4py stand-in) that moves its
        # point-to-point messages while this rank waits in a collective, as
        # MPI's progress rule has it: ``mover()`` never waits and returns True
        # while it has messages in flight (``Transport.move_in_collectives``).
        self.mover = None
        self.verdict = None  # hosted world (``_hosted``): the host's error, raised for ``Aborted``
        self.names: dict[int, str] = {}  # contexts this rank's program named (``SimComm.name``), for reports
        self.kept_views: dict = {}  # caches of views by members and context (``_phases.kept_views``)
        self._arrive_epochs = None if rank is None else self.array(  # in the contexts always there
            layout.entry_offset(rank, 0), np.int64, (layout.reserved_contexts, layout.entry // 8))[:, E_ARRIVE]
        self._status_words = [] if rank is None else [
            layout.status_word(rank, w) for w in (S_STATE, S_PROGRESS, S_CTX, S_WAITING_FOR, S_P2P_KIND, S_P2P_PEER,
                                                  S_P2P_TAG, S_P2P_NBYTES, S_P2P_SEQ, S_BLOCK_WORD, S_BLOCK_TARGET)]

    # -- creation -------------------------------------------------------
    @classmethod
    def create(cls, layout: Layout) -> "Arena":
        fd = os.memfd_create(f"simdist-{os.getpid()}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, layout.total)
            # Reserve the pages that collectives touch; rings, later contexts and
            # the spare slots (reserved at their Spawn: _spares.reserve) stay sparse.
            slots = layout.ranks * layout.slot_bytes
            try:
                os.posix_fallocate(fd, 0, layout.ctx_sparse)
                os.posix_fallocate(fd, layout.slots, slots)
            except OSError as exc:
                raise SimdistError(
                    f"cannot reserve {(layout.ctx_sparse + slots) >> 20} MiB of shared memory for a world of "
                    f"{layout.ranks} ranks: {exc.strerror}; use fewer ranks or a smaller slot_bytes"
                ) from None
            arena = cls(layout, fd, rank=None)
            arena.copies = copies_of(fd)
        except BaseException:
            os.close(fd)
            raise
        arena.q[H_MAGIC] = MAGIC
        arena.q[H_SIZE] = layout.size
        return arena

    def close(self) -> None:
        if self.mm is None:
            return
        self.q.release()
        self.buf.release()
        try:
            self.mm.close()
        except BufferError:
            # Views of the arena are still referenced (a communicator the
            # rank's code kept past its run): the mapping goes with the process.
            pass
        self.mm = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def release_inherited(self, keep) -> None:
        """In a child forked from the driver: let go of this arena's memory
        and descriptors, unless ``keep`` holds its descriptor (a worker of
        this very world is being started). See ``_inherited``."""
        if self.fd is None or self.fd in keep:
            return
        unmap_shared(self.address, self.layout.total)
        disown(self.copies)
        self.fd = close_fd(self.fd)

    def start_run(self) -> None:
        """In a worker, before a run: no slot readers pending, every context free."""
        self.pending_release = [None, None]
        self.free_contexts, self.retired = self.initial_free_contexts, {}
        self.contexts_used = 1

    def reset_control(self) -> None:
        """Zero sleeping flags, status, contexts and ring pointers; only while no worker runs.

        They are punched out rather than written: zeroing them would commit
        their pages, the contexts of spare slots and the sparse ones too."""
        lay = self.layout
        self.q[H_ABORT] = 0
        self.mm.madvise(mmap.MADV_REMOVE, lay.sleeping, lay.rings - lay.sleeping)  # all page-aligned (Layout)
        os.ftruncate(self.fd, lay.total)  # the mpi4py stand-in's names of the last run, kept past the end

    def reset_rank(self, rank: int, state: int) -> None:
        """In the driver, before a new process takes the slot of ``rank``
        during a run (a spawned one): zero its status and its context
        entries, drop what its rings hold for it, and set its state.

        The other ranks keep running; none of them waits on this slot, whose
        last process has ended (or none has run)."""
        lay, q = self.layout, self.q
        q[lay.sleeping_word(rank)] = 0
        self.buf[lay.status + rank * STATUS : lay.status + (rank + 1) * STATUS] = bytes(STATUS)
        reserved = lay.ctx + rank * lay.reserved_contexts * lay.entry
        self.buf[reserved : reserved + lay.reserved_contexts * lay.entry] = bytes(lay.reserved_contexts * lay.entry)
        if lay.contexts > lay.reserved_contexts:  # punched out where whole pages, as reset_control does
            sparse = lay.entry_offset(rank, lay.reserved_contexts)
            length = (lay.contexts - lay.reserved_contexts) * lay.entry
            if sparse % 4096 == 0 and length % 4096 == 0:
                self.mm.madvise(mmap.MADV_REMOVE, sparse, length)
            else:
                self.buf[sparse : sparse + length] = bytes(length)
        for src in range(self.size):  # records sent to the slot's last process are never read
            line = lay.pair_word(src, rank)
            q[line + R_TAIL] = q[line + R_HEAD]
            q[line + R_MATCHED] = 0
        q[lay.status_word(rank, S_STATE)] = state

    def reserve_context(self, ctx: int) -> None:
        """Allocate this rank's entry of context ``ctx`` if it lies in the
        sparse region, so that a machine short of memory fails here with a
        clear error, not with SIGBUS in a later call."""
        lay = self.layout
        if ctx < lay.reserved_contexts:
            return
        try:
            os.posix_fallocate(self.fd, lay.entry_offset(self.rank, ctx), lay.entry)
        except OSError as exc:
            raise SimdistError(
                f"rank {self.rank}: split: cannot reserve {lay.entry} bytes of shared memory for "
                f"communicator context {ctx}: {exc.strerror}; free the communicators you no longer need"
            ) from None

    # -- views ------------------------------------------------------------
    def array(self, offset: int, dtype, shape) -> np.ndarray:
        return np.ndarray(shape, dtype=dtype, buffer=self.mm, offset=offset)

    def arrive_epochs_into(self, out: np.ndarray) -> None:
        """This rank's arrive epochs in contexts 0 to ``out.size`` - 1, into ``out``."""
        lay, count = self.layout, out.size
        reserved = min(count, lay.reserved_contexts)
        out[:reserved] = self._arrive_epochs[:reserved]
        if count > reserved:
            sparse = self.array(lay.entry_offset(self.rank, reserved), np.int64, (count - reserved, lay.entry // 8))
            out[reserved:] = sparse[:, E_ARRIVE]

    # -- publishing and waking ------------------------------------------------
    def publish(self, word: int, value: int, members) -> None:
        """Store ``value`` at ``word`` and wake members sleeping on it."""
        q = self.q
        q[word] = value
        _acquire()
        _release()
        sleeping = self.layout.sleeping // 8
        for m in members:
            if q[sleeping + m]:
                self.wake(m)

    def wake(self, rank: int) -> None:
        self._token = (self._token + 1) & 0xFFFFF
        # A token unique to this writer and moment: the sleeper compares its
        # word with the value it read, so any store of a new token wakes it.
        token = ((self._token << 11) | ((self.rank if self.rank is not None else 2047) & 0x7FF)) & 0x7FFFFFFF
        self.q[self.layout.status_word(rank, S_BELL)] = token
        if _SYS_FUTEX is not None:
            _syscall(_SYS_FUTEX, ctypes.c_void_p(self._bell_addr[rank]), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)

    def wake_all(self) -> None:
        for r in range(self.size):
            self.wake(r)

    def wake_sleepers(self) -> None:
        """Wake every rank whose sleeping flag is up (after a fence)."""
        fence()
        q, lay = self.q, self.layout
        for r in range(self.size):
            if q[lay.sleeping_word(r)]:
                self.wake(r)

    # -- waiting ------------------------------------------------------------
    def wait_words(self, words, target: int, ranks, collective: bool = False) -> None:
        """Wait until ``q[w] >= target`` for every ``w`` in ``words``.

        ``ranks[i]`` is the world rank that writes ``words[i]`` (for reports
        and for noticing a peer that returned or failed). ``collective``: the
        wait is a collective's, during which the ``mover`` moves messages.
        """
        q = self.q
        for w in words:
            if q[w] < target:
                break
        else:
            return
        for i, w in enumerate(words):
            if q[w] < target:
                self.wait_word(w, target, ranks[i], collective)

    def _check_peer(self, word: int, target: int, writer: int) -> None:
        """Raise instead of waiting forever: the run is aborting, or ``writer``
        has failed or returned without making the call we wait for."""
        self.check_abort()
        q = self.q
        state = q[self.layout.status_word(writer, S_STATE)]
        if state in (RETURNED, FAILED) and q[word] < target:
            if state == FAILED:
                raise self._aborted(f"rank {writer} failed")
            from ._report import current_call

            mine = current_call(self, self.rank)
            raise CollectiveMismatch(
                f"rank {self.rank} waits in {mine}, but rank {writer} has returned from the function "
                "without making that call; every rank must make the same calls",
                {self.rank: mine, writer: "returned"},
            )

    def wait_any(self, words, targets, writers, on: int | None = None) -> int:
        """Wait until ``q[words[i]] >= targets[i]`` for some ``i``; return it.

        ``writers[i]`` is the world rank that writes ``words[i]``. While
        asleep the wait raises ``Aborted`` when the run is aborting or any
        writer (other than this rank) has failed, and ``CollectiveMismatch``
        when every writer other than this rank has returned. ``on`` is the
        rank the wait is reported as waiting on (None: no single rank).
        """
        q = self.q
        pairs = list(zip(words, targets))
        for _ in range(self.spin_iters):
            for i, (w, t) in enumerate(pairs):
                if q[w] >= t:
                    return i
        until = time.monotonic_ns() + YIELD_NS
        for _ in range(self.yield_iters):
            os.sched_yield()
            for i, (w, t) in enumerate(pairs):
                if q[w] >= t:
                    return i
            if time.monotonic_ns() > until:
                break
        def ready():
            return next((i for i, (w, t) in enumerate(pairs) if q[w] >= t), None)

        return self._sleep_until(ready, lambda: self._check_writers(pairs, writers), on, ANY_RING)

    def check_abort(self) -> None:
        """Raise ``Aborted`` if the run is being aborted."""
        q = self.q
        if q[H_ABORT]:
            raise self._aborted("the run was aborted by the driver" if q[H_ABORT] == ABORT_DRIVER else "a rank failed")

    def _aborted(self, reason: str) -> BaseException:
        """``Aborted`` (the driver reports); in a hosted world the host's verdict."""
        return Aborted(reason) if self.verdict is None else self.verdict(reason)

    def _check_writers(self, pairs, writers) -> None:
        """``_check_peer`` for a wait on any of several words."""
        self.check_abort()
        q = self.q
        lay = self.layout
        states = {w: state for w in sorted(set(writers) - {self.rank})  # a spare slot sends nothing
                  if (state := q[lay.status_word(w, S_STATE)]) != SPARE}
        for w, state in states.items():
            if state == FAILED:
                raise self._aborted(f"rank {w} failed")
        if not states or any(state != RETURNED for state in states.values()):
            return
        others = list(states)
        if any(q[w] >= t for w, t in pairs):  # states first: a writer's last store precedes RETURNED
            return
        from ._report import current_call

        mine = current_call(self, self.rank)
        who = f"rank {others[0]} has" if len(others) == 1 else f"ranks {', '.join(map(str, others))} have"
        raise CollectiveMismatch(
            f"rank {self.rank} waits in {mine}, but {who} returned from the function "
            "without sending a message it can match; every message waited for must be sent",
            {self.rank: mine, **{w: "returned" for w in others}},
        )

    def wait_word(self, word: int, target: int, writer: int, collective: bool = False) -> None:
        """Wait until ``q[word] >= target``; ``writer`` writes it (see ``wait_words``)."""
        q = self.q
        for _ in range(self.spin_iters):
            if q[word] >= target:
                return
        moving = collective and self.mover is not None and self.move_messages()
        until = time.monotonic_ns() + YIELD_NS
        for _ in range(self.yield_iters):
            os.sched_yield()
            if q[word] >= target:
                return
            moving = moving and self.move_messages()
            if time.monotonic_ns() > until:
                break
        self._sleep_until(lambda: True if q[word] >= target else None,
                          lambda: self._check_peer(word, target, writer), writer, word, target, moving)

    def move_messages(self) -> bool:
        """Let the ``mover`` move this rank's messages, in the middle of a
        collective: True while it has some in flight. The status words its
        point-to-point calls write are put back, so that reports and the
        hang watch still see the collective."""
        q = self.q
        words = self._status_words
        saved = [q[w] for w in words]
        try:
            return bool(self.mover())
        finally:
            for w, v in zip(words, saved):
                q[w] = v

    def heads_into(self, rank: int) -> int:
        """The sum of the heads of every ring into ``rank``: it grows with
        every byte any rank sends to ``rank``."""
        q, lay = self.q, self.layout
        return sum(int(q[lay.pair_word(src, rank) + R_HEAD]) for src in range(self.size))

    def _sleep_until(self, ready, check, on: int | None, word: int, target: int = 0, moving: bool = False):
        """The sleeping phase of a wait: return ``ready()`` once it is not None.

        Announce the sleep (the sleeping flag, which writers read to decide
        whether to ring this rank's bell), then test ``ready`` again: a store
        made before the announcement is seen here, one made after it rings
        the bell, so the futex wait cannot miss it. ``check()`` raises when
        the wait can never end (an abort, a failed or returned writer).
        ``on`` is the rank reported as waited on (None: no single rank).

        While asleep the rank shows the driver what it waits for, so that
        the driver can tell a deadlock (``_deadlock.deadlocked``): ``S_BLOCKED``
        is odd from the first ``ready()`` that found nothing to the return,
        with ``q[word] >= target`` the condition, or for ``word=ANY_RING``
        (a wait for a new record from any rank) the sum of the heads into
        this rank, read before that ``ready()``, in ``S_BLOCK_TARGET``. The
        rank's call site is recorded once, when it first sleeps.

        With ``moving`` (a collective's wait while the ``mover`` has messages
        in flight) the rank runs the mover at every wake-up, which any record
        into it brings, and is not blocked for the driver until the mover has
        nothing left in flight: till then a record could wake it and let it
        send, which its condition word does not show.
        """
        q = self.q
        me = self.rank
        lay = self.layout
        sleeping = lay.sleeping_word(me)
        bell = lay.status_word(me, S_BELL)
        blocked = lay.status_word(me, S_BLOCKED)
        if on is not None:
            q[lay.status_word(me, S_WAITING_FOR)] = on + 1
        ts = _Timespec(0, 50_000_000)
        addr = ctypes.c_void_p(self._bell_addr[me])
        record_site(self)
        q[lay.status_word(me, S_BLOCK_WORD)] = word
        q[lay.status_word(me, S_BLOCK_TARGET)] = target
        try:
            while True:
                expected = q[bell] & 0xFFFFFFFF
                q[sleeping] = 1
                fence()
                if word == ANY_RING:  # read before ready(): see the docstring
                    level = self.heads_into(me)
                got = ready()
                if got is not None:
                    return got
                if word == ANY_RING:
                    q[lay.status_word(me, S_BLOCK_TARGET)] = level
                moving = moving and self.move_messages()
                if not moving and not q[blocked] & 1:
                    q[blocked] += 1
                check()
                _sleep(addr, expected, ts)
                q[sleeping] = 0
        finally:
            q[sleeping] = 0
            if q[blocked] & 1:
                q[blocked] += 1
            q[lay.status_word(me, S_WAITING_FOR)] = 0
