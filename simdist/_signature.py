"""Call signatures: what each rank says it is calling, for mismatch checks.

A signature is a row of int64 words in the rank's context entry::

    kind, seq, op, root, dtype code, ndim, shape[0], ..., shape[ndim-1]

``ndim = -1`` (and dtype code 0) stands for "no array": a non-root passing
``None`` to broadcast or scatter. Ranks of a call compare their rows; equal
bytes mean matching calls, the common case, checked in one comparison.
When non-roots pass None, each row is compared with the root's instead
(``SimComm._root_only_match``); only a real mismatch reads every row.
"""

from __future__ import annotations

import struct

from ._arguments import DTYPES
from ._communicator import COLLECTIVES, OPS
from ._errors import CollectiveMismatch

#: The calls that sign; a kind's code is its index + 1 (0: nothing signed).
KINDS = COLLECTIVES + ("split", "free")
KIND_CODE = {k: i + 1 for i, k in enumerate(KINDS)}
# The words of a row, by index; the shape starts at HEAD_WORDS.
KIND_WORD, SEQ_WORD, OP_WORD, ROOT_WORD, DTYPE_WORD, NDIM_WORD = range(6)
HEAD_WORDS = 6
KEY_WORDS = 4  # kind, seq, op, root: what a None must share with the root's row
MAX_NDIM = 64
# Collectives where a non-root may pass None instead of root's array.
ROOT_ONLY_ARRAY = frozenset((KIND_CODE["broadcast"], KIND_CODE["scatter"]))
#: The root an alltoall of blocks of any lengths signs (``SimComm.alltoall_sized``):
#: it never meets a plain alltoall of the same bytes, and reads so in reports.
SIZED_ROOT = -2

_structs: dict[int, struct.Struct] = {}

#: The names of torch groups (``simdist.torch``): reports on one name its
#: collectives as torch.distributed does (``all_reduce``, not ``allreduce``).
TORCH_GROUP = "torch group "
_TORCH_CALLS = {"allreduce": "all_reduce", "allgather": "all_gather", "alltoall": "all_to_all"}


def call_name(kind: str, comm_name: str) -> str:
    """The name of collective ``kind`` in reports on the communicator ``comm_name``."""
    if not comm_name.startswith(TORCH_GROUP):
        return kind
    head, space, rest = kind.partition(" ")
    return _TORCH_CALLS.get(head, head) + space + rest


def packer(ndim: int) -> struct.Struct:
    s = _structs.get(ndim)
    if s is None:
        s = _structs[ndim] = struct.Struct(f"{HEAD_WORDS + max(ndim, 0)}q")
    return s


def read(buf, offset: int) -> tuple[int, ...]:
    """The signature row stored at ``offset`` (kind is 0 if none was written)."""
    head = struct.unpack_from(f"{HEAD_WORDS}q", buf, offset)
    ndim = head[5]
    if ndim <= 0:
        return head
    return head + struct.unpack_from(f"{min(ndim, MAX_NDIM)}q", buf, offset + 8 * HEAD_WORDS)


def describe(sig: tuple[int, ...], comm_name: str = "") -> str:
    """``allreduce #3 (float32 (4, 2), op=sum)``, for messages and reports
    (on a torch group, ``all_reduce #3 ...``)."""
    kind, seq, op, root, dtype, ndim = sig[:HEAD_WORDS]
    if not 0 < kind <= len(KINDS):
        return "an unknown call"
    name = call_name(KINDS[kind - 1], comm_name)
    parts = []
    if root == SIZED_ROOT:
        parts.append("blocks of any lengths")
    elif ndim >= 0:
        shape = tuple(sig[HEAD_WORDS:HEAD_WORDS + ndim])
        parts.append(f"{DTYPES[dtype - 1]} {shape}" if dtype else f"shape {shape}")
    elif kind in ROOT_ONLY_ARRAY:
        parts.append("x=None")
    if op:
        parts.append(f"op={OPS[op - 1]}")
    if root >= 0:
        parts.append(f"root={root}")
    return f"{name} #{seq}" + (f" ({', '.join(parts)})" if parts else "")


def check_match(comm_name: str, sigs: dict[int, tuple[int, ...]]) -> None:
    """Raise CollectiveMismatch unless the signatures ``{rank: sig}`` match.

    Called only when the fast byte comparison failed; it also accepts the
    legitimate differences (a non-root passing None to broadcast/scatter).
    """
    ranks = sorted(sigs)
    ref_rank = ranks[0]
    ref = sigs[ref_rank]
    if ref[0] in ROOT_ONLY_ARRAY:  # compare arrays against root's, when given
        root = ref[3]
        ref_rank = root if root in sigs and sigs[root][0] == ref[0] else ref_rank
        ref = sigs[ref_rank]
    for r in ranks:
        s = sigs[r]
        if _matches(s, ref):
            continue
        raise CollectiveMismatch(
            f"ranks of {comm_name} called collectives that do not match: "
            f"rank {ref_rank} called {describe(ref, comm_name)}, rank {r} called {describe(s, comm_name)}"
            + _hint(ref, s),
            {ref_rank: describe(ref, comm_name), r: describe(s, comm_name)},
        )


def _matches(s, ref) -> bool:
    if s[:4] != ref[:4]:  # kind, seq, op, root
        return False
    return s[4:] == ref[4:] or (s[0] in ROOT_ONLY_ARRAY and -1 in (s[5], ref[5]))


def _hint(a, b) -> str:
    if a[0] != b[0]:
        return "; every rank must call the same collectives in the same order"
    if a[1] != b[1]:
        return "; the ranks have made different numbers of calls on this communicator"
    if a[2] != b[2]:
        return "; every rank must pass the same op"
    if a[3] != b[3]:
        return "; every rank must pass the same root"
    if a[4] != b[4]:
        return "; every rank must pass the same dtype"
    return "; every rank must pass the same shape"
