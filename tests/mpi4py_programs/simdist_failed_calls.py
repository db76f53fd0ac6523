"""A call that raises leaves nothing behind: every point-to-point call and
every collective is called with one bad argument at a time (a
non-contiguous, read-only or foreign buffer, a bad datatype, an object that
cannot be pickled, a bad rank, tag or root), on every rank, and must raise;
then a correct exchange on the same communicator (Isend to the right, Recv
from the left with ANY_TAG, sendrecv, Allreduce) must get the right data,
and the failed call's receive buffer must be untouched. A receive the failed
call left posted would take the exchange's message (issue 24: a Sendrecv
whose send buffer was refused did); a message it left half-sent would be
received instead of the exchange's. Prints one line per case: the class of
the exception, which is compared with Open MPI's.

With ``--beyond-mpi4py`` it adds the cases where mpi4py itself leaves a
message behind (its ``sendrecv`` sends the object before it checks the
receive's source and tag), which the stand-in refuses whole; those run only
under ``simdist run`` (tests/test_mpi4py_failed_calls.py).

Origin: written for this project.
"""
# simdist-run: 1
# simdist-run: 2
# simdist-run: 3

import sys
import threading

from mpi4py import MPI
import numpy as np

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
TAG = 5
STALE = -1.0
BEYOND_MPI4PY = "--beyond-mpi4py" in sys.argv[1:]


def noncontiguous():
    return np.ones([4, 2])[:, 0]


# bad values of each kind of argument, by name
BAD_BUFFERS = {"noncontiguous": noncontiguous, "not a buffer": lambda: object(),
               "bad datatype": lambda: [np.zeros(4), MPI.DATATYPE_NULL]}
BAD_RECV_BUFFERS = dict(BAD_BUFFERS, **{"read-only": lambda: bytes(32)})
BAD_OBJECTS = {"unpicklable": threading.Lock}


def bad_ranks(comm):
    return {"rank=size": comm.Get_size(), "rank=-5": -5}


BAD_TAGS = {"tag=-7": -7}
BAD_ROOTS = bad_ranks


def p2p_cases(comm):
    """(call, argument, bad value, function of the bad value that makes the call)."""
    me, n = comm.Get_rank(), comm.Get_size()
    right, left = (me + 1) % n, (me - 1) % n
    stale = np.full(4, STALE)
    good = np.arange(4.0)
    cases = []

    def add(call, arg, values, make):
        for name, value in values.items():
            cases.append((f"{call}({arg}: {name})", value, make))

    for call in ("Send", "Ssend", "Isend", "Issend", "Rsend", "Irsend", "Send_init", "Ssend_init", "Bsend", "Ibsend",
                 "Bsend_init"):
        method = lambda c=call: getattr(comm, c)
        add(call, "buf", BAD_BUFFERS, lambda v, m=method: m()(v(), right, TAG))
        add(call, "dest", bad_ranks(comm), lambda v, m=method: m()(good, v, TAG))
        add(call, "tag", BAD_TAGS, lambda v, m=method: m()(good, right, v))
    for call in ("Recv", "Irecv", "Recv_init"):
        method = lambda c=call: getattr(comm, c)
        add(call, "buf", BAD_RECV_BUFFERS, lambda v, m=method: m()(v(), left, TAG))
        add(call, "source", bad_ranks(comm), lambda v, m=method: m()(stale, v, TAG))
        add(call, "tag", BAD_TAGS, lambda v, m=method: m()(stale, left, v))
    add("Sendrecv", "sendbuf", BAD_BUFFERS, lambda v: comm.Sendrecv(v(), right, TAG, stale, left, TAG))
    add("Sendrecv", "dest", bad_ranks(comm), lambda v: comm.Sendrecv(good, v, TAG, stale, left, TAG))
    add("Sendrecv", "sendtag", BAD_TAGS, lambda v: comm.Sendrecv(good, right, v, stale, left, TAG))
    add("Sendrecv", "recvbuf", BAD_RECV_BUFFERS, lambda v: comm.Sendrecv(good, right, TAG, v(), left, TAG))
    add("Sendrecv", "source", bad_ranks(comm), lambda v: comm.Sendrecv(good, right, TAG, stale, v, TAG))
    add("Sendrecv", "recvtag", BAD_TAGS, lambda v: comm.Sendrecv(good, right, TAG, stale, left, v))
    add("Isendrecv", "sendbuf", BAD_BUFFERS, lambda v: comm.Isendrecv(v(), right, TAG, stale, left, TAG).Wait())
    add("Isendrecv", "dest", bad_ranks(comm), lambda v: comm.Isendrecv(good, v, TAG, stale, left, TAG).Wait())
    add("Isendrecv", "recvbuf", BAD_RECV_BUFFERS, lambda v: comm.Isendrecv(good, right, TAG, v(), left, TAG).Wait())
    add("Isendrecv", "source", bad_ranks(comm), lambda v: comm.Isendrecv(good, right, TAG, stale, v, TAG).Wait())
    add("Isendrecv_replace", "buf", BAD_RECV_BUFFERS,
        lambda v: comm.Isendrecv_replace(v(), right, TAG, left, TAG).Wait())
    add("Isendrecv_replace", "source", bad_ranks(comm),
        lambda v: comm.Isendrecv_replace(stale, right, TAG, v, TAG).Wait())
    add("Sendrecv_replace", "buf", BAD_RECV_BUFFERS, lambda v: comm.Sendrecv_replace(v(), right, TAG, left, TAG))
    add("Sendrecv_replace", "dest", bad_ranks(comm), lambda v: comm.Sendrecv_replace(stale, v, TAG, left, TAG))
    add("Sendrecv_replace", "sendtag", BAD_TAGS, lambda v: comm.Sendrecv_replace(stale, right, v, left, TAG))
    add("Sendrecv_replace", "source", bad_ranks(comm), lambda v: comm.Sendrecv_replace(stale, right, TAG, v, TAG))
    add("Sendrecv_replace", "recvtag", BAD_TAGS, lambda v: comm.Sendrecv_replace(stale, right, TAG, left, v))
    for call in ("send", "ssend", "isend", "issend", "bsend", "ibsend"):
        method = lambda c=call: getattr(comm, c)
        add(call, "obj", BAD_OBJECTS, lambda v, m=method: m()(v(), right, TAG))
        add(call, "dest", bad_ranks(comm), lambda v, m=method: m()("x", v, TAG))
        add(call, "tag", BAD_TAGS, lambda v, m=method: m()("x", right, v))
    for call in ("recv", "irecv", "Probe", "Iprobe", "Mprobe", "Improbe", "probe", "iprobe", "mprobe",
                 "improbe"):
        method = lambda c=call: getattr(comm, c)
        kw = {"buf": None} if call in ("recv", "irecv") else {}
        add(call, "source", bad_ranks(comm), lambda v, m=method, kw=kw: m()(source=v, tag=TAG, **kw))
        add(call, "tag", BAD_TAGS, lambda v, m=method, kw=kw: m()(source=left, tag=v, **kw))
    add("sendrecv", "sendobj", BAD_OBJECTS, lambda v: comm.sendrecv(v(), right, TAG, None, left, TAG))
    add("sendrecv", "dest", bad_ranks(comm), lambda v: comm.sendrecv("x", v, TAG, None, left, TAG))
    add("sendrecv", "sendtag", BAD_TAGS, lambda v: comm.sendrecv("x", right, v, None, left, TAG))
    if BEYOND_MPI4PY:  # mpi4py's sendrecv Isends before it checks its receive: the object is sent
        add("sendrecv", "source", bad_ranks(comm), lambda v: comm.sendrecv("x", right, TAG, None, v, TAG))
        add("sendrecv", "recvtag", BAD_TAGS, lambda v: comm.sendrecv("x", right, TAG, None, left, v))
    # composite request calls: Startall with one request that cannot start starts none
    add("Startall", "requests", {"one null": lambda: MPI.REQUEST_NULL}, lambda v: start_all(comm, right, left, v()))
    return cases, stale


def start_all(comm, right, left, bad):
    send = comm.Send_init(np.arange(4.0), right, TAG)
    recv = comm.Recv_init(np.full(4, STALE), left, TAG)
    try:
        MPI.Prequest.Startall([send, recv, bad])
    finally:
        send.Free()
        recv.Free()


def collective_cases(comm):
    """Collectives with a bad argument on every rank."""
    n = comm.Get_size()
    x, out = np.arange(4.0), np.zeros(4 * n)
    cases = []

    def add(call, arg, values, make):
        for name, value in values.items():
            cases.append((f"{call}({arg}: {name})", value, make))

    add("Bcast", "buf", BAD_BUFFERS, lambda v: comm.Bcast(v(), 0))
    add("Bcast", "root", BAD_ROOTS(comm), lambda v: comm.Bcast(x, v))
    add("Allreduce", "sendbuf", BAD_BUFFERS, lambda v: comm.Allreduce(v(), np.zeros(4)))
    add("Allreduce", "recvbuf", BAD_RECV_BUFFERS, lambda v: comm.Allreduce(x, v()))
    add("Allreduce", "op", {"OP_NULL": MPI.OP_NULL}, lambda v: comm.Allreduce(x, np.zeros(4), v))
    add("Reduce", "root", BAD_ROOTS(comm), lambda v: comm.Reduce(x, np.zeros(4), MPI.SUM, v))
    add("Allgather", "recvbuf", BAD_RECV_BUFFERS, lambda v: comm.Allgather(x, v()))
    add("Gather", "root", BAD_ROOTS(comm), lambda v: comm.Gather(x, out, v))
    add("Scatter", "root", BAD_ROOTS(comm), lambda v: comm.Scatter(out, x, v))
    add("Alltoall", "sendbuf", BAD_BUFFERS, lambda v: comm.Alltoall(v(), out))
    add("Scan", "sendbuf", BAD_BUFFERS, lambda v: comm.Scan(v(), np.zeros(4)))
    add("bcast", "root", BAD_ROOTS(comm), lambda v: comm.bcast("x", v))
    add("gather", "sendobj", BAD_OBJECTS, lambda v: comm.gather(v(), 0))
    add("gather", "root", BAD_ROOTS(comm), lambda v: comm.gather("x", v))
    add("allgather", "sendobj", BAD_OBJECTS, lambda v: comm.allgather(v()))
    add("alltoall", "sendobj", {"unpicklable": lambda: [threading.Lock()] * n}, lambda v: comm.alltoall(v()))
    add("allreduce", "sendobj", BAD_OBJECTS, lambda v: comm.allreduce(v()))
    add("scatter", "root", BAD_ROOTS(comm), lambda v: comm.scatter(["x"] * n, v))
    return cases


def exchange(comm, stale, label):
    """A correct exchange on ``comm``: the right data, and ``stale`` untouched."""
    me, n = comm.Get_rank(), comm.Get_size()
    right, left = (me + 1) % n, (me - 1) % n
    got = np.zeros(4)
    req = comm.Isend(np.full(4, 100.0 * me), right, TAG)
    comm.Recv(got, left, MPI.ANY_TAG)
    req.Wait()
    obj = comm.sendrecv(("obj", me), right, TAG, None, left, TAG)
    total = comm.allreduce(me)
    ok = (got.tolist() == [100.0 * left] * 4 and obj == ("obj", left) and total == n * (n - 1) // 2
          and stale.tolist() == [STALE] * 4 and not comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG))
    if not ok:
        print(f"rank {rank}: WRONG after {label}: got {got.tolist()} {obj} {total} stale {stale.tolist()}")
    return ok


def run(comm, name):
    MPI.Attach_buffer(bytearray(1 << 16))  # for the buffered sends (Bsend, ...)
    cases, stale = p2p_cases(comm)
    for label, value, make in cases + [(label, v, m) for label, v, m in collective_cases(comm)]:
        try:
            make(value)
            outcome = "no error"
        except Exception as exc:  # the class is what is compared (mpi4py raises several)
            outcome = type(exc).__name__
        comm.Barrier()
        good = exchange(comm, stale, label)
        print(f"rank {rank} {name} {label}: {outcome}, then {'right' if good else 'WRONG'} data")
    MPI.Detach_buffer()


run(world, "COMM_WORLD")
run(MPI.COMM_SELF, "COMM_SELF")
dup = world.Dup()
run(dup, "Dup")
dup.Free()
