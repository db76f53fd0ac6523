"""A simulated rank keeps freed memory for its next arrays until the run ends.

Collectives return a new array on every call; glibc would serve a large
one with a fresh mmap whose pages fault in on first write. In a rank,
every allocation comes from the heap, and the heap's free memory goes back
to the system after each run.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import simdist

_libc = ctypes.CDLL(None)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _mmapped_blocks_of_a_64_mib_array(comm=None) -> int:
    """How many blocks glibc mmaps for a new 64 MiB array."""
    mallinfo2 = _libc.mallinfo2
    mallinfo2.restype = _Mallinfo2
    before = mallinfo2().hblks
    x = np.ones(16 << 20, np.float32)
    blocks = mallinfo2().hblks - before
    del x
    return blocks


def _rss_mib(comm=None) -> float:
    with open("/proc/self/status") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
    return kib / 1024


def _allocate_and_free(comm, mib):
    x = np.ones((mib << 20) // 8)
    del x
    return _rss_mib()


pytestmark = pytest.mark.skipif(not hasattr(_libc, "mallinfo2"), reason="not glibc >= 2.33")


def test_a_rank_serves_large_arrays_from_the_heap():
    assert _mmapped_blocks_of_a_64_mib_array() == 1  # this process: glibc's default, an mmap
    with simdist.World(2) as world:
        assert world.run(_mmapped_blocks_of_a_64_mib_array) == [0, 0]


@pytest.mark.slow
def test_a_rank_keeps_freed_memory_during_a_run_and_returns_it_after():
    with simdist.World(2) as world:
        before = world.run(_rss_mib)
        during = world.run(_allocate_and_free, 256)     # freed, and still held
        after = world.run(_rss_mib)                     # returned when that run ended
    for rank in range(2):
        assert during[rank] >= before[rank] + 200, (rank, before, during)
        assert after[rank] <= before[rank] + 32, (rank, before, after)


def test_results_are_right_when_heap_memory_is_reused():
    """Arrays reuse freed memory: a result never aliases an earlier one."""
    def body(comm):
        x = np.full(1 << 20, comm.rank + 1, np.float32)
        kept = [comm.allreduce(x * k) for k in range(1, 4)]
        for _ in range(3):
            del_me = comm.allreduce(x)
            del del_me
        return [float(a[0]) for a in kept] + [float(a[-1]) for a in kept]

    with simdist.World(2) as world:
        assert world.run(body) == [[3.0, 6.0, 9.0, 3.0, 6.0, 9.0]] * 2
