"""Hypothesis settings of the property suite.

``SIMDIST_PROPERTY_EXAMPLES`` sets how many examples each unparametrised
property tries (default 25; a case of a parametrised one tries a fifth,
see ``properties._cases``); ``--hypothesis-profile`` overrides it all.
Hypothesis' database is off unless ``--simdist-explore``: the examples of a
run are then those of its command alone (``properties._seeds``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

from . import _seeds


def pytest_configure(config):
    if config.getoption("hypothesis_profile", None):
        return
    explore = _seeds.mode(config) == "explore"
    settings.register_profile(
        "simdist-properties",
        max_examples=int(os.environ.get("SIMDIST_PROPERTY_EXAMPLES", "25")),
        deadline=None,                # a world's round trip varies with the machine's load
        print_blob=True,
        derandomize=False,            # the plugin seeds each test (Hypothesis' CI profile would derandomize)
        phases=[p for p in Phase if p != Phase.explain],   # explaining costs more than it tells here
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                               HealthCheck.data_too_large],
        **({} if explore else {"database": None}),
    )
    settings.load_profile("simdist-properties")
