"""Synchronization of one-sided communication: the epochs of a window.

Active target, fence: ``Win.Fence`` closes one epoch and opens the next
(unless ``MODE_NOSUCCEED``). It is a collective of the window's own
communicator (a Dup of the one it was made over): an allreduce that also
says whether any rank has accumulates to apply, then, if some has, one
turn per rank in rank order (a barrier after each) in which the rank
applies its accumulates of the epoch. So concurrent accumulates to one
element fold in origin rank order, then program order: the same bits on
every run, whatever the timing. Puts and Gets move at once (MPI forbids
them to conflict with anything in the epoch).

Active target, general (PSCW): ``Post`` adds one token per origin in the
window's control area (and marks the origins exposed to); ``Start`` waits
for the token of each target (MPI allows Start to block), ``Complete``
adds one token per target, ``Wait`` (``Test``) takes the token of each
origin of its Post. Puts and Gets move at once; accumulates wait for
``Complete``, which applies them target by target once every origin of
lower rank that the target exposed to has completed: so accumulates of
PSCW epochs too fold in origin rank order, the same bits on every run. (An
origin with accumulates thus waits in Complete for the origins of lower
rank; a program whose lower-rank origin calls ``Wait`` before its own
``Complete`` and waits for this one deadlocks, and is reported.)

Passive target: ``Lock``/``Unlock`` take and give back the target's lock
word in the control area (-1 exclusive, k > 0 shared by k); ``Lock_all``
takes a shared lock of every rank. Operations move at once; an accumulate
holds the target's atomicity lock (``_winmemory``) while it combines, so
it is atomic per element as MPI requires. The order in which concurrent
accumulates of different origins reach one element is the order they
take that lock, which depends on timing, as the order in which the
origins get their locks does under MPI (integer, bitwise, min/max and
REPLACE-free programs give the same bits in any order).

Waiting. A rank that waits (Start, Wait, Lock, Lock_all) marks itself
waiting in the control area and waits in the progress engine (``_p2p``)
for its next record; whoever changes the control area (Unlock, Post,
Complete) sends every waiting rank an empty record in a context of its
own (``WAKE_CONTEXT``), which the waiter drops. So the wait is the
engine's: a deadlock (a lock never given back, a Post with no Start) is
reported by the simulator's hang watch as a rank "waiting in probe",
and, once every other rank has returned, as an error naming the call.

Memory models. Windows of ``Allocate`` and ``Allocate_shared`` are the
shared segment itself: ``MPI.WIN_UNIFIED``. A window of ``Win.Create`` is
over the program's own memory, which other processes cannot reach: its
segment is the window's public copy and the program's buffer its private
copy, ``MPI.WIN_SEPARATE``, as MPI defines it: the copies are reconciled
at the calls MPI names (Fence, Post, Wait, Test, Lock/Unlock and
Lock_all/Unlock_all by the process itself, Flush of its own rank, Sync,
Free): the bytes the program stored since the last reconciliation go to
the public copy, then the public copy comes back to the private one.
"""

from __future__ import annotations

import numpy as np

from ._errors import ERR_ARG, ERR_GROUP, Exception as MPIException
from ._names import CONSTANTS
from ._p2p import ANY_SOURCE, ANY_TAG
from ._rma import ERR_RMA_SYNC

WAKE_CONTEXT = 1 << 57
POSTED, COMPLETED, WAITING, EXPOSED = 0, 1, 2, 3  # words of the control area, per (rank, peer)
LOCK_EXCLUSIVE, LOCK_SHARED = CONSTANTS["LOCK_EXCLUSIVE"], CONSTANTS["LOCK_SHARED"]
MODE_NOSUCCEED = CONSTANTS["MODE_NOSUCCEED"]
_EMPTY = np.empty(0, np.uint8)


# -- waiting and waking ------------------------------------------------------------------
def _drop_wakes(engine) -> None:
    while engine.find(WAKE_CONTEXT, ANY_SOURCE, ANY_TAG, take=True) is not None:
        pass


def wait_for(st, take, what: str) -> None:
    """Wait until ``take()`` (run under the control mutex) returns True."""
    seg, me, engine = st.segment, st.rank, st.engine

    def taken() -> bool:
        _drop_wakes(engine)
        with seg.mutex():
            got = bool(take())
            seg.control[me, me, WAITING] = 0 if got else 1
        return got

    engine.wait_until(taken, what)


def _waiting(st) -> list[int]:
    """The ranks waiting in the window (read under the control mutex)."""
    control = st.segment.control
    return [r for r in range(st.size) if r != st.rank and control[r, r, WAITING]]


def wake(st, ranks) -> None:
    for r in ranks:
        st.engine.send(st.members[r], WAKE_CONTEXT, st.rank, 0, _EMPTY, 0, False)
    if ranks:
        st.engine.progress()


def _changed(st, change) -> None:
    """Apply ``change()`` to the control area and wake whoever waits."""
    with st.segment.mutex():
        change()
        waiting = _waiting(st)
    wake(st, waiting)


def sync_error(st, call: str, why: str) -> MPIException:
    return MPIException(ERR_RMA_SYNC, f"Win.{call} on rank {st.rank} of {st.label}: {why}")


def _ranks_of(st, group, call: str) -> list[int]:
    """The window ranks of the processes of ``group``."""
    from ._groups import Group

    if not isinstance(group, Group):
        raise TypeError(f"Win.{call}: expected an MPI.Group, got {type(group).__name__}")
    ranks = []
    for world in group._ranks(f"Win.{call}"):
        if world not in st.members:
            raise MPIException(ERR_GROUP, f"Win.{call}: world rank {world} is not in the window's group")
        ranks.append(st.members.index(world))
    return ranks


class Synchronization:
    """Mixin of Win: the synchronization calls (see the module docstring)."""

    # -- fence --------------------------------------------------------------------------
    def Fence(self, assertion: int = 0) -> None:
        """Close the current fence epoch (collective) and open the next."""
        st = self._st()
        _int_assertion(assertion, "Fence")
        if st.locks or st.lock_all or st.start_targets is not None or st.post_origins is not None:
            raise sync_error(st, "Fence", "a Lock, Lock_all, Start or Post epoch is open")
        st.engine.progress()
        st.to_public()
        deferred, st.deferred = st.deferred, []
        pending = int(st.sc.allreduce(np.array([len(deferred)], np.int64), op="max")[0])
        if pending:
            for turn in range(st.size):
                if turn == st.rank:
                    for apply in deferred:
                        apply()
                st.sc.barrier()
        st.to_private()
        st.fence_open = not (int(assertion) & MODE_NOSUCCEED)

    # -- post, start, complete, wait ---------------------------------------------------
    def Post(self, group, assertion: int = 0) -> None:
        """Open an exposure epoch to the processes of ``group``."""
        st = self._st()
        _int_assertion(assertion, "Post")
        origins = _ranks_of(st, group, "Post")
        if st.post_origins is not None:
            raise sync_error(st, "Post", "the exposure epoch of an earlier Post is still open (call Wait)")
        st.to_public()
        control, me = st.segment.control, st.rank

        def post():
            for o in origins:
                control[o, me, POSTED] += 1
                control[me, o, EXPOSED] = 1

        _changed(st, post)
        st.post_origins = origins

    def Start(self, group, assertion: int = 0) -> None:
        """Open an access epoch to the processes of ``group`` (waits for their Post)."""
        st = self._st()
        _int_assertion(assertion, "Start")
        targets = _ranks_of(st, group, "Start")
        if st.start_targets is not None:
            raise sync_error(st, "Start", "the access epoch of an earlier Start is still open (call Complete)")
        control, me = st.segment.control, st.rank
        for t in targets:
            def take(t=t):
                if control[me, t, POSTED] > 0:
                    control[me, t, POSTED] -= 1
                    return True
                return False

            wait_for(st, take, f"Win.Start (waiting for the Post of window rank {t})")
        st.start_targets = targets

    def Complete(self) -> None:
        """Close the access epoch of Start."""
        st = self._st()
        if st.start_targets is None:
            raise sync_error(st, "Complete", "no access epoch is open (Complete without Start)")
        control, me = st.segment.control, st.rank
        deferred, st.deferred_active = st.deferred_active, {}
        for t in st.start_targets:
            if t in deferred:
                def lower_done(t=t):
                    return all(control[t, o, COMPLETED] > 0 for o in range(me) if control[t, o, EXPOSED])

                wait_for(st, lower_done, f"Win.Complete (its accumulates to window rank {t} wait for the "
                         "Complete of the origins of lower rank)")
                with st.segment.atomic(t):
                    for apply in deferred[t]:
                        apply()

            def complete(t=t):
                control[t, me, COMPLETED] += 1

            _changed(st, complete)
        st.start_targets = None

    def _completed(self, st) -> bool:
        control, me, origins = st.segment.control, st.rank, st.post_origins
        if all(control[me, o, COMPLETED] > 0 for o in origins):
            for o in origins:
                control[me, o, COMPLETED] -= 1
                control[me, o, EXPOSED] = 0
            return True
        return False

    def _end_exposure(self, st) -> None:
        st.post_origins = None
        st.sync()

    def Wait(self) -> bool:
        """Close the exposure epoch of Post once every origin has called Complete."""
        st = self._st()
        if st.post_origins is None:
            raise sync_error(st, "Wait", "no exposure epoch is open (Wait without Post)")
        wait_for(st, lambda: self._completed(st), "Win.Wait (for the Complete of the ranks of its Post)")
        self._end_exposure(st)
        return True

    def Test(self) -> bool:
        """Wait's test: True (and the epoch closed) if every origin has completed."""
        st = self._st()
        if st.post_origins is None:
            raise sync_error(st, "Test", "no exposure epoch is open (Test without Post)")
        st.engine.progress()
        with st.segment.mutex():
            done = self._completed(st)
        if done:
            self._end_exposure(st)
        return done

    # -- lock, unlock ----------------------------------------------------------------------
    def Lock(self, rank: int, lock_type: int = LOCK_EXCLUSIVE, assertion: int = 0) -> None:
        """Open a passive-target access epoch to ``rank`` (waits for its lock)."""
        from ._rma import check_rank

        st = self._st()
        rank = check_rank(rank, st.size, "Lock")
        _int_assertion(assertion, "Lock")
        if lock_type not in (LOCK_EXCLUSIVE, LOCK_SHARED):
            raise MPIException(CONSTANTS["ERR_LOCKTYPE"], f"Win.Lock: lock_type={lock_type!r} is neither "
                               "MPI.LOCK_EXCLUSIVE nor MPI.LOCK_SHARED")
        if rank < 0:
            return  # PROC_NULL
        if rank in st.locks or st.lock_all:
            raise sync_error(st, "Lock", f"rank {rank} is already locked by this process")
        self._take_lock(st, rank, lock_type == LOCK_EXCLUSIVE, "Lock")
        st.locks[rank] = lock_type
        if rank == st.rank:
            st.sync()

    def _take_lock(self, st, rank: int, exclusive: bool, call: str) -> None:
        state = st.segment.lock_state

        def take():
            if exclusive and state[rank] == 0:
                state[rank] = -1
            elif not exclusive and state[rank] >= 0:
                state[rank] += 1
            else:
                return False
            return True

        kind = "exclusive" if exclusive else "shared"
        wait_for(st, take, f"Win.{call} (waiting for the {kind} lock of window rank {rank})")

    def _give_back(self, st, ranks) -> None:
        state = st.segment.lock_state

        def release():
            for r in ranks:
                state[r] = 0 if state[r] < 0 else state[r] - 1

        _changed(st, release)

    def Unlock(self, rank: int) -> None:
        """Close the passive-target epoch to ``rank``: its operations are complete."""
        from ._rma import check_rank

        st = self._st()
        rank = check_rank(rank, st.size, "Unlock")
        if rank < 0:
            return
        if rank not in st.locks:
            raise sync_error(st, "Unlock", f"rank {rank} is not locked by this process")
        st.engine.progress()
        if rank == st.rank:
            st.sync()
        self._give_back(st, [rank])
        del st.locks[rank]

    def Lock_all(self, assertion: int = 0) -> None:
        """A shared lock of every rank of the window."""
        st = self._st()
        _int_assertion(assertion, "Lock_all")
        if st.lock_all or st.locks:
            raise sync_error(st, "Lock_all", "this process already holds locks of the window")
        taken = []
        try:
            for rank in range(st.size):
                self._take_lock(st, rank, False, "Lock_all")
                taken.append(rank)
        except BaseException:
            self._give_back(st, taken)  # nothing left behind
            raise
        st.lock_all = True
        st.sync()

    def Unlock_all(self) -> None:
        st = self._st()
        if not st.lock_all:
            raise sync_error(st, "Unlock_all", "no Lock_all epoch is open")
        st.engine.progress()
        st.sync()
        self._give_back(st, range(st.size))
        st.lock_all = False

    # -- flush and sync ----------------------------------------------------------------------
    def _passive(self, st, rank, call: str) -> None:
        if rank not in st.locks and not st.lock_all:
            raise sync_error(st, call, f"no passive-target epoch to rank {rank} is open (call Lock or Lock_all)")

    def Flush(self, rank: int) -> None:
        """Complete the operations to ``rank`` (they complete when issued)."""
        from ._rma import check_rank

        st = self._st()
        rank = check_rank(rank, st.size, "Flush")
        if rank < 0:
            return
        self._passive(st, rank, "Flush")
        st.engine.progress()
        if rank == st.rank:
            st.sync()

    def Flush_local(self, rank: int) -> None:
        self.Flush(rank)

    def Flush_all(self) -> None:
        st = self._st()
        if not st.locks and not st.lock_all:
            raise sync_error(st, "Flush_all", "no passive-target epoch is open (call Lock or Lock_all)")
        st.engine.progress()
        st.sync()

    def Flush_local_all(self) -> None:
        self.Flush_all()

    def Sync(self) -> None:
        """Reconcile the public and private copies of the window (WIN_SEPARATE)."""
        st = self._st()
        st.engine.progress()
        st.sync()

    def _open_epochs(self, st) -> str:
        """What epoch of this process is still open (for Free), or ''."""
        if st.locks:
            return f"the lock of rank(s) {sorted(st.locks)} is held (Lock without Unlock)"
        if st.lock_all:
            return "Lock_all without Unlock_all"
        if st.start_targets is not None:
            return "Start without Complete"
        if st.post_origins is not None:
            return "Post without Wait"
        if st.deferred:
            return "accumulates of a fence epoch that no Fence completed"
        return ""


def _int_assertion(assertion, call: str) -> None:
    if isinstance(assertion, bool) or not isinstance(assertion, (int, np.integer)):
        raise MPIException(ERR_ARG, f"Win.{call}: assertion={assertion!r} must be an int (MPI.MODE_* or 0)")
