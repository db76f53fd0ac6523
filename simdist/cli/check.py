"""``simdist check``."""

from __future__ import annotations

from .._check_cli import add_parser, run

__all__ = ["add_parser", "run"]
