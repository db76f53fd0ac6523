"""Groups in the mpi4py stand-in (issue 20): MPI.Group and its
constructors, Comm.Get_group, Comm.Create, Comm.Compare, Idup and
Dup_with_info. Each program asserts the values MPI defines, on 1 to 5
ranks (tests/mpi4py_programs/simdist_groups.py compares the same calls
with Open MPI's)."""

from __future__ import annotations

import textwrap

import pytest

from simdist._script import run_script

from mpi4py_prelude import PRELUDE as BASE_PRELUDE

PRELUDE = BASE_PRELUDE + """\
import pickle
"""


def ok(tmp_path, source: str, n: int):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent(source))
    outcome = run_script(str(path), [], n, timeout=30.0)
    assert outcome.status == 0, outcome.error


GROUPS = """
    g = comm.Get_group()
    assert (g.Get_size(), g.size, g.Get_rank(), g.rank) == (size, size, rank, rank)
    assert g == comm.Get_group() and g != g.Dup()  # the communicator's own group; Dup makes another
    assert MPI.Group.Compare(g, g.Dup()) == MPI.IDENT
    rev = g.Incl(list(range(size))[::-1])
    assert rev.rank == size - 1 - rank
    assert g.Compare(rev) == (MPI.IDENT if size == 1 else MPI.SIMILAR)
    evens = g.Range_incl([(0, size - 1, 2)])
    odds = g.Excl(range(0, size, 2))
    assert evens.size == (size + 1) // 2 and odds.size == size // 2
    assert evens.rank == (rank // 2 if rank % 2 == 0 else MPI.UNDEFINED)
    assert odds.rank == (rank // 2 if rank % 2 else MPI.UNDEFINED)
    union = MPI.Group.Union(evens, odds)  # the evens, then the odds
    assert union.Translate_ranks(None, g) == list(range(0, size, 2)) + list(range(1, size, 2))
    assert g.Compare(union) == (MPI.IDENT if size <= 2 else MPI.SIMILAR)
    assert MPI.Group.Intersection(evens, odds).size == 0
    assert MPI.Group.Intersection(g, rev).Translate_ranks(None, g) == list(range(size))
    assert MPI.Group.Difference(g, evens).Translate_ranks(None, g) == list(range(1, size, 2))
    assert g.Range_excl([(size - 1, 0, -1)]).size == 0
    assert g.Range_incl([(size - 1, 0, -2)]).Translate_ranks() == list(range(size - 1, -1, -2))
    assert evens.Translate_ranks([0, MPI.PROC_NULL], odds) == [MPI.UNDEFINED, MPI.PROC_NULL]
    assert rev.Translate_ranks([0]) == [size - 1]  # default: COMM_WORLD's group
    assert MPI.COMM_SELF.Get_group().Translate_ranks([0]) == [rank]
    assert g.Incl([]) == MPI.GROUP_EMPTY and g.Incl([]).Compare(MPI.GROUP_EMPTY) == MPI.IDENT
    assert error_class(lambda: g.Incl([size])) == MPI.ERR_RANK
    assert error_class(lambda: g.Incl([0, 0])) == MPI.ERR_RANK
    assert error_class(lambda: g.Excl([-1])) == MPI.ERR_RANK
    assert error_class(lambda: MPI.GROUP_NULL.Get_size()) == MPI.ERR_GROUP
    h = g.Dup()
    h.Free()
    assert h == MPI.GROUP_NULL and not h and g.size == size
    assert pickle.loads(pickle.dumps(MPI.GROUP_EMPTY)) is MPI.GROUP_EMPTY
    assert pickle.loads(pickle.dumps(MPI.Group(MPI.GROUP_EMPTY))) == MPI.GROUP_EMPTY
    try:
        pickle.dumps(g)
        raise AssertionError("a group pickled")
    except ValueError:
        pass
    assert MPI.Group.fromint(g.toint()) == g
    info = comm.Get_info()  # a new info, which the caller frees
    assert info and info.Get_nkeys() == 0
    info.Free()
"""

CREATE = """
    g = comm.Get_group()
    evens = g.Range_incl([(0, size - 1, 2)])
    sub = comm.Create(evens)
    if rank % 2:
        assert sub == MPI.COMM_NULL and not sub
    else:
        assert (sub.rank, sub.size) == (rank // 2, (size + 1) // 2)
        assert sub.allreduce(rank) == sum(range(0, size, 2))
        assert MPI.Comm.Compare(sub, comm) == (MPI.CONGRUENT if size <= 1 else MPI.UNEQUAL)
        sub.Free()
    rev = comm.Create(g.Incl(list(range(size))[::-1]))
    assert rev.rank == size - 1 - rank and rev.Get_group().Compare(g.Incl(list(range(size))[::-1])) == MPI.IDENT
    assert comm.Compare(rev) == (MPI.CONGRUENT if size == 1 else MPI.SIMILAR)
    # a message on the new communicator is its own: the parent does not see it
    right, left = (rev.rank + 1) % size, (rev.rank - 1) % size
    req = rev.isend(("from", rank), dest=right, tag=3)
    assert not comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
    assert rev.recv(source=left, tag=3) == ("from", size - 1 - left)
    req.wait()
    assert comm.Compare(comm) == MPI.IDENT
    dup = comm.Dup()
    assert comm.Compare(dup) == MPI.CONGRUENT
    assert comm.Compare(comm.Split(0, -rank)) == (MPI.CONGRUENT if size == 1 else MPI.SIMILAR)
    assert comm.Compare(comm.Split(rank % 2, 0)) == (MPI.CONGRUENT if size == 1 else MPI.UNEQUAL)
    idup, req = comm.Idup()
    req.Wait()
    assert req == MPI.REQUEST_NULL and comm.Compare(idup) == MPI.CONGRUENT and idup.allreduce(1) == size
    info = MPI.Info.Create()
    withinfo = comm.Dup_with_info(info)
    assert comm.Compare(withinfo) == MPI.CONGRUENT and withinfo.bcast(rank, root=size - 1) == size - 1
    if size > 1:  # a group with processes outside the communicator
        assert error_class(lambda: MPI.COMM_SELF.Create(g)) == MPI.ERR_GROUP
"""


CREATE_GROUP = """
    import numpy as np

    g = comm.Get_group()
    evens, odds = g.Range_incl([(0, size - 1, 2)]), g.Excl(range(0, size, 2))
    mine = evens if rank % 2 == 0 else odds
    members = list(range(rank % 2, size, 2))
    sub = comm.Create_group(mine, tag=5 + rank % 2)  # only the group's processes call
    assert (sub.rank, sub.size) == (members.index(rank), len(members))
    out = np.zeros(2)
    sub.Allreduce(np.array([rank, 0.5 * rank]), out)
    assert out.tolist() == [sum(members), 0.5 * sum(members)]
    assert sub.allgather(rank) == members and sub.bcast(rank, root=sub.size - 1) == members[-1]
    assert sub.gather(rank, root=0) == (members if sub.rank == 0 else None)
    assert sub.alltoall([(rank, j) for j in range(sub.size)]) == [(m, sub.rank) for m in members]
    assert sub.scan(rank) == sum(members[:sub.rank + 1])
    half = sub.Split(sub.rank % 2, -sub.rank)  # a split of it is one too
    halves = members[sub.rank % 2::2][::-1]
    assert (half.rank, half.size, half.allgather(rank)) == (halves.index(rank), len(halves), halves)
    assert MPI.Comm.Compare(sub, comm) == (MPI.CONGRUENT if len(members) == size else MPI.UNEQUAL)
    # its point-to-point messages are its own
    right, left = members[(sub.rank + 1) % sub.size], members[(sub.rank - 1) % sub.size]
    req = sub.isend(rank, dest=(sub.rank + 1) % sub.size, tag=1)
    sub.Barrier()
    assert sub.recv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG) == left
    req.wait()
    cart = sub.Create_cart([sub.size], periods=True)
    assert cart.neighbor_allgather(rank) == [left, right]
    half.Free()
    sub.Free()
    assert sub == MPI.COMM_NULL
    # every process calls with the evens' group (a library's merge tree does): the others get COMM_NULL
    every = comm.Create_group(evens, tag=True)
    assert (every == MPI.COMM_NULL) == (rank % 2 == 1)
    if rank % 2 == 0:
        assert every.allgather(rank) == list(range(0, size, 2))
        every.Free()
    assert comm.Create_group(MPI.GROUP_EMPTY) == MPI.COMM_NULL
    if size > 1:  # last: under Open MPI 5 a Create_group after this erroneous one can crash
        assert error_class(lambda: MPI.COMM_SELF.Create_group(g)) == MPI.ERR_GROUP
    comm.Barrier()
"""


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_create_group_is_collective_over_the_group_only(tmp_path, n):
    ok(tmp_path, CREATE_GROUP, n)


@pytest.mark.slow
def test_different_collectives_on_a_create_group_communicator_are_a_mismatch(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent("""
        sub = comm.Create_group(comm.Get_group())
        if rank == 0:
            sub.allreduce(1)
        else:
            sub.bcast(1, root=1)
    """))
    outcome = run_script(str(path), [], 2, timeout=30.0)
    assert outcome.status != 0 and "CollectiveMismatch" in outcome.error, outcome.error
    assert "rank 0: allgather (int64 ()) met rank 1's broadcast (root=1)" in outcome.error, outcome.error  # allreduce of objects gathers


def test_arrays_of_different_shapes_on_a_create_group_communicator_are_a_mismatch(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent("""
        import numpy as np
        sub = comm.Create_group(comm.Get_group().Incl([0, 1]))
        x = np.ones(6 if rank == 1 else 4, np.float32)
        sub.Allreduce(MPI.IN_PLACE, x)
    """))
    outcome = run_script(str(path), [], 2, timeout=30.0)
    assert outcome.status != 0 and "CollectiveMismatch" in outcome.error, outcome.error
    assert "float32 (4,), op=sum" in outcome.error and "float32 (6,), op=sum" in outcome.error, outcome.error


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_group_constructors_give_mpis_members_and_ranks(tmp_path, n):
    ok(tmp_path, GROUPS, n)


def test_group_constructors_on_three_ranks(tmp_path):
    ok(tmp_path, GROUPS, 3)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_create_gives_a_communicator_ordered_as_the_group_and_compare_classifies(tmp_path, n):
    ok(tmp_path, CREATE, n)


@pytest.mark.parametrize("make", ["comm.Dup()", "comm.Create_group(comm.Get_group())"])
def test_a_communicator_the_program_named_is_named_in_reports(tmp_path, make):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent(f"""
        import numpy as np
        sub = {make}
        sub.Set_name("rows")
        sub.Allreduce(MPI.IN_PLACE, np.zeros(2 if rank == 0 else 3))
    """))
    outcome = run_script(str(path), [], 2, timeout=30.0)
    assert outcome.status != 0
    assert "CollectiveMismatch" in outcome.error and " rows" in outcome.error, outcome.error
    assert "context" not in outcome.error and "of Create_group" not in outcome.error, outcome.error


@pytest.mark.slow
def test_a_create_group_collective_a_member_never_calls_is_reported_naming_it(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PRELUDE + textwrap.dedent("""
        sub = comm.Create_group(comm.Get_group())
        if rank == 0:
            sub.allreduce(1)
    """))
    outcome = run_script(str(path), [], 2, timeout=30.0)
    assert outcome.status != 0
    assert "allgather (int64 ()) on a communicator of Create_group: rank 0 waits" in outcome.error, outcome.error
    assert "rank 1 has returned" in outcome.error, outcome.error
