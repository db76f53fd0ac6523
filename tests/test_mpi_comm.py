"""MpiComm under a real ``mpiexec``: every collective of the contract,
checked on the ranks against numpy.

This file is also the rank program. ``mpiexec -n N python -m mpi4py
test_mpi_comm.py OUT`` runs every group of checks in ``GROUPS`` on
``MpiComm(MPI.COMM_WORLD)`` and, after each group, writes the rank's
verdicts (checks made, failures with the case) as JSON to ``OUT/rank<R>.json``.
pytest starts one such job per world size (a few seconds each), and each
test asserts on one group, so a failure names the behaviour, rank and case.
``-m mpi4py`` aborts the whole job if a rank raises, so nothing hangs.

Inputs are exact in any reduction order: integers (wrapping arithmetic does
not depend on the order), bool, min/max, bitwise and logical ops, and small
integers stored in the float and complex dtypes. So whatever algorithm the
MPI library picks, the results must equal numpy's left fold to the bit.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
import warnings
import zlib

import numpy as np
import pytest

SIZES = (1, 2, 3, 4)
LAUNCH_TIMEOUT = 120.0  # seconds for one mpiexec job; one takes 2 to 15 s

DTYPES = tuple(
    np.dtype(name)
    for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "complex64", "complex128",
    )
)
SHAPES = ((), (0,), (3, 0), (1,), (7,), (4, 3), (2, 3, 5))
BLOCK_SHAPES = ((), (0,), (5,), (3, 2), (2, 0, 3))
LAYOUTS = ("contiguous", "strided", "readonly", "fortran", "readonly-strided")


def _mpiexec() -> str:
    from conftest import mpiexec_or_skip  # imported here: the ranks run this file too

    return mpiexec_or_skip()


# == the rank program ==========================================================


def ops_for(dtype) -> tuple[str, ...]:
    """The ops the contract defines on ``dtype``."""
    kind = np.dtype(dtype).kind
    return tuple(
        op
        for op, kinds in (
            ("sum", "iufc"), ("prod", "iufc"), ("mean", "fc"), ("min", "biuf"), ("max", "biuf"),
            ("band", "biu"), ("bor", "biu"), ("bxor", "biu"), ("land", "biu"), ("lor", "biu"), ("lxor", "biu"),
        )
        if kind in kinds
    )


def exact_values(dtype, shape, case, rank) -> np.ndarray:
    """Rank ``rank``'s input for ``case``: values that reduce exactly in any order."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng([case, rank])
    if dt.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        x = np.asarray(rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True))
        return np.where(rng.random(shape) < 0.25, 0, x).astype(dt)
    small = np.asarray(rng.integers(-4, 5, size=shape)).astype(np.float64)  # |prod| <= 4**4 for 4 ranks
    if dt.kind == "c":
        small = small + 1j * np.asarray(rng.integers(-4, 5, size=shape))
    return np.asarray(small).astype(dt)


def laid_out(x: np.ndarray, layout: str) -> np.ndarray:
    """``x`` with its values in another memory layout, or read-only."""
    if layout in ("strided", "readonly-strided"):
        wide = np.ones(x.shape + (2,), x.dtype)  # the other half must never be read
        wide[..., 0] = x
        x = wide[..., :1].reshape(x.shape)
    elif layout == "fortran" and x.ndim > 1:
        x = np.asfortranarray(x)
    if layout.startswith("readonly"):
        x = x.copy() if layout == "readonly" else x
        x.flags.writeable = False
    return x


def case_id(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


class Verdicts:
    """The checks one rank made in one group, and the ones that failed."""

    def __init__(self):
        self.checks = 0
        self.failures: list[str] = []

    def check(self, ok, what: str) -> bool:
        self.checks += 1
        if not ok and len(self.failures) < 20:
            self.failures.append(what)
        return bool(ok)

    def bits(self, got, expected, what: str, values_only: bool = False) -> None:
        """``got`` is an ndarray of ``expected``'s dtype, shape and bits
        (values only, so that -0.0 == 0.0, where ``values_only``)."""
        same = (
            type(got) is np.ndarray
            and got.dtype == expected.dtype
            and got.shape == expected.shape
            and (np.array_equal(got, expected) if values_only else got.tobytes() == expected.tobytes())
        )
        self.check(same, f"{what}: got {_show(got)}, expected {_show(expected)}")

    def raises(self, error, needles, call, what: str) -> None:
        """``call()`` raises ``error`` with every one of ``needles`` (a str or
        a tuple of them) in its message."""
        needles = (needles,) if isinstance(needles, str) else needles
        expected = f"expected {error.__name__} with {' and '.join(map(repr, needles))}"
        try:
            call()
        except Exception as exc:
            ok = isinstance(exc, error) and all(n in str(exc) for n in needles)
            self.check(ok, f"{what}: raised {type(exc).__name__}: {exc}; {expected}")
        else:
            self.check(False, f"{what}: returned; {expected}")


def _show(x) -> str:
    if type(x) is np.ndarray:
        return f"{x.dtype} {x.shape} {np.array2string(x.reshape(-1)[:8], threshold=8)}"
    return repr(x)[:80]


def _state(x):
    return (x.dtype, x.shape, x.strides, x.flags.writeable, x.tobytes()) if type(x) is np.ndarray else repr(x)


def call(v: Verdicts, what: str, fn, *inputs):
    """``fn(*inputs)``, checking that the inputs are unchanged and that an
    array result is a new, writeable array owning its memory."""
    before = [_state(x) for x in inputs]
    out = fn(*inputs)
    v.check([_state(x) for x in inputs] == before, f"{what}: an input was modified")
    if out is not None:
        new = (
            type(out) is np.ndarray
            and out.flags.owndata
            and out.flags.writeable
            and not any(type(x) is np.ndarray and np.may_share_memory(out, x) for x in inputs)
        )
        v.check(new, f"{what}: the result is not a new writeable ndarray owning its memory")
    return out


def supported(dtypes=DTYPES):
    from simdist.mpi._comm import TYPES

    return [dt for dt in dtypes if dt in TYPES]


def check_allreduce(comm, v):
    from reference import left_fold

    n, me = comm.size, comm.rank
    for dt in supported():
        for i, shape in enumerate(SHAPES):
            for j, op in enumerate(ops_for(dt)):
                case = case_id("allreduce", dt.str, shape, op)
                x = laid_out(exact_values(dt, shape, case, me), LAYOUTS[(i + j) % len(LAYOUTS)])
                got = call(v, f"allreduce({dt} {shape}, {op})", lambda a: comm.allreduce(a, op), x)
                want = left_fold(op, [exact_values(dt, shape, case, r) for r in range(n)])
                v.bits(got, want, f"allreduce({dt} {shape}, op={op})", values_only=dt.kind == "c" and op == "prod")
    v.bits(call(v, "allreduce(list)", comm.allreduce, [1, 2, 3]), np.array([1, 2, 3]) * n, "allreduce of a list")
    for dt in ("int8", "uint8", "int16", "uint16"):  # wide enough for SIMD, where Open MPI saturates
        x = np.full(64, np.iinfo(dt).max, dt)
        v.bits(comm.allreduce(x), (x.astype(np.int64) * n).astype(dt), f"{dt} sum wraps around")
    v.bits(comm.allreduce(np.arange(3.0)), np.arange(3.0) * n, "allreduce defaults to op='sum'")


def check_reduce(comm, v):
    from reference import left_fold

    n, me = comm.size, comm.rank
    for dt in supported():
        for i, shape in enumerate(SHAPES[:5]):
            for j, op in enumerate(ops_for(dt)):
                case = case_id("reduce", dt.str, shape, op)
                x = laid_out(exact_values(dt, shape, case, me), LAYOUTS[(i + j) % len(LAYOUTS)])
                want = left_fold(op, [exact_values(dt, shape, case, r) for r in range(n)])
                for root in range(n):
                    what = f"reduce({dt} {shape}, op={op}, root={root})"
                    got = call(v, what, lambda a: comm.reduce(a, root=root, op=op), x)
                    if root == me:
                        v.bits(got, want, what, values_only=dt.kind == "c" and op == "prod")
                    else:
                        v.check(got is None, f"{what}: a non-root got {_show(got)}, not None")


def check_reduce_scatter(comm, v):
    from reference import left_fold

    n, me = comm.size, comm.rank
    for dt in supported():
        for i, inner in enumerate(BLOCK_SHAPES):
            for j, op in enumerate(ops_for(dt)):
                case = case_id("reduce_scatter", dt.str, inner, op)
                xs = [exact_values(dt, (n, *inner), case, r) for r in range(n)]
                x = laid_out(xs[me], LAYOUTS[(i + j) % len(LAYOUTS)])
                what = f"reduce_scatter({dt} {(n, *inner)}, op={op})"
                got = call(v, what, lambda a: comm.reduce_scatter(a, op), x)
                v.bits(got, left_fold(op, [y[me] for y in xs]), what, values_only=dt.kind == "c" and op == "prod")


def check_broadcast(comm, v):
    from simdist import CollectiveMismatch

    n, me = comm.size, comm.rank
    for dt in supported():
        for i, shape in enumerate(SHAPES):
            for root in range(n):
                x = exact_values(dt, shape, case_id("broadcast", dt.str, shape), root)
                what = f"broadcast({dt} {shape}, root={root})"
                if me == root:
                    mine = laid_out(x, LAYOUTS[(i + root) % len(LAYOUTS)])
                else:  # non-roots pass None, or an array of root's dtype and shape
                    mine = None if (i + me) % 2 else np.zeros(shape, dt)
                got = call(v, what, lambda a: comm.broadcast(a, root=root), mine)
                v.bits(got, x, what)
    if n > 1:  # a non-root's array of another shape: that rank raises, after the transfer
        x = np.arange(3.0) if me == 0 else np.zeros(4)
        if me == 0:
            v.bits(comm.broadcast(x), np.arange(3.0), "broadcast to a non-root passing another shape")
        else:
            v.raises(CollectiveMismatch, "root 0 broadcast dtype float64 and shape (3,)",
                     lambda: comm.broadcast(x), "broadcast with a non-root's array of another shape")


def check_scatter(comm, v):
    n, me = comm.size, comm.rank
    for dt in supported():
        for i, inner in enumerate(BLOCK_SHAPES):
            for root in range(n):
                x = exact_values(dt, (n, *inner), case_id("scatter", dt.str, inner), root)
                what = f"scatter({dt} {(n, *inner)}, root={root})"
                mine = laid_out(x, LAYOUTS[(i + root) % len(LAYOUTS)]) if me == root else None
                got = call(v, what, lambda a: comm.scatter(a, root=root), mine)
                v.bits(got, x[me], what)


def check_allgather(comm, v):
    n, me = comm.size, comm.rank
    for dt in supported():
        for i, shape in enumerate(SHAPES):
            xs = [exact_values(dt, shape, case_id("allgather", dt.str, shape), r) for r in range(n)]
            what = f"allgather({dt} {shape})"
            got = call(v, what, comm.allgather, laid_out(xs[me], LAYOUTS[i % len(LAYOUTS)]))
            v.bits(got, np.stack(xs), what)


def check_gather(comm, v):
    n, me = comm.size, comm.rank
    for dt in supported():
        for i, shape in enumerate(SHAPES[:5]):
            xs = [exact_values(dt, shape, case_id("gather", dt.str, shape), r) for r in range(n)]
            for root in range(n):
                what = f"gather({dt} {shape}, root={root})"
                x = laid_out(xs[me], LAYOUTS[(i + root) % len(LAYOUTS)])
                got = call(v, what, lambda a: comm.gather(a, root=root), x)
                if me == root:
                    v.bits(got, np.stack(xs), what)
                else:
                    v.check(got is None, f"{what}: a non-root got {_show(got)}, not None")


def check_alltoall(comm, v):
    n, me = comm.size, comm.rank
    for dt in supported():
        for i, inner in enumerate(BLOCK_SHAPES):
            xs = [exact_values(dt, (n, *inner), case_id("alltoall", dt.str, inner), r) for r in range(n)]
            what = f"alltoall({dt} {(n, *inner)})"
            got = call(v, what, comm.alltoall, laid_out(xs[me], LAYOUTS[i % len(LAYOUTS)]))
            v.bits(got, np.stack([x[me] for x in xs]), what)
            v.bits(comm.alltoall(got), xs[me], what + " twice (the identity)")


def check_send_recv(comm, v):
    """Every rank sends to the next and receives from the previous; small
    messages, so every send returns before its recv is posted."""
    from mpi4py import MPI

    n, me = comm.size, comm.rank
    if n == 1:
        return
    dest, source = (me + 1) % n, (me - 1) % n
    cases = [(dt, shape) for dt in supported() for shape in SHAPES]
    for k, (dt, shape) in enumerate(cases):  # tag 5 then tag 9, twice: received tag 9 first
        for tag, nth in ((5, 0), (9, 0), (5, 1), (9, 1)):
            x = laid_out(exact_values(dt, shape, case_id("send", dt.str, shape, tag, nth), me), LAYOUTS[k % 5])
            v.check(call(v, f"send({dt} {shape}, tag={tag})", lambda a: comm.send(a, dest, tag=tag), x) is None,
                    "send returns None")
        for tag, nth in ((9, 0), (9, 1), (5, 0), (5, 1)):
            what = f"recv #{nth} of tag {tag} ({dt} {shape}) from rank {source}"
            got = call(v, what, lambda: comm.recv(source, tag=tag))
            v.bits(got, exact_values(dt, shape, case_id("send", dt.str, shape, tag, nth), source), what)
    big = np.arange(1 << 20, dtype=np.float64)  # 8 MiB: a rendezvous, not an eager send
    if me == 0:
        comm.send(big[::2], 1, tag=1)
    elif me == 1:
        v.bits(comm.recv(0, tag=1), big[::2].copy(), "recv of a 4 MiB message")
    tag_ub = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB)
    comm.send(np.array(me), dest, tag=tag_ub)
    v.bits(comm.recv(source, tag=tag_ub), np.array(source), f"send/recv with tag=MPI_TAG_UB={tag_ub}")


def check_split(comm, v):
    from simdist import InvalidValue, SimdistError

    n, me = comm.size, comm.rank
    sub = comm.split(me % 2, key=-me)  # ordered by key: the highest world rank first
    group = sorted(range(me % 2, n, 2), reverse=True)
    v.check((sub.size, sub.rank) == (len(group), group.index(me)), f"split: got rank {sub.rank} of {sub.size}")
    v.bits(sub.allgather(np.int64(me)), np.array(group, np.int64), "allgather on a split communicator")
    v.bits(sub.allreduce(np.int64(me), "max"), np.array(max(group), np.int64), "allreduce on a split communicator")
    sub.free()
    sub.free()  # freeing twice does nothing
    v.raises(SimdistError, "on a communicator that was freed", sub.barrier, "barrier after free")
    v.raises(SimdistError, "on a communicator that was freed", lambda: sub.allreduce(np.ones(2)), "allreduce after free")
    # color None gives None; keys beyond a C int order the ranks all the same
    color = None if me == 0 and n > 1 else 7
    sub = comm.split(color, key=2**40 - me * 2**35)
    if color is None:
        v.check(sub is None, f"split(color=None) gave {sub!r}, not None")
    else:
        group = sorted(range(1 if n > 1 else 0, n), reverse=True)
        v.bits(sub.allgather(np.int64(me)), np.array(group, np.int64), "split with 64-bit keys")
        sub.free()
    v.raises(InvalidValue, "the world", comm.free, "free of the communicator MpiComm was built on")
    v.raises(InvalidValue, f"rank {me}: split: color=-1 must be >= 0", lambda: comm.split(-1), "split(color=-1)")


def check_barrier(comm, v):
    for _ in range(3):
        v.check(comm.barrier() is None, "barrier returns None")


def check_float_agreement(comm, v):
    """Random floats, where the library's order shows: the result is identical
    on every rank and within gamma(N-1) * sum|x_i| of the exact sum."""
    from mpi4py import MPI
    from reference import values

    n, me = comm.size, comm.rank
    for dt in supported([np.dtype(t) for t in ("float16", "float32", "complex64", "float64", "complex128")]):
        part = np.dtype(f"f{dt.itemsize // 2}") if dt.kind == "c" else dt
        u = float(np.finfo(part).eps) / 2
        gamma = (n - 1) * u / (1 - (n - 1) * u)
        for count in (1, 1000, 65537, 300001) if part.itemsize < 8 else (1, 1000, 20001):  # fsum is slow
            case = case_id("float", dt.str, count)
            xs = [values(dt, (count,), case, r) for r in range(n)]
            for name, got in (("allreduce", comm.allreduce(xs[me])),
                              ("reduce_scatter", comm.reduce_scatter(xs[me][: count - count % n].reshape(n, -1)))):
                what = f"{name}({dt} ({count},))"
                theirs = MPI.COMM_WORLD.allgather(got.tobytes())
                if name == "allreduce":
                    v.check(all(t == theirs[0] for t in theirs), f"{what}: ranks got different bits")
                    parts = xs
                else:
                    parts = [x[: count - count % n].reshape(n, -1)[me] for x in xs]
                for c in ("real", "imag") if dt.kind == "c" else ("real",):
                    exact = _exact_sum([getattr(p, c) for p in parts])
                    bound = gamma * sum(np.abs(getattr(p, c).astype(np.float64)) for p in parts)
                    err = np.abs(getattr(got, c).astype(np.float64) - exact)
                    if not v.check(np.all(err <= bound), f"{what}: an error is above the bound"):
                        v.failures[-1] += f" (error {err.max()}, bound there {bound[err.argmax()]})"


def _exact_sum(parts) -> np.ndarray:
    """The sum of float16/32 parts exactly in float64; of float64 parts, each
    element by math.fsum, then rounded to float64 once."""
    import math

    if parts[0].dtype.itemsize < 8:
        return sum(p.astype(np.float64) for p in parts)  # <= 4 terms of < 50 bits of span: exact
    return np.array([math.fsum(col) for col in zip(*parts)])


def check_argument_errors(comm, v):
    """The simulator's checks and messages; every rank raises before any communication."""
    from simdist import InvalidType, InvalidValue

    n, me = comm.size, comm.rank
    x = np.arange(4.0)
    at = f"rank {me}: "
    v.raises(InvalidValue, at + "allreduce: op='avg' is not a reduction op", lambda: comm.allreduce(x, "avg"), "op='avg'")
    v.raises(InvalidType, "reduce with op='sum' and divide", lambda: comm.allreduce(np.arange(3), "mean"), "int mean")
    v.raises(InvalidType, "op='min' is not defined on dtype complex64",
             lambda: comm.reduce(np.ones(2, np.complex64), op="min"), "complex min")
    v.raises(InvalidType, at + "allgather: x=None", lambda: comm.allgather(None), "allgather(None)")
    v.raises(InvalidType, "which collectives do not carry", lambda: comm.gather(np.array(["a"])), "str dtype")
    v.raises(InvalidValue, f"root={n} is out of range", lambda: comm.reduce(x, root=n), "reduce(root=size)")
    v.raises(InvalidType, "root=1.0 must be an int rank", lambda: comm.broadcast(x, root=1.0), "root=1.0")
    v.raises(InvalidValue, f"it must have shape (size, ...) = ({n}, ...)",
             lambda: comm.reduce_scatter(np.ones((n + 1, 2))), "reduce_scatter of the wrong shape")
    v.raises(InvalidValue, "one block per rank", lambda: comm.alltoall(np.float64(1)), "alltoall of a 0-d array")
    v.raises(InvalidValue, at + "send: tag=-1 must be >= 0", lambda: comm.send(x, 0, tag=-1), "tag=-1")
    v.raises(InvalidValue, "MPI_TAG_UB", lambda: comm.send(x, 0, tag=2**62), "tag=2**62")
    v.raises(InvalidValue, "MPI_TAG_UB", lambda: comm.recv(0, tag=2**62), "recv tag=2**62")
    v.raises(InvalidValue, f"dest={n} is out of range", lambda: comm.send(x, n), "send(dest=size)")
    # root's invalid argument reaches the non-roots, which raise too instead of waiting
    for root in range(n):
        v.raises(InvalidType, "x=None", lambda: comm.broadcast(None, root=root), f"broadcast(None) from root {root}")
        v.raises(InvalidValue, "one block per rank",
                 lambda: comm.scatter(np.ones(n + 1) if me == root else None, root=root), f"bad scatter, root {root}")
    v.bits(comm.allreduce(np.int64(me)), np.array(n * (n - 1) // 2, np.int64), "allreduce after the errors")


def check_unsupported_dtype(comm, v):
    """A dtype the library cannot carry raises InvalidType naming the backend
    and the collective on every rank (simulated by hiding float16's type)."""
    from mpi4py import MPI
    from simdist import InvalidType
    from simdist.mpi import _comm

    n, me = comm.size, comm.rank
    x, blocks = np.ones(3, np.float16), np.ones((n, 2), np.float16)
    saved = _comm.TYPES.pop(np.dtype(np.float16), None)
    try:
        calls = {
            "allreduce": lambda: comm.allreduce(x),
            "reduce": lambda: comm.reduce(x, op="max"),
            "reduce_scatter": lambda: comm.reduce_scatter(blocks, "mean"),
            "broadcast": lambda: comm.broadcast(x if me == 0 else None),
            "scatter": lambda: comm.scatter(blocks if me == n - 1 else None, root=n - 1),
            "allgather": lambda: comm.allgather(x),
            "gather": lambda: comm.gather(x),
            "alltoall": lambda: comm.alltoall(blocks),
            "send": lambda: comm.send(x, 0),
        }
        for name, fn in calls.items():
            needles = (f"rank {me}: {name}: ", "float16 is not supported by the mpi backend")
            v.raises(InvalidType, needles, fn, f"{name} of hidden float16")
    finally:
        if saved is not None:
            _comm.TYPES[np.dtype(np.float16)] = saved
    # an (op, dtype) pair the library refuses becomes InvalidType (simulated:
    # 'max' reduces float64 with MPI_BAND, which MPI does not define on floats)
    # carrying the library's own text for MPI_ERR_OP, which differs by library:
    # "MPI_ERR_OP: invalid reduce operation" (Open MPI), "Invalid MPI_Op" (MPICH)
    saved = _comm._OPS["max"]
    _comm._OPS["max"] = MPI.BAND
    try:
        v.raises(InvalidType, (f"rank {me}: allreduce: op='max' on dtype float64 is not supported by the mpi backend",
                               MPI.Get_error_string(MPI.ERR_OP)),
                 lambda: comm.allreduce(np.ones(2), "max"), "MPI_BAND on MPI_DOUBLE")
    finally:
        _comm._OPS["max"] = saved
    v.bits(comm.allgather(np.int8(me)), np.arange(n, dtype=np.int8), "allgather after the errors")


def check_construction(comm, v):
    from mpi4py import MPI
    from simdist import Communicator, InvalidType, InvalidValue
    from simdist.mpi import MpiComm

    world = MpiComm.world()
    v.check(isinstance(world, Communicator), "MpiComm is a simdist.Communicator")
    v.check((world.rank, world.size) == (MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size), "world() rank and size")
    v.raises(InvalidValue, "cannot be freed", world.free, "free of world()")
    v.check(repr(world) == f"<MpiComm rank {world.rank} of {world.size}>", f"repr: {world!r}")
    v.raises(InvalidType, "must be an mpi4py intracommunicator", lambda: MpiComm(MPI.COMM_NULL), "MpiComm(COMM_NULL)")
    v.raises(InvalidType, "must be an mpi4py intracommunicator", lambda: MpiComm("world"), "MpiComm('world')")
    native = np.dtype(np.float16) in supported()
    v.check(native or "Open MPI" not in MPI.Get_library_version(), "Open MPI carries float16 (MPI_SHORT_FLOAT)")


GROUPS = {
    "allreduce": check_allreduce,
    "reduce": check_reduce,
    "reduce_scatter": check_reduce_scatter,
    "broadcast": check_broadcast,
    "scatter": check_scatter,
    "allgather": check_allgather,
    "gather": check_gather,
    "alltoall": check_alltoall,
    "send_recv": check_send_recv,
    "split": check_split,
    "barrier": check_barrier,
    "float_agreement": check_float_agreement,
    "argument_errors": check_argument_errors,
    "unsupported_dtype": check_unsupported_dtype,
    "construction": check_construction,
}


def rank_main(out_dir: str) -> None:
    from mpi4py import MPI
    from simdist.mpi import MpiComm

    comm = MpiComm(MPI.COMM_WORLD)
    report = {}
    for name, group in GROUPS.items():
        v = Verdicts()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning may escape a collective
            try:
                group(comm, v)
            except Exception:  # report it, then let mpi4py abort the job
                v.failures.append(traceback.format_exc())
                _write(out_dir, comm.rank, {**report, name: vars(v)})
                raise
        report[name] = vars(v)
        _write(out_dir, comm.rank, report)
        comm.barrier()


def _write(out_dir, rank, report) -> None:
    path = os.path.join(out_dir, f"rank{rank}.json")
    with open(path + ".tmp", "w") as fh:
        json.dump(report, fh)
    os.replace(path + ".tmp", path)


# == the launcher (pytest's side) ==============================================


def _tree(pid: int) -> list[int]:
    """``pid``'s descendants (mpiexec's ranks are in process groups of their own)."""
    from conftest import descendants  # imported here: the ranks run this file too

    return list(descendants(pid))


def _shm_mapped(pids) -> set[str]:
    paths = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as fh:
                paths.update(line.split(None, 5)[5].strip() for line in fh if " /dev/shm/" in line)
        except (OSError, IndexError):
            continue
    return paths


def _stop(proc: subprocess.Popen) -> None:
    """End a job that failed to finish: SIGTERM to mpiexec (which ends its
    ranks and removes their segments), then SIGKILL to whatever of the job
    is left, by pid; then remove the /dev/shm segments its ranks had mapped."""
    pids = _tree(proc.pid)
    segments = _shm_mapped(pids)
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
    for pid in [proc.pid, *pids]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    deadline = time.monotonic() + 5
    while any(os.path.exists(f"/proc/{pid}") for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for path in segments:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


_IS_OPEN_MPI: list[bool] = []


def _launch(n: int, out_dir) -> tuple[dict[int, dict], str]:
    """Run the rank program on ``n`` ranks; returns ``({rank: report}, output)``."""
    mpiexec = _mpiexec()
    if not _IS_OPEN_MPI:
        version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=60)
        _IS_OPEN_MPI.append("Open MPI" in version.stdout + version.stderr)
    extra = ["--oversubscribe"] if _IS_OPEN_MPI[0] else []  # more ranks than cores
    from simdist.mpi._driver import session_tmpdir

    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "TMPDIR": session_tmpdir()}  # no stale session files of a killed job in the way
    cmd = [mpiexec, *extra, "-n", str(n), sys.executable, "-m", "mpi4py", os.path.abspath(__file__), str(out_dir)]
    with open(os.path.join(out_dir, "output.txt"), "w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        try:
            proc.wait(LAUNCH_TIMEOUT)
        except BaseException:
            _stop(proc)
            raise
        finally:
            shutil.rmtree(env["TMPDIR"], ignore_errors=True)
        log.seek(0)
        output = f"$ {' '.join(cmd)}\n(exit status {proc.returncode})\n{log.read()}"
    reports = {}
    for rank in range(n):
        path = os.path.join(out_dir, f"rank{rank}.json")
        if os.path.exists(path):
            with open(path) as fh:
                reports[rank] = json.load(fh)
    return reports, output


_JOBS: dict[int, tuple[dict, str]] = {}


def verdicts(n: int, group: str, tmp_path_factory) -> None:
    """Assert that every rank of the ``n``-rank job checked ``group`` and
    found nothing wrong. The job runs once, inside the first test that needs
    it (so the leak guard of conftest.py watches it)."""
    if n not in _JOBS:
        try:
            _JOBS[n] = _launch(n, tmp_path_factory.mktemp(f"mpi{n}"))
        except subprocess.TimeoutExpired:
            _JOBS[n] = ({}, f"mpiexec -n {n} did not finish within {LAUNCH_TIMEOUT:g} s")
    reports, output = _JOBS[n]
    missing = [r for r in range(n) if group not in reports.get(r, {})]
    if missing:
        pytest.fail(f"ranks {missing} of the {n}-rank job did not report {group!r}:\n{output[-6000:]}", pytrace=False)
    failed = {r: reports[r][group]["failures"] for r in range(n) if reports[r][group]["failures"]}
    if failed:
        lines = [f"rank {r}: {f}" for r, fs in failed.items() for f in fs]
        pytest.fail(f"{group} on {n} ranks:\n" + "\n".join(lines), pytrace=False)
    assert all(reports[r][group]["checks"] > 0 for r in range(n)), f"{group}: a rank made no checks"


#: Every size in the full suite; the fast tier starts only the 2-rank job.
size_two_fast = pytest.mark.parametrize(
    "n", [n if n == 2 else pytest.param(n, marks=pytest.mark.slow) for n in SIZES], ids=lambda n: f"{n}ranks")


@pytest.mark.slow
@size_two_fast
def test_allreduce_equals_the_left_fold_for_every_dtype_op_shape_and_layout(n, tmp_path_factory):
    verdicts(n, "allreduce", tmp_path_factory)


@size_two_fast
def test_reduce_gives_the_fold_on_root_and_none_elsewhere(n, tmp_path_factory):
    verdicts(n, "reduce", tmp_path_factory)


@size_two_fast
def test_reduce_scatter_gives_each_rank_the_fold_of_its_block(n, tmp_path_factory):
    verdicts(n, "reduce_scatter", tmp_path_factory)


@size_two_fast
def test_broadcast_copies_roots_array_to_non_roots_passing_none(n, tmp_path_factory):
    verdicts(n, "broadcast", tmp_path_factory)


@size_two_fast
def test_scatter_gives_rank_r_block_r_of_roots_array(n, tmp_path_factory):
    verdicts(n, "scatter", tmp_path_factory)


@size_two_fast
def test_allgather_stacks_every_rank_in_rank_order(n, tmp_path_factory):
    verdicts(n, "allgather", tmp_path_factory)


@size_two_fast
def test_gather_stacks_on_root_and_gives_none_elsewhere(n, tmp_path_factory):
    verdicts(n, "gather", tmp_path_factory)


@size_two_fast
def test_alltoall_transposes_blocks_and_twice_is_the_identity(n, tmp_path_factory):
    verdicts(n, "alltoall", tmp_path_factory)


@size_two_fast
def test_send_recv_keeps_order_per_source_and_tag(n, tmp_path_factory):
    if n == 1:
        pytest.skip("send/recv needs two ranks (the contract says nothing of sending to oneself)")
    verdicts(n, "send_recv", tmp_path_factory)


@size_two_fast
def test_split_orders_by_key_gives_none_for_no_color_and_free_releases(n, tmp_path_factory):
    verdicts(n, "split", tmp_path_factory)


@size_two_fast
def test_barrier_returns_none(n, tmp_path_factory):
    verdicts(n, "barrier", tmp_path_factory)


@size_two_fast
def test_float_results_agree_across_ranks_and_stay_within_the_bound(n, tmp_path_factory):
    verdicts(n, "float_agreement", tmp_path_factory)


@size_two_fast
def test_bad_arguments_raise_the_simulators_errors_on_every_rank(n, tmp_path_factory):
    verdicts(n, "argument_errors", tmp_path_factory)


@size_two_fast
def test_a_dtype_the_library_cannot_carry_raises_invalid_type_naming_the_backend(n, tmp_path_factory):
    verdicts(n, "unsupported_dtype", tmp_path_factory)


@size_two_fast
def test_world_and_constructor(n, tmp_path_factory):
    verdicts(n, "construction", tmp_path_factory)


if __name__ == "__main__":
    rank_main(sys.argv[1])
