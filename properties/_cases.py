"""How the suite is cut into cases, and which cases a session runs.

A property that holds for several collectives (or ops) is parametrised by
them, so every collective gets its own examples: a backend that implements
one collective is tested on it with full power, and a user selects a case
with ``-k`` (``test_inputs_are_never_modified[allreduce-sum]``). Each case
tries a fifth of the examples of an unparametrised property (at least 2):
one collective and op then gets many times the share it had when one
property drew them all at random, at a few times the suite's time.

The *focus* narrows a session to some collectives, ops and dtypes
(``--simdist-collectives``, ``--simdist-ops``, ``--simdist-dtypes``, and
what a factory's ``implements`` says): the plugin deselects the cases
outside it, reading a case's collective and op from its parameters
``collective`` and ``op`` or its markers ``simdist_collectives(*names)`` and
``simdist_ops(*names)``; the strategies draw only dtypes and ops inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import settings

from simdist._communicator import COLLECTIVES, REDUCTIONS
from simdist.reference._focus import OPS, select_collectives, select_dtypes, select_ops

__all__ = ["Focus", "focus", "set_focus", "cases", "by_op", "per_case", "wanted"]

#: (collective, op) of every case of a property that holds for every
#: collective: each reduction with each op, each other collective once.
CASES = tuple([(c, op) for c in REDUCTIONS for op in OPS] + [(c, None) for c in COLLECTIVES
                                                               if c not in REDUCTIONS and c != "barrier"])


@dataclass(frozen=True)
class Focus:
    """The collectives, ops and dtypes a session tests (all by default)."""

    collectives: tuple = select_collectives(None)
    ops: tuple = OPS
    dtypes: tuple = select_dtypes(None)

    @classmethod
    def from_options(cls, collectives: str | None, ops: str | None, dtypes: str | None) -> Focus:
        def names(text):
            return None if text is None else [t.strip() for t in text.split(",") if t.strip()]

        return cls(select_collectives(names(collectives), "--simdist-collectives"),
                   select_ops(names(ops), "--simdist-ops"), select_dtypes(names(dtypes), "--simdist-dtypes"))


_FOCUS = [Focus()]


def focus() -> Focus:
    """This session's focus."""
    return _FOCUS[0]


def set_focus(new: Focus) -> None:
    _FOCUS[0] = new


def _id(case) -> str:
    collective, op = case
    return collective if op is None else f"{collective}-{op}"


def cases(collectives=None):
    """Parametrise a property by ``collective`` and ``op``: every case of
    :data:`CASES` (or of those ``collectives``)."""
    chosen = [case for case in CASES if collectives is None or case[0] in collectives]
    return pytest.mark.parametrize("collective, op", chosen, ids=[_id(c) for c in chosen])


def by_op(ops=OPS):
    """Parametrise a property by ``op``."""
    return pytest.mark.parametrize("op", ops)


def per_case(test):
    """The examples of one case: a fifth of the profile's, at least 2."""
    return settings(max_examples=max(2, settings.default.max_examples // 5))(test)


def wanted(item, collectives: tuple) -> bool:
    """Whether ``item`` lies in the focus, ``collectives`` being the
    collectives its backend is tested on."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    used = _named(item, "collective", "simdist_collectives")
    if used and not set(used) & set(collectives):
        return False
    ops = [op for op in _named(item, "op", "simdist_ops") if op is not None]
    if ops and not set(ops) <= set(focus().ops):  # every op it calls: the backend may lack the others
        return False
    dtype = params.get("dtype")
    return dtype is None or np.dtype(dtype) in focus().dtypes


def _named(item, param: str, marker: str) -> list:
    params = getattr(getattr(item, "callspec", None), "params", {})
    if param in params:
        return [params[param]]
    mark = item.get_closest_marker(marker)
    return list(mark.args) if mark else []
