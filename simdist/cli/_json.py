"""Reports as strict JSON, at the command line's edge.

Every command that prints a report can also write it as JSON (``--json
FILE``, or ``-`` for standard output). Reports hold floats such as ``inf``
and ``nan`` (a failed bit-for-bit check, a diverged loss), which strict JSON
has no words for; they are written as the strings ``"inf"`` and ``"nan"``, as
:meth:`simdist.reference.Verdict.to_dict` does.
"""

from __future__ import annotations

import json
import math

__all__ = ["jsonable", "dumps", "write"]


def jsonable(value):
    """``value`` with every non-finite float replaced by its string."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def dumps(report) -> str:
    return json.dumps(jsonable(report), indent=2, allow_nan=False)


def write(report, target: str) -> None:
    """Write ``report`` to the file ``target``, or to standard output for ``-``."""
    data = dumps(report)
    if target == "-":
        print(data)
    else:
        with open(target, "w") as fh:
            fh.write(data + "\n")
