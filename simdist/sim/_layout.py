"""The arena's layout: where each region, entry and word lies, and their names.

``Layout`` is the arithmetic of the segment that ``_arena``'s design note
draws (header, sleeping flags, status entries, the reserved context entries,
the p2p index, the sparse context entries, the rings, the slots): sizes and
byte offsets, and int64 word indexes into ``Arena.q``. The constants name
the words inside an entry (``H_*`` in the header, ``S_*`` in a rank's status
entry, ``E_*`` in the first line of a context entry, ``R_*`` in a pair's
line of the p2p index) and the values some of them hold (rank states, abort
reasons). Nothing here maps memory or keeps state, so the driver's reports,
the protocol and the tests share it.
"""

from __future__ import annotations

MAGIC = 0x5349_4D44_4953_5431  # "SIMDIST1"
LINE = 64
HEADER = 4096
# a rank's status words (128 bytes), the text of its call site (384), of its
# MPI call (128), then a line whose first word only the driver writes (S_RELEASE)
STATUS = 704
SIG_BYTES = 576  # the call's first epoch, then kind, seq, op, root, dtype, ndim and up to 64 dimensions

# header words (int64 index); SYNC_SENDS: 1 if every ``send`` waits for its ``recv``;
# UNIVERSE_SIZE: what MPI.UNIVERSE_SIZE answers (0: the arena's slots)
H_MAGIC, H_SIZE, H_ABORT, H_SYNC_SENDS, H_UNIVERSE_SIZE = 0, 1, 2, 3, 4

# status words, relative to a rank's status entry (int64 index)
S_STATE, S_PROGRESS, S_CTX, S_WAITING_FOR = 0, 1, 2, 4  # WAITING_FOR: rank + 1, 0 if none
# MPI_PEER: while a progress engine over the transport (the mpi4py stand-in)
# waits in it, the MPI-level peer its call waits for: world rank + 1, or
# MPI_ANY_PEER; 0 when it states none. The text of that MPI call is at
# ``Layout.mpi_call_offset`` (up to MPI_CALL_BYTES, NUL-padded), written first.
# MPI_RELEASABLE is 1 when the engine can complete the stated call's sends
# as buffered (they run synchronous only for the buffering check): the
# driver, finding such a rank in a deadlock, adds 1 to its RELEASE word, which
# ends the rank's blocking probe (``Transport.waiting_in``).
S_MPI_PEER, S_MPI_RELEASABLE, S_RELEASE = 3, 11, 80
# PID: in a hosted world (``_hosted``), the process id of the rank, written when it joins.
S_PID = 81
# POLLS: how many times the rank has looked for mail without waiting (a
# non-blocking probe, an engine's progress over the transport): a rank that
# polls waits in disguise, so the hang watch does not take the CPU it uses
# then for computing.
S_POLLS = 82
MPI_ANY_PEER = -1
MPI_CALL_BYTES = 128
S_P2P_KIND, S_P2P_PEER, S_P2P_TAG, S_P2P_NBYTES, S_P2P_SEQ = 5, 6, 7, 9, 10
S_BELL = 8  # int64 word whose low 32 bits are the futex word
# A rank asleep in a wait (``Arena._sleep_until``): BLOCKED is odd while it
# sleeps, with the condition it waits for, BLOCK_WORD >= BLOCK_TARGET (a
# BLOCK_WORD of -1: the sum of the heads of every ring into the rank above
# BLOCK_TARGET). SITE_FOR is the rank's S_PROGRESS + 1 when the text at
# S_SITE (up to SITE_BYTES, NUL-padded) is the call site of its current call
# (``/abs/path/file.py:line``, or ``file.py:line`` if the path is too long).
S_BLOCKED, S_BLOCK_WORD, S_BLOCK_TARGET, S_SITE_FOR, S_SITE = 12, 13, 14, 15, 16
SITE_BYTES = 384
ANY_RING = -1  # the S_BLOCK_WORD of a wait for a record in any ring into the rank

#: Contexts per rank: context 0 is the world's, each live sub-communicator
#: holds one of the others (``SimComm.split``). A multiple of 64 (a word of
#: the free-context bitmap), at most 2048 so that a message key (``message_context``)
#: keeps bits 58-61 clear for the simulated mpi4py.
CONTEXTS = 2048
#: The first contexts, whose entries are reserved when the world starts;
#: a rank reserves its entry of a later one when it first takes it.
RESERVED_CONTEXTS = 64
#: The words of a member's row in ``SimComm.split`` before its free-context
#: bitmap, which an arrive epoch per context follows: the row fits in a slot,
#: so a world whose slots have 16 KiB or less has fewer contexts (448 with
#: the smallest, 4 KiB).
SPLIT_HEAD_WORDS = 3

# words of a context entry's first line, relative to the entry's first word
E_ARRIVE, E_DONE = 0, 1

# words of a pair's line in the p2p index, relative to the line's first word
R_HEAD, R_TAIL = 0, 1  # the sender's and the receiver's byte counts
R_MATCHED = 2  # the receiver's count of synchronous messages its recv took

# rank states; SPARE: a slot of the universe that runs no process of the run
# (yet, or any more): it can start only when a running rank spawns it
IDLE, USER, CALL, RETURNED, FAILED, SPARE = 0, 1, 2, 3, 4, 5

# abort reasons (header word H_ABORT)
ABORT_NONE, ABORT_PEER_FAILED, ABORT_DRIVER = 0, 1, 2


def _align(n: int, to: int = LINE) -> int:
    return (n + to - 1) // to * to


class Layout:
    """Sizes and offsets of an arena for ``size`` ranks."""

    def __init__(self, size: int, slot_bytes: int | None = None, ring_bytes: int | None = None,
                 contexts: int = CONTEXTS, ranks: int | None = None):
        if not (64 <= contexts <= CONTEXTS and contexts % 64 == 0):
            raise ValueError(f"contexts={contexts}: a multiple of 64 from 64 to {CONTEXTS}")
        self.size = size
        # The sizes below are chosen for the ``ranks`` a world starts with;
        # its spare slots (size - ranks, for Spawn) take the same, and cost
        # no memory until a process runs there.
        self.ranks = ranks = ranks or size
        if slot_bytes is None:  # 8 MiB per rank up to 16 ranks, then 128 MiB in all
            slot_bytes = max(256 << 10, min(8 << 20, (128 << 20) // ranks))
        if ring_bytes is None:
            ring_bytes = max(8 << 10, min(1 << 20, (64 << 20) // (ranks * ranks)))
        self.slot_bytes = _align(slot_bytes, 4096)
        while SPLIT_HEAD_WORDS + contexts // 64 + contexts > self.slot_bytes // 8:
            contexts -= 64
        self.contexts = contexts
        self.reserved_contexts = reserved = min(RESERVED_CONTEXTS, contexts)
        self.ring_bytes = _align(ring_bytes, 4096)
        # The payload a one-phase call carries in a bank: 3520 bytes up to 16
        # ranks (a 4 KiB bank), 448 beyond (1 KiB), so that the contexts of
        # 256 ranks take 37 MiB, not 130.
        self.inline_bytes = 3520 if ranks <= 16 else 448
        self.bank = SIG_BYTES + self.inline_bytes
        self.entry = LINE + 2 * self.bank  # the arrive/done line, then two banks
        self.sleeping = HEADER
        self.status = _align(self.sleeping + size * 8, 4096)
        self.ctx = _align(self.status + size * STATUS, 4096)
        self.p2p_index = _align(self.ctx + size * reserved * self.entry, 4096)
        # The entries of the other contexts, sparse until used (``Arena``).
        self.ctx_sparse = _align(self.p2p_index + size * size * LINE, 4096)
        self.rings = _align(self.ctx_sparse + size * (contexts - reserved) * self.entry, 4096)
        self.slots = _align(self.rings + size * size * self.ring_bytes, 4096)
        self.total = self.slots + size * self.slot_bytes

    def arguments(self) -> dict:
        """What ``Layout(**arguments)`` takes to rebuild this layout in another process."""
        return {"size": self.size, "slot_bytes": self.slot_bytes, "ring_bytes": self.ring_bytes,
                "contexts": self.contexts, "ranks": self.ranks}

    # word (int64) indexes
    def status_word(self, rank: int, word: int) -> int:
        return (self.status + rank * STATUS) // 8 + word

    def entry_word(self, rank: int, ctx: int) -> int:
        """The first word of ``rank``'s entry for context ``ctx``."""
        return self.entry_offset(rank, ctx) // 8

    def entry_offset(self, rank: int, ctx: int) -> int:
        """The byte offset of ``rank``'s entry for context ``ctx``: a rank's
        entries lie side by side, the reserved ones in one region, the
        others in the sparse one."""
        reserved = self.reserved_contexts
        if ctx < reserved:
            return self.ctx + (rank * reserved + ctx) * self.entry
        return self.ctx_sparse + (rank * (self.contexts - reserved) + ctx - reserved) * self.entry

    def arrive_word(self, rank: int, ctx: int) -> int:
        return self.entry_word(rank, ctx) + E_ARRIVE

    def done_word(self, rank: int, ctx: int) -> int:
        return self.entry_word(rank, ctx) + E_DONE

    def sleeping_word(self, rank: int) -> int:
        return self.sleeping // 8 + rank

    def call_epoch_word(self, rank: int, ctx: int, bank: int) -> int:
        """The first epoch of the call whose signature the bank holds."""
        return self.entry_word(rank, ctx) + (LINE + bank * self.bank) // 8

    def sig_offset(self, rank: int, ctx: int, bank: int) -> int:
        return self.call_epoch_word(rank, ctx, bank) * 8 + 8

    def inline_offset(self, rank: int, ctx: int, bank: int) -> int:
        return self.call_epoch_word(rank, ctx, bank) * 8 + SIG_BYTES

    def site_offset(self, rank: int) -> int:
        """The byte offset of ``rank``'s call-site text (see ``S_SITE``)."""
        return self.status + rank * STATUS + 8 * S_SITE

    def mpi_call_offset(self, rank: int) -> int:
        """The byte offset of ``rank``'s MPI call text (see ``S_MPI_PEER``)."""
        return self.site_offset(rank) + SITE_BYTES

    def pair_word(self, src: int, dst: int) -> int:
        """The first word of the (src -> dst) ring's line in the p2p index."""
        return (self.p2p_index + (src * self.size + dst) * LINE) // 8

    def ring_offset(self, src: int, dst: int) -> int:
        return self.rings + (src * self.size + dst) * self.ring_bytes

    def slot_offset(self, rank: int) -> int:
        return self.slots + rank * self.slot_bytes
