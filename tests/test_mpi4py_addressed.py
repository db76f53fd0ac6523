"""Memory known only by its address (``MPI.buffer.fromaddress``): a
datatype may reach past the length its maker claimed, as in C, where only
the pointer matters; the bytes moved are those Open MPI moves
(``test_the_program_passes_under_mpiexec``). A buffer whose extent is
known (an array) is still checked against the datatype's reach, and an
address whose reach is not this process's memory is an error naming the
span, not a segmentation fault."""

from __future__ import annotations

import pytest

from test_mpi4py_api import ok
from test_mpi4py_handles import assert_programs_pass_under_mpiexec

ADDRESSED = """
    def at(array, offset, nbytes):          # a library's raw pointer and its claimed length
        return MPI.buffer.fromaddress(array.ctypes.data + offset, nbytes)

    a = np.arange(20.0).reshape(5, 4)       # row-major: a column is strided
    column = MPI.DOUBLE.Create_vector(5, 1, 4).Commit()

    # point to point: column 1 into column 2, each named by its first element only
    out = np.zeros((5, 4))
    comm.Sendrecv([at(a, 8, 8), 1, column], rank, recvbuf=[at(out, 16, 8), 1, column], source=rank)
    assert out[:, 2].tolist() == a[:, 1].tolist() and not out[:, [0, 1, 3]].any(), out

    # a basic datatype with a count past the claimed length
    got = np.zeros(3)
    comm.Sendrecv([at(a, 0, 8), 3, MPI.DOUBLE], rank, recvbuf=[at(got, 0, 8), 3, MPI.DOUBLE], source=rank)
    assert got.tolist() == [0.0, 1.0, 2.0], got

    # a datatype reaching below the address: elements -1 and +1 around a[0, 2]
    around = MPI.DOUBLE.Create_indexed_block(1, [-1, 1]).Commit()
    pair = np.zeros(2)
    comm.Sendrecv([at(a, 16, 8), 1, around], rank, recvbuf=pair, source=rank)
    assert pair.tolist() == [1.0, 3.0], pair

    # collectives: Alltoallw and Alltoallv of columns
    out = np.zeros((5, 4))
    comm.Alltoallw([at(a, 24, 8), [1] * size, [0] * size, [column] * size],
                   [at(out, 0, 8), [1] * size, [0] * size, [column] * size])
    assert out[:, 0].tolist() == a[:, 3].tolist(), out
    out = np.zeros((5, 4))
    comm.Alltoallv([at(a, 8, 8), ([1] * size, [0] * size), column], [at(out, 8, 8), ([1] * size, [0] * size), column])
    assert out[:, 1].tolist() == a[:, 1].tolist(), out
    flat = np.zeros(4)
    comm.Allgatherv([at(a, 0, 8), 4, MPI.DOUBLE], [at(flat, 0, 8), ([4] * size, [0] * size), MPI.DOUBLE])
    assert flat.tolist() == [0.0, 1.0, 2.0, 3.0], flat

    around.Free()
    column.Free()
"""

# The stand-in's own check (Open MPI reads past the array): an array knows
# its extent, and a datatype reaching past it is refused.
KNOWN_EXTENT = """
    a = np.arange(20.0).reshape(5, 4)
    column = MPI.DOUBLE.Create_vector(5, 1, 4).Commit()
    try:
        comm.Send([a[0], 1, column], rank)
    except ValueError as exc:
        assert "has 32 bytes but count=1 of a datatype spanning bytes 0 to 135" in str(exc), exc
    else:
        raise AssertionError("a datatype reaching past an array was accepted")
    column.Free()
"""

UNMAPPED = """
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    pages = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(pages))
    assert libc.mprotect(ctypes.c_void_p(base + mmap.PAGESIZE), mmap.PAGESIZE, 0) == 0  # PROT_NONE
    last = MPI.buffer.fromaddress(base + mmap.PAGESIZE - 8, 8)
    strided = MPI.DOUBLE.Create_vector(2, 1, 4).Commit()
    try:
        comm.Send([last, 1, strided], rank)
    except ValueError as exc:
        text = str(exc)
        assert "reaches bytes" in text and "0 to 39 from its address" in text, text
        assert f"{base + mmap.PAGESIZE:#x} is not readable memory of this process" in text, text
    else:
        raise AssertionError("an unmapped span was read")
    strided.Free()
"""


# Memory sent from by its address, then unmapped: the mappings read last
# must not vouch for it (a segmentation fault, not an error, if they did).
UNMAPPED_SINCE = """
    import mmap, sys

    opened = []
    sys.addaudithook(lambda event, args: opened.append(1) if event == "open" and args[0] == "/proc/self/maps" else None)
    pages = mmap.mmap(-1, 4 * mmap.PAGESIZE)
    view = np.frombuffer(pages, np.float64)
    base = view.ctypes.data
    got = np.zeros(2)
    for step in range(50):              # the same memory again and again: the maps are read once or twice
        view[1] = step                  # two elements from a pointer claimed to hold one: the reach is checked
        comm.Sendrecv([MPI.buffer.fromaddress(base, 8), 2, MPI.DOUBLE], rank, recvbuf=got, source=rank)
        assert got[1] == step
    assert len(opened) < 5, f"{len(opened)} reads of /proc/self/maps for 50 messages"
    del view
    pages.close()                       # unmapped
    try:
        comm.Send([MPI.buffer.fromaddress(base, 8), 2, MPI.DOUBLE], rank)
    except ValueError as exc:
        assert f"{base:#x} is not readable memory of this process" in str(exc), exc
    else:
        raise AssertionError("memory unmapped since its last message was read")
"""


def test_a_datatype_reaches_past_the_claimed_length_of_an_address(tmp_path):
    ok(tmp_path, ADDRESSED, n=1)
    ok(tmp_path, ADDRESSED, n=2)


def test_an_array_is_still_checked_against_the_datatypes_reach(tmp_path):
    ok(tmp_path, KNOWN_EXTENT, n=1)


def test_a_reach_into_memory_the_process_does_not_own_names_the_span(tmp_path):
    ok(tmp_path, UNMAPPED, n=1)


def test_memory_sent_from_again_is_not_read_from_the_mappings_each_time_nor_after_it_is_unmapped(tmp_path):
    ok(tmp_path, UNMAPPED_SINCE, n=1)


@pytest.mark.slow
def test_the_program_passes_under_mpiexec(tmp_path):
    assert_programs_pass_under_mpiexec(tmp_path, {"addressed": ADDRESSED})
