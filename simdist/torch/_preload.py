"""torch imported once by ``simdist run``, before it starts the ranks.

Importing torch takes seconds of CPU, and every rank of a simulated world
is a process forked from the driver: a script that imports torch would pay
for it on every rank, N imports sharing the machine's cores. When the
script's own file imports torch, the driver imports ``torch.distributed``
first and the ranks inherit it (their memory shares its pages, too).

torch fixes some settings from the environment as it loads: its thread
count (OpenMP reads ``OMP_NUM_THREADS`` then). So the driver imports it
under the variables torchrun's environment gives every rank (one thread a
rank, ``_launch.torchrun_env``), and leaves alone a script that touches
its environment before its first import of torch: that script imports
torch itself, after its own settings, as under torchrun.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys

from .._environ import patched


def _first_torch_import(tree: ast.Module) -> int | None:
    """The line of the file's first ``import torch...`` or ``from torch... import``."""
    lines = [node.lineno for node in ast.walk(tree)
             if isinstance(node, ast.Import) and any(a.name.partition(".")[0] == "torch" for a in node.names)
             or isinstance(node, ast.ImportFrom) and not node.level
             and (node.module or "").partition(".")[0] == "torch"]
    return min(lines, default=None)


def _sets_environment_before(tree: ast.Module, line: int) -> bool:
    """Whether the file names ``environ`` or ``putenv`` above ``line``."""
    return any(node.lineno < line for node in ast.walk(tree)
               if isinstance(node, ast.Name) and node.id in ("environ", "putenv")
               or isinstance(node, ast.Attribute) and node.attr in ("environ", "putenv"))


def wanted(script: str) -> bool:
    """Whether the driver should import torch for ``script`` (a path):
    its file imports torch, touches no environment before that, and
    torch is installed and not imported yet."""
    if "torch" in sys.modules:
        return False
    try:
        with open(script, "rb") as source:
            tree = ast.parse(source.read(), script)
    except (OSError, SyntaxError, ValueError):
        return False  # the rank reports what is wrong with the file
    line = _first_torch_import(tree)
    if line is None or _sets_environment_before(tree, line):
        return False
    return importlib.util.find_spec("torch") is not None


def preload(script: str, size: int) -> None:
    """Import ``torch.distributed`` here, as the ranks of a world of
    ``size`` would, if ``script`` imports torch (``wanted``). A failing
    import is left for the ranks to meet and report."""
    if not wanted(script):
        return
    from ._launch import RANK_KEYS, torchrun_env

    shared = {k: v for k, v in torchrun_env(0, size).items() if k not in RANK_KEYS and k not in os.environ}
    try:
        with patched(shared):
            import torch.distributed  # noqa: F401
    except Exception:  # noqa: BLE001 -- the ranks import it again and report it
        for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
            del sys.modules[name]
