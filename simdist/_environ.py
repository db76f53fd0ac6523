"""Setting environment variables for a block, and putting them back after."""

from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def patched(env: dict[str, str]):
    """``os.environ`` holds ``env`` while the block runs; afterwards each of
    its names has its old value again, or is unset if it had none."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
