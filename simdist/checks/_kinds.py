"""The kinds of finding ``--check`` looks for, and how a LIST names them."""

from __future__ import annotations

#: Each kind, with the one line ``--help`` and docs/correctness.md give it.
KINDS = {
    "deadlock": "every live rank is blocked: the wait-for cycle, at once",
    "buffering": "a standard-mode send that completes only because MPI buffered it (run as Ssend)",
    "race": "a wildcard receive or probe whose other admissible matches change the program's result",
    "type-mismatch": "a receive whose datatype or count differs from the matched send's (truncation, reinterpretation)",
    "buffer-in-use": "the buffer of a nonblocking call written before Wait completes it",
    "read-before-wait": "a nonblocking receive's buffer read before Wait completes it (the result depends on timing)",
    "request-leak": "a request never completed (waited, tested true or freed)",
    "handle-leak": "a communicator, group, datatype, window, file or op dropped unfreed again and again",
    "handle-at-finalize": "a communicator, group, datatype, window, file or op still unfreed at MPI.Finalize",
    "unreceived": "a message sent and never received when the program ends",
    "collective-order": "ranks calling the collectives of a communicator in different orders",
    "finalize-pending": "Finalize called with requests or messages still pending",
}

#: Names that stand for several kinds.
GROUPS = {
    "all": tuple(KINDS),
    "misuse": ("type-mismatch", "buffer-in-use", "request-leak", "handle-leak", "handle-at-finalize", "unreceived",
               "collective-order", "finalize-pending"),
    "leaks": ("request-leak", "handle-leak", "handle-at-finalize", "unreceived"),
}


def parse(text: str | None) -> frozenset[str]:
    """The kinds a ``--check`` LIST names: comma-separated kinds or groups,
    ``-kind`` removing one (``all,-race``); an empty or missing LIST is
    ``all``. Raises ValueError naming an unknown name and the known ones."""
    chosen: set[str] = set()
    items = [item.strip() for item in (text or "").split(",") if item.strip()]
    if not items or items[0].startswith("-"):
        chosen.update(GROUPS["all"])
    for item in items:
        drop = item.startswith("-")
        name = item[1:] if drop else item
        if name in GROUPS:
            names = set(GROUPS[name])
        elif name in KINDS:
            names = {name}
        else:
            known = ", ".join([*GROUPS, *KINDS])
            raise ValueError(f"--check: unknown check {name!r}; known: {known}")
        if drop:
            chosen -= names
        else:
            chosen |= names
    return frozenset(chosen)
