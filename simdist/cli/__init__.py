"""The ``simdist`` command line: a thin layer over the library.

Each command is a module of this package (``COMMANDS``) with two
functions: ``add_parser(subparsers)``, which adds its subparser (name, help,
options), and ``run(args) -> int``, which returns the exit status. A command calls library functions
that return data, and prints them, or writes them as JSON (``_json``), at
this edge. ``main(argv)`` parses and dispatches; it is what the ``simdist``
script runs, and tests call it without a subprocess.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: The commands, in the order ``simdist --help`` lists them.
COMMANDS = ("demo", "run", "check", "train", "bench", "scale")


def _command(name: str):
    return importlib.import_module(f"{__name__}.{name}")


def parser() -> argparse.ArgumentParser:
    """The parser of every command (each subparser knows its module)."""
    top = argparse.ArgumentParser(prog="simdist", description="Simulated distributed worlds with deterministic collectives.")
    sub = top.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        module = _command(name)
        command = module.add_parser(sub)
        command.set_defaults(module=module, parser=command)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    top = parser()
    module = _command(argv[0]) if argv and argv[0] in COMMANDS else None
    if module is not None and hasattr(module, "parse"):  # a command that splits its own argv (run)
        args = module.parse(top, argv)
    else:
        args = top.parse_args(argv)
    return args.module.run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
