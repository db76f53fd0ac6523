"""``simdist scale``."""

from __future__ import annotations

from .._scale import add_parser, run

__all__ = ["add_parser", "run"]
