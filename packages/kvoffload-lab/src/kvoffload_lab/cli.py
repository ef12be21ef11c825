"""The ``kvoffload`` command: one subcommand per module of ``kvoffload_lab.commands``.

Each command module defines ``add_parser(subparsers)``, which registers its parser and sets
``func`` (``args -> exit status``). Modules are imported here, but each imports its heavy
dependencies (torch, the checkers) only when it runs, so ``kvoffload --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kvoffload_lab.commands.errors import CommandError

__all__ = ["COMMAND_MODULES", "CommandError", "build_parser", "main"]

# The optional extras' modules a command may need, and the requirement that installs each (numba is not
# one: the mover falls back without it): the tiers are the product's extra, the plots the lab's.
EXTRA_OF_MODULE = {"xxhash": "kvoffload[tiers]", "redis": "kvoffload[tiers]", "hiredis": "kvoffload[tiers]",
                   "matplotlib": "kvoffload-lab[plot]"}

COMMAND_MODULES: tuple[str, ...] = (
    "simulate",
    "bench",
    "tla",
    "explore",
    "mutants",
    "trace",
    "diagram",
    "replay",
    "vllm",
    "link",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvoffload",
        description="KV-cache offloading with a declared, model-checked request lifecycle.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"kvoffload_lab.commands.{name}")
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except CommandError as error:
        print(f"kvoffload {args.command}: error: {error}", file=sys.stderr)
        return error.status
    except ModuleNotFoundError as error:
        extra = EXTRA_OF_MODULE.get((error.name or "").partition(".")[0])
        if extra is None:
            raise
        print(f"kvoffload {args.command}: error: this needs the module {error.name!r} of the {extra} extra, "
              f"which is not installed: pip install '{extra}'", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    # Import through the package, so commands and this entry point share one CommandError class.
    from kvoffload_lab.cli import main as package_main

    sys.exit(package_main())
