"""How a session's Hypothesis examples are seeded: the same examples for the
same command, unless random exploration is asked for.

Three modes, for the tests that use the plugin's ``world`` or ``comm``:

* ``derived`` (the default, and always when ``CI`` is set): each test's seed
  is derived from its id (file name, test name and parameters, without the
  backend and size), so a run's examples depend only on the command, and a
  test keeps its examples when others are added, selected or deselected;
* ``given``: ``--hypothesis-seed=S`` seeds every test with ``S``
  (Hypothesis' own option);
* ``explore``: ``--simdist-explore`` draws a fresh seed for the session (shown
  in the header and the summary); ignored when ``CI`` is set.

Either way a failing test's "simdist replay" section names its seed and the
command that runs exactly its examples again (``--hypothesis-seed=S`` and
the test's id).

In every mode the tests draw without Hypothesis' local constants
(:func:`without_local_constants`): a seed alone then fixes the examples.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random

__all__ = ["mode", "start", "seed_for", "seeded", "without_local_constants", "own_name", "in_ci"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def mode(config) -> str:
    """``derived``, ``given`` or ``explore`` (see the module docstring)."""
    if config.getoption("hypothesis_seed", None) is not None:
        return "given"
    if config.getoption("simdist_explore") and not in_ci():
        return "explore"
    return "derived"


def start(config) -> None:
    """Give an exploring session its random seed."""
    from hypothesis import core

    if mode(config) == "explore" and core.global_force_seed is None:
        core.global_force_seed = random.SystemRandom().randrange(2**32)


def own_name(item) -> str:
    """``item``'s name without the backend and size parameters the plugin
    adds (``test_x[allreduce-sum]``): what selects it in a one-backend,
    one-size run."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return item.name
    parts = callspec.id.split("-")
    for added in (callspec.params.get("simdist_backend_spec"), _size_id(callspec.params.get("simdist_size"))):
        if added is not None:  # an id of its own may hold dashes (torch-gloo)
            parts = _without_run(parts, added.split("-"))
    return f"{item.originalname}[{'-'.join(parts)}]" if parts else item.originalname


def _without_run(parts: list[str], run: list[str]) -> list[str]:
    """``parts`` without the first run of consecutive parts equal to ``run``."""
    for start in range(len(parts) - len(run) + 1):
        if parts[start:start + len(run)] == run:
            return parts[:start] + parts[start + len(run):]
    return parts


def _size_id(size) -> str | None:
    return None if size is None else f"np{size}"


def seed_for(item):
    """The seed ``item``'s examples are drawn with."""
    from hypothesis import core

    if mode(item.config) != "derived":
        return core.global_force_seed
    digest = hashlib.sha256(f"{item.path.name}::{own_name(item)}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


@contextlib.contextmanager
def seeded(item):
    """Run ``item`` with its derived seed (in the other modes the seed is
    already set) and without local constants."""
    from hypothesis import core

    saved = core.global_force_seed
    if mode(item.config) == "derived":
        core.global_force_seed = seed_for(item)
    try:
        with without_local_constants():
            yield
    finally:
        core.global_force_seed = saved


@contextlib.contextmanager
def without_local_constants():
    """Keep Hypothesis from drawing constants found in the source of the
    imported modules that are not installed packages.

    Now and then Hypothesis draws such a constant instead of a random
    value. Which constants exist depends on what the process has imported,
    and on a cache in ``.hypothesis/constants`` that one process may read
    while another is still writing it. Under ``mpiexec`` every rank draws
    its own examples, so with the same seed two ranks could draw different
    data and make different calls. A run alone (``-k``) could also draw
    other examples than the whole suite. Hypothesis versions without the
    feature need nothing.
    """
    try:
        from hypothesis.internal.conjecture import providers
        local, cache = providers._get_local_constants, providers.CONSTANTS_CACHE.cache
        none = providers.Constants()
    except (ImportError, AttributeError):
        yield
        return
    cache.clear()  # pools already built with the local constants
    providers._get_local_constants = lambda: none
    try:
        yield
    finally:
        providers._get_local_constants = local
        cache.clear()
