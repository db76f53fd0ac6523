"""The MPI library's files in /dev/shm, removed as early as they can be.

Used by the driver's ranks and by programs started by the user's launcher,
so that a job that is killed or aborted leaves no segment behind.
"""

from __future__ import annotations

import os

__all__ = ["noted_segments", "unlink_segments_once_mapped"]

#: Where a rank of simdist's own job notes its segments, in the job's TMPDIR.
_NOTE_PREFIX = "simdist-segments-"


def _shared_memory_files() -> list[str]:
    """Files in /dev/shm this process maps (the MPI library's segments),
    without those already removed (UCX, under MPICH, removes its own)."""
    with open("/proc/self/maps") as maps:
        paths = {line.split(None, 5)[5].strip() for line in maps if " /dev/shm/" in line}
    return sorted(p for p in paths if not p.endswith(" (deleted)"))


def unlink_segments_once_mapped(world) -> list[str]:
    """Remove the MPI library's /dev/shm files as soon as every rank of
    this host maps all of them, so that nothing stays in /dev/shm however the job ends
    (memory is freed with the last mapping). Open MPI's shared-memory
    transport maps every peer's segment (one per rank) during MPI_Init for
    worlds of up to 32 ranks; MPICH maps one segment per node, shared by all
    its ranks. Either way every rank then maps the same files. Where they
    differ (larger Open MPI worlds, where a rank maps a peer's segment only
    when it first talks to it), no rank has them all yet, so the files are
    left to the driver, which removes them after the job ends. Returns the
    files left. Ranks on other hosts have files of their own: each host's
    ranks compare theirs."""
    from mpi4py import MPI

    files = _shared_memory_files()
    _note(files)
    node = world.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        every = node.allgather(files)
    finally:
        node.Free()
    if all(theirs == files for theirs in every):
        for path in files:
            try:
                os.unlink(path)
            except OSError:
                pass
        return []
    return sorted({path for theirs in every for path in theirs})


def _note(files: list[str]) -> None:
    """Note ``files`` in the job's TMPDIR before any call that waits for a
    peer: a rank killed in the collective below (or all of them) leaves the
    driver the list to remove (``noted_segments``)."""
    directory = os.environ.get("TMPDIR", "")
    if not files or not os.path.basename(directory).startswith("simdist-mpi-") or not os.path.isdir(directory):
        return
    with open(os.path.join(directory, f"{_NOTE_PREFIX}{os.getpid()}"), "w") as note:
        note.write("\n".join(files))


def noted_segments(tmpdir: str) -> set[str]:
    """The /dev/shm files the job's ranks on this host noted in ``tmpdir``."""
    found = set()
    try:
        names = [n for n in os.listdir(tmpdir) if n.startswith(_NOTE_PREFIX)]
    except OSError:
        return found
    for name in names:
        try:
            with open(os.path.join(tmpdir, name)) as note:
                found |= {line for line in note.read().splitlines() if line.startswith("/dev/shm/")}
        except OSError:
            continue
    return found
