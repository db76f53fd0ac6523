"""The spare slots of a simulated universe: where a rank's ``Spawn`` starts processes.

A world of ``size`` ranks opened with ``universe=U`` maps an arena of U
slots; the slots beyond ``size`` run no process until a rank of a run asks
the driver to spawn some (``Transport.spawn``, over the worker's pipe). The
driver then takes the lowest free slots, resets each (its status, its
context entries, what its rings hold: ``Arena.reset_rank``), starts a new
worker there, a fresh process as MPI's spawned processes are, and sends it
the run's function. A spare slot's memory is reserved only then
(``reserve``): a world that never spawns holds none of it. The spawned
processes are ranks of the run from then on: their outcome counts as the
others' do (an error fails the run), the hang watch and the deadlock check
see them, and an abort stops them.

A slot is free when it has never run in this run, or its process has
returned: a program that spawns again and again needs as many slots as it
has spawned processes alive at once. A Spawn that finds too few free waits
for running spawned processes to return (a child that has disconnected
returns a moment later), at most ``PATIENCE`` seconds, then fails. Until spawned, a slot's state is
``SPARE``: the deadlock check knows it cannot move by itself. Between runs
the spawned workers are ended, so every run starts with all spares free.
"""

from __future__ import annotations

import os
import pickle

from ._layout import S_STATE, SPARE

#: ``World(universe="oversubscribe")`` (``simdist run`` without ``--universe``):
#: spare slots as ``mpiexec --oversubscribe`` spawns onto cores already in
#: use, and ``MPI.UNIVERSE_SIZE`` the CPUs there are, as Open MPI counts the
#: slots of one host. An arena has a fixed number of slots, so there are
#: ``oversubscribed_spares(size)`` of them: enough for mpi4py's test_spawn
#: (each of N ranks spawns up to 2N processes at once).
OVERSUBSCRIBE = "oversubscribe"


def oversubscribed_spares(size: int) -> int:
    return max(32, 2 * size)


def host_slots() -> int:
    """The slots Open MPI's mpiexec counts on this host: the CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


#: Seconds at most that a Spawn waits for spawned processes to return and
#: free their slots (half the run's hang timeout if that is shorter).
PATIENCE = 10.0


def mark_spare(arena, slots) -> None:
    """Before a run: ``slots`` run nothing until spawned."""
    for slot in slots:
        arena.q[arena.layout.status_word(slot, S_STATE)] = SPARE


def end_run(workers: list, spawned: list[int]) -> None:
    """Between runs: end the workers of the slots the last run spawned."""
    for slot in spawned:
        if workers[slot] is not None:
            workers[slot].stop()
            workers[slot] = None


def reserve(arena, slots: list[int]) -> None:
    """Reserve the pages of ``slots`` (OSError where the memory is short),
    as the arena's own slots are at its creation; a slot reserved before
    costs nothing more."""
    lay = arena.layout
    for slot in slots:
        os.posix_fallocate(arena.fd, lay.slot_offset(slot), lay.slot_bytes)


def spawn(driver, request: tuple, outcomes: dict, waited: bool) -> tuple | None:
    """The driver's answer to ``("spawn", count, payload_parts)``: ``("ok",
    slots)`` once ``count`` new processes run the payload in a world of
    their own; None while too few slots are free but spawned processes
    still run that may return and free theirs; ``("error", why)`` when none
    runs or the driver ``waited`` long enough."""
    _, count, payload_parts = request
    what = f"Spawn of {count} process{'es' if count != 1 else ''}"
    running = {s for s in driver.ranks()[driver.size:] if s not in outcomes}
    free = [s for s in range(driver.size, driver.universe) if s not in running]
    if count > len(free):
        if running and not waited and count <= driver.universe - driver.size:
            return None
        return "error", (
            f"{what}: the universe has {driver.universe} "
            f"slot{'s' if driver.universe != 1 else ''}, "
            f"{driver.size} for the world and {len(running)} for spawned processes still running, so {len(free)} "
            f"free; start the run with more (simdist run --universe N, or World(universe=N))")
    slots = free[:count]
    try:
        reserve(driver.arena, slots)
    except OSError as exc:
        return "error", f"{what}: cannot reserve the shared memory of their slots: {exc.strerror}"
    for slot in slots:
        outcomes.pop(slot, None)  # of its last process, which has returned
    driver.start_spawned(slots, pickle.dumps(("run", driver.run_id, *payload_parts, slots)))
    return "ok", slots
