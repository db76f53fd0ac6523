"""Hypothesis settings of the property suite.

``SIMDIST_PROPERTY_EXAMPLES`` sets how many examples
each property tries (default 25); ``--hypothesis-profile`` overrides it all.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "simdist-properties",
    max_examples=int(os.environ.get("SIMDIST_PROPERTY_EXAMPLES", "25")),
    deadline=None,                # a world's round trip varies with the machine's load
    print_blob=True,
    phases=[p for p in Phase if p != Phase.explain],   # explaining costs more than it tells here
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.data_too_large],
)


def pytest_configure(config):
    if not config.getoption("hypothesis_profile", None):
        settings.load_profile("simdist-properties")
