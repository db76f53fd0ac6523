"""Deadlocks: when no rank of a run can ever move again, and the wait-for cycle.

The driver looks at every poll (``SimDriver.hang_report``). A run is
deadlocked when every rank that has not returned sleeps in a wait that no
rank can end. That is decided from the arena alone, soundly:

- each such rank is in a call (state ``CALL``) and asleep in it: its
  ``S_BLOCKED`` word is odd (``Arena._sleep_until``), and it shows what it
  waits for, ``q[word] >= target`` from one writer (a phase of a collective,
  room in a ring, a message's bytes, a synchronous send's receipt), or a
  new record in any ring into it (a probe);
- no condition holds: the word is below its target (the ring heads into a
  prober sum to what they summed before its last look), and the writer it
  waits for is itself asleep in a call (a returned or failed writer ends the
  wait with an error of its own, so that is not reported here); a probe from
  any rank needs every other rank asleep;
- nothing moved while the driver read the conditions: every rank's state
  and ``S_BLOCKED`` word are the same after as before. A rank asleep writes
  nothing any other rank waits for, so the words read between the two looks
  are those of one moment, at which no rank could move; and a rank that
  wakes bumps ``S_BLOCKED`` before it writes anything else (x86-64 keeps
  stores in order and loads in order), so the second look sees it.

A rank computing in its own code, polling, or not yet asleep (it spins and
yields first) means no deadlock; such hangs end at the world's timeout.
So does a communicator used from several threads of one rank at once,
which the contract does not allow.

The cycle follows the one rank each rank waits for: the MPI-level peer an
engine over the transport stated (``Transport.waiting_in``: the mpi4py
stand-in's Recv, Wait, Probe, ... waiting for that peer's record while the
transport itself probes every rank), else ``S_WAITING_FOR``; from the
lowest rank until a rank repeats, or the chain reaches a rank that waits
for any rank (a probe or receive from any source). The stated peer names
the links only; the decision above never reads it.

With the buffering check, a deadlock may be one only because standard sends
run synchronous: a rank whose stated call is *releasable* (its engine can
complete those sends as buffered) is released (``release_buffered``) and
the run goes on; the rank records each such send as a finding.
"""

from __future__ import annotations

from ._layout import (
    ANY_RING, CALL, RETURNED, S_BLOCK_TARGET, S_BLOCK_WORD, S_BLOCKED, S_MPI_PEER, S_MPI_RELEASABLE, S_P2P_KIND,
    S_RELEASE, S_STATE, S_WAITING_FOR, SPARE,
)
from ._p2p import PROBE
from ._report import waits_for


def _states(arena) -> list[tuple[int, int]]:
    lay, q = arena.layout, arena.q
    return [(q[lay.status_word(r, S_STATE)], q[lay.status_word(r, S_BLOCKED)]) for r in range(arena.size)]


def deadlocked(arena) -> bool:
    """True if no rank of the run can ever move again (see the module docstring)."""
    before = _states(arena)
    live = [r for r, (state, _) in enumerate(before) if state not in (RETURNED, SPARE)]
    if not live or any(before[r][0] != CALL or not before[r][1] & 1 for r in live):
        return False
    if any(_can_end(arena, r, before) for r in live):
        return False
    return _states(arena) == before


def _can_end(arena, rank: int, states) -> bool:
    """Whether ``rank``'s wait may end: its condition holds, or it waits for
    a rank that is not asleep in a call."""
    lay, q = arena.layout, arena.q
    word = q[lay.status_word(rank, S_BLOCK_WORD)]
    target = q[lay.status_word(rank, S_BLOCK_TARGET)]
    writer = q[lay.status_word(rank, S_WAITING_FOR)] - 1
    if word == ANY_RING:
        if arena.heads_into(rank) != target:
            return True
        writers = [writer] if writer >= 0 else [r for r in range(arena.size) if r != rank]
    else:
        if q[word] >= target or writer < 0:
            return True
        writers = [writer]
    return any(states[w][0] not in (CALL, SPARE) for w in writers)  # a spare slot starts only when spawned


def wait_cycle(arena) -> tuple[list[int], bool]:
    """The wait-for chain of the ranks in a call, each waiting for the next:
    a cycle if there is one (from its lowest rank; the last waits for the
    first), with True; else the chain from the lowest rank in a call, with
    False (its last rank waits for any rank, or for none in a call).
    ``([], False)`` if no rank is in a call."""
    lay, q = arena.layout, arena.q
    waiting = {r: waits_for(arena, r) for r in range(arena.size) if q[lay.status_word(r, S_STATE)] == CALL}
    chains = []
    for start in sorted(waiting):
        chain = [start]
        while chain[-1] in waiting and waiting[chain[-1]] is not None:
            nxt = waiting[chain[-1]]
            if nxt in chain:
                cycle = chain[chain.index(nxt):]
                low = cycle.index(min(cycle))
                return cycle[low:] + cycle[:low], True
            chain.append(nxt)
        chains.append(chain)
    return (chains[0] if chains else []), False


def release_buffered(arena, released: dict) -> bool:
    """At a deadlock (``deadlocked``), end the wait of every rank whose
    stated MPI call is releasable (``Transport.waiting_in``): add 1 to its
    ``S_RELEASE`` word, which its blocking probe waits on too, and wake it.
    Every live rank is asleep, so each such send would wait forever unless
    MPI buffered it. ``released`` (the driver's, for the run) maps a rank
    to its ``S_BLOCKED`` word when it was released: a rank released in this
    very sleep, which has not run yet, is not released again (that would
    end its next wait too). True if a rank was released, now or in this
    sleep (so the run is not deadlocked yet)."""
    lay, q = arena.layout, arena.q
    pending, ranks = False, []
    for r in range(arena.size):
        if q[lay.status_word(r, S_STATE)] != CALL:
            continue
        blocked = q[lay.status_word(r, S_BLOCKED)]
        if released.get(r) == blocked:
            pending = True
        elif (q[lay.status_word(r, S_MPI_PEER)] and q[lay.status_word(r, S_MPI_RELEASABLE)]
              and q[lay.status_word(r, S_P2P_KIND)] == PROBE):  # only a probe waits on S_RELEASE
            released[r] = blocked
            ranks.append(r)
    # Every release before any wake: a woken rank's messages must not end
    # another's wait before that one's release is written (it would then
    # complete as if matched, and its send would go unreported).
    for r in ranks:
        q[lay.status_word(r, S_RELEASE)] += 1
    for r in ranks:
        arena.wake(r)
    return pending or bool(ranks)
