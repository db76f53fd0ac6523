"""What every rank of a sweep runs: the factory's communicator, each case's
call, and the contract checks that only the rank can make.

Besides the values, the contract says inputs are untouched (their bytes
before and after the call) and results are writeable, share no memory with
the input, and are not changed by later calls (a result that is a view of a
backend's buffer is overwritten by the next call: every result's digest is
taken right after its call and again at the end of the run). A call that
raises ``InvalidArgument`` saying "not supported" ends the row on that rank.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import time
import traceback
from typing import Callable

import numpy as np

from .._errors import InvalidArgument, InvalidType, InvalidValue
from .._frames import where_raised
from ._cases import Case, Row, case_input, describe_case, messages

__all__ = ["load_factory", "CaseError", "identify", "rank_main", "target_of", "unsupported"]

_BARRIER_LATE = 0.003  # seconds the late rank of a barrier case sleeps


class CaseError(Exception):
    """A rank's call raised: carries the row, the case (its index and its
    description) and the error, so the driver knows which case failed."""

    def __init__(self, rank: int, rid: int, index: int, case: str, error: str):
        self.rank, self.rid, self.index, self.case, self.error = rank, rid, index, case, error
        super().__init__(f"rank {rank}: {case}: {error}")

    def __reduce__(self):
        return type(self), (self.rank, self.rid, self.index, self.case, self.error)


def load_factory(spec: str) -> Callable:
    """The callable named by ``spec`` = ``"module:callable"`` (the part after
    the colon may be dotted: ``"pkg.mod:Class.create"``)."""
    if not isinstance(spec, str):
        raise InvalidType(f"factory={spec!r} must be a str 'module:callable', e.g. 'mybackend:make_comm'")
    module, sep, attr = spec.partition(":")
    if not (sep and module and attr):
        raise InvalidValue(f"factory={spec!r} must be 'module:callable', e.g. 'mybackend:make_comm'")
    try:
        obj = importlib.import_module(module)
    except Exception as exc:
        missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
        if missing and (module + ".").startswith(missing + "."):  # the module (or its package) is not found
            raise InvalidValue(
                f"factory={spec!r}: cannot import module {module!r} ({exc}); run from the directory that holds "
                f"it, add that directory to PYTHONPATH, or install it"
            ) from None
        # found, but its own code failed: say what and where, in the user's file
        where = "" if isinstance(exc, SyntaxError) else f" at {where_raised(exc) or '?'}"
        raise InvalidValue(f"factory={spec!r}: importing module {module!r} raised "
                           f"{type(exc).__name__}: {exc}{where}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidValue(f"factory={spec!r}: {module}:{attr} has no attribute {part!r}") from None
    if not callable(obj):
        raise InvalidType(f"factory={spec!r}: {module}:{attr} is a {type(obj).__name__}, not a callable")
    return obj


def target_of(comm, factory: str | None):
    """What ``factory`` makes of the rank's ``comm``; a torch process group
    it returns is checked through the contract (``TorchCommunicator``)."""
    if factory is None:
        return comm
    made = load_factory(factory)(comm)
    dist = sys.modules.get("torch.distributed")
    if dist is not None and isinstance(made, dist.ProcessGroup):
        from simdist.torch._contract import TorchCommunicator

        return TorchCommunicator(comm, made)
    return made


def identify(comm, factory: str | None):
    target = target_of(comm, factory)
    return comm.rank, comm.size, target.rank, target.size, type(target).__name__


def _digest(a) -> bytes | None:
    if not isinstance(a, np.ndarray):
        return None
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).digest()


def _call(target, collective: str, x, op, root):
    if collective == "allreduce":
        return target.allreduce(x, op=op)
    if collective == "reduce":
        return target.reduce(x, root=root, op=op)
    if collective == "reduce_scatter":
        return target.reduce_scatter(x, op=op)
    if collective == "broadcast":
        return target.broadcast(x, root=root)
    if collective == "gather":
        return target.gather(x, root=root)
    if collective == "scatter":
        return target.scatter(x, root=root)
    return getattr(target, collective)(x)  # allgather, alltoall


def _send_recv(target, sent: list, case: Case, rank: int, n: int, sync: bool) -> list:
    """Rank r sends ``sent`` to r+1 and receives from r-1; for large
    messages, and for all under synchronous sends, even ranks send first and
    odd ranks receive first, so no cycle of blocked sends can form. With
    buffered sends the receiver takes the later tag first (recv selects by
    tag); a synchronous sender waits for each message to be taken, so there
    the receiver takes them in the order sent. Returns what it received, in
    the order sent."""
    dest, source = (rank + 1) % n, (rank - 1) % n
    got: list = [None] * len(sent)

    def receive():
        if len(sent) == 3 and not sync:
            got[2] = target.recv(source, tag=7)  # a later tag first: recv selects by tag
        got[0] = target.recv(source, tag=0)
        got[1] = target.recv(source, tag=0)
        if len(sent) == 3 and sync:
            got[2] = target.recv(source, tag=7)

    receive_first = (case.shape == "large" or sync) and rank % 2 == 1
    if receive_first:
        receive()
    for tag, x in sent:
        target.send(x, dest, tag=tag)
    if not receive_first:
        receive()
    return got


def unsupported(exc: BaseException) -> bool:
    """Whether ``exc`` is a backend's refusal: ``InvalidArgument`` saying "not supported"."""
    return isinstance(exc, InvalidArgument) and "not supported" in str(exc).lower()


def _run_case(target, row: Row, case: Case, rank: int, n: int, seed: int, sync: bool) -> list:
    """One call; returns ``[result, input modified, aliases input, read-only, digest]``."""
    if row.collective == "barrier":
        if rank == case.root:
            time.sleep(_BARRIER_LATE)
        entered = time.monotonic()
        value = target.barrier()
        return [(entered, time.monotonic(), None if value is None else type(value).__name__), False, False, False, None]
    if row.collective == "send_recv":
        sent = messages(row, case, rank, n, seed)
        before = [x.tobytes() for _, x in sent]
        got = _send_recv(target, sent, case, rank, n, sync)
        modified = any(x.tobytes() != b for (_, x), b in zip(sent, before))
        readonly = any(isinstance(g, np.ndarray) and not g.flags.writeable for g in got)
        return [got, modified, False, readonly, [_digest(g) for g in got]]
    x = case_input(row, case, rank, n, seed)
    before = None if x is None else x.tobytes()
    out = _call(target, row.collective, x, row.op, case.root)
    modified = x is not None and x.tobytes() != before
    array = isinstance(out, np.ndarray)
    aliases = array and x is not None and np.may_share_memory(out, x)
    readonly = array and not out.flags.writeable
    return [out, modified, aliases, readonly, _digest(out)]


def rank_main(comm, factory: str | None, rows: list[Row], n: int, seed: int, sync: bool = False):
    """Run ``rows`` on this rank; per row, a list of case entries:
    ``["ok", result, modified, aliases, readonly, changed]`` or
    ``["unsupported", message]``. ``sync``: the world's sends are synchronous."""
    target = target_of(comm, factory)
    rank = comm.rank
    out = []
    for row in rows:
        entries = []
        for case in row.cases:
            try:
                entry = _run_case(target, row, case, rank, n, seed, sync)
            except Exception as exc:
                if unsupported(exc):
                    entries.append(["unsupported", f"{type(exc).__name__}: {exc}"])
                    break
                lines = traceback.format_exception_only(type(exc), exc)
                error = "".join(lines).strip() + f" (raised at {where_raised(exc)})"
                raise CaseError(rank, row.rid, case.index, f"{row.label}, {describe_case(row, case, n)}",
                                error) from None
            entries.append(["ok", *entry])
        out.append(entries)
    for entries in out:  # results must not change when later calls run
        for entry in entries:
            if entry[0] == "ok":
                result, digest = entry[1], entry[5]
                if isinstance(result, list):
                    entry[5] = any(_digest(r) != d for r, d in zip(result, digest))
                else:
                    entry[5] = digest is not None and _digest(result) != digest
    return out

