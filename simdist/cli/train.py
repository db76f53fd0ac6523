"""``simdist train``."""

from __future__ import annotations

from .._train_cli import add_parser, run

__all__ = ["add_parser", "run"]
