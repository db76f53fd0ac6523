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

DistributedDataParallel, FSDP2's ``fully_shard`` and DTensor import
``torch._dynamo`` when first used: 1.7 s more of CPU on every rank. A
script that names one of them gets that module imported here too.
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


#: Names of torch's parallel APIs that import ``torch._dynamo`` when first used.
PARALLEL_NAMES = frozenset({"DistributedDataParallel", "fully_shard", "FullyShardedDataParallel", "DTensor",
                            "distribute_tensor", "distribute_module", "parallelize_module", "init_device_mesh",
                            "DeviceMesh"})


def _names_parallel_api(tree: ast.Module) -> bool:
    """Whether the file names one of ``PARALLEL_NAMES`` (a name, an attribute or an import)."""
    return any(isinstance(node, ast.Name) and node.id in PARALLEL_NAMES
               or isinstance(node, ast.Attribute) and node.attr in PARALLEL_NAMES
               or isinstance(node, ast.alias) and node.name.rpartition(".")[2] in PARALLEL_NAMES
               for node in ast.walk(tree))


def _sets_environment_before(tree: ast.Module, line: int) -> bool:
    """Whether the file names ``environ`` or ``putenv`` above ``line``."""
    return any(node.lineno < line for node in ast.walk(tree)
               if isinstance(node, ast.Name) and node.id in ("environ", "putenv")
               or isinstance(node, ast.Attribute) and node.attr in ("environ", "putenv"))


def wanted(script: str) -> list[str]:
    """The modules the driver should import for ``script`` (a path): none
    unless its file imports torch, touches no environment before that, and
    torch is installed and not imported yet; ``torch._dynamo`` too where
    the file names a parallel API that imports it."""
    if "torch" in sys.modules:
        return []
    try:
        with open(script, "rb") as source:
            tree = ast.parse(source.read(), script)
    except (OSError, SyntaxError, ValueError):
        return []  # the rank reports what is wrong with the file
    line = _first_torch_import(tree)
    if line is None or _sets_environment_before(tree, line) or importlib.util.find_spec("torch") is None:
        return []
    return ["torch.distributed", *(["torch._dynamo"] if _names_parallel_api(tree) else [])]


def preload(script: str, size: int) -> None:
    """Import ``torch.distributed`` here, as the ranks of a world of
    ``size`` would, if ``script`` imports torch (``wanted``). A failing
    import is left for the ranks to meet and report."""
    modules = wanted(script)
    if not modules:
        return
    from ._launch import RANK_KEYS, torchrun_env

    shared = {k: v for k, v in torchrun_env(0, size).items() if k not in RANK_KEYS and k not in os.environ}
    torch_itself, *more = modules
    with patched(shared):
        try:
            importlib.import_module(torch_itself)
        except Exception:  # noqa: BLE001 -- the ranks import it again and report it
            for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
                del sys.modules[name]
            return
        for name in more:
            import_quietly(name)


def import_quietly(name: str) -> None:
    """Import ``name`` for the ranks to inherit; where that fails they import it themselves (and report)."""
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001
        pass
