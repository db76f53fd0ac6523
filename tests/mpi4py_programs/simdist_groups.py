"""Groups: Comm.Get_group, MPI.Group (Incl, Excl, Range_incl, Range_excl,
Union, Intersection, Difference, Translate_ranks, Compare, size, rank, Dup,
Free, GROUP_EMPTY, GROUP_NULL), Comm.Create, Comm.Compare, Comm.Idup and
Comm.Dup_with_info, with the error classes of bad ranks and null groups.

Origin: written for this project (mpi4py's tutorial has no example of these
calls).
"""
# simdist-run: 1
# simdist-run: 3
# simdist-run: 4

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def error_class(call):
    try:
        call()
    except MPI.Exception as exc:
        return MPI.Get_error_string(exc.Get_error_class()).split(":")[0]
    return "no error"


g = comm.Get_group()
rev = g.Incl(list(range(size))[::-1])
evens = g.Range_incl([(0, size - 1, 2)])
odds = g.Excl(list(range(0, size, 2)))
union = MPI.Group.Union(odds, evens)
print(f"rank {rank}: group size {g.size} rank {g.rank}; reversed rank {rev.rank}; evens rank {evens.rank} "
      f"size {evens.size}; odds rank {odds.rank} size {odds.size}")
print(f"rank {rank}: union {union.Translate_ranks()} intersection {MPI.Group.Intersection(g, rev).Translate_ranks()} "
      f"difference {MPI.Group.Difference(g, odds).Translate_ranks()} ranges "
      f"{g.Range_incl([(size - 1, 0, -2), (size - 2, 0, -2)]).Translate_ranks() if size > 1 else []}")
print(f"rank {rank}: compare {g.Compare(g)} {g.Compare(g.Dup())} {g.Compare(rev)} {g.Compare(evens)} "
      f"{MPI.Group.Compare(union, g)}; same handle {g == comm.Get_group()}")
print(f"rank {rank}: translate {evens.Translate_ranks(list(range(evens.size)), rev)} "
      f"{g.Translate_ranks([MPI.PROC_NULL], g)} {MPI.COMM_SELF.Get_group().Translate_ranks([0])}")
print(f"rank {rank}: empty {g.Incl([]).size} {g.Excl(list(range(size))).size} "
      f"{g.Range_excl([(0, size - 1, 1)]).Compare(MPI.GROUP_EMPTY)} {MPI.GROUP_EMPTY.rank}")
print(f"rank {rank}: errors {error_class(lambda: g.Incl([size]))} {error_class(lambda: g.Excl([-1]))} "
      f"{error_class(lambda: MPI.GROUP_NULL.Get_size())} {error_class(lambda: g.Range_incl([(0, size, 1)]))}")

sub = comm.Create(evens)
if sub:
    print(f"rank {rank}: Create(evens) rank {sub.rank} size {sub.size} sum {sub.allreduce(rank)} "
          f"compare {comm.Compare(sub)}")
    sub.Free()
else:
    print(f"rank {rank}: Create(evens) COMM_NULL {sub == MPI.COMM_NULL}")
back = comm.Create(rev)
print(f"rank {rank}: Create(reversed) rank {back.rank} compare {comm.Compare(back)} "
      f"gather {back.gather(rank, root=0)}")
print(f"rank {rank}: Compare {comm.Compare(comm)} {comm.Compare(comm.Dup())} {comm.Compare(comm.Split(0, -rank))} "
      f"{comm.Compare(comm.Split(rank % 2, 0))} {comm.Compare(MPI.COMM_SELF)}")
dup, request = comm.Idup()
request.Wait()
info = MPI.Info.Create()
withinfo = comm.Dup_with_info(info)
print(f"rank {rank}: Idup {comm.Compare(dup)} {dup.allreduce(1)} {request == MPI.REQUEST_NULL}; "
      f"Dup_with_info {comm.Compare(withinfo)} {withinfo.bcast(rank, root=size - 1)}")
info.Free()
# a list of ranks is read as mpi4py reads one: a bool is 0 or 1; a float or a str is a TypeError
bools = g.Incl([True, 0] if size > 1 else [False])
print(f"rank {rank}: Incl of bools {bools.size} {bools.Translate_ranks([0], g)}")
bools.Free()
for bad in ([0.0], ["0"]):
    try:
        g.Excl(bad)
        print(f"rank {rank}: Excl({bad!r}) accepted")
    except Exception as e:
        print(f"rank {rank}: Excl({bad!r}) {type(e).__name__}")
