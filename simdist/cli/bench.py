"""``simdist bench``."""

from __future__ import annotations

from .._bench_cli import add_parser, run

__all__ = ["add_parser", "run"]
