"""``kvoffload bench NAME``: benchmarks that print one JSON object (never timed assertions)."""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from kvoffload_lab.benchmarks.errors import BenchmarkError
from kvoffload_lab.commands.errors import CommandError

BENCHMARKS: tuple[str, ...] = ("scheduler", "mover", "tla", "tiers")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("bench", help="run a benchmark and print its figures as JSON")
    names = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name in BENCHMARKS:
        module = importlib.import_module(f"kvoffload_lab.benchmarks.{name}")
        sub = names.add_parser(name, help=module.__doc__.splitlines()[0] if module.__doc__ else None)
        sub.add_argument("--json", action="store_true", help="print JSON only (the default output)")
        module.add_arguments(sub)
        sub.set_defaults(func=_runner(module))


def _runner(module: object):  # type: ignore[no-untyped-def]
    def run(args: argparse.Namespace) -> int:
        try:
            result = module.run(args)  # type: ignore[attr-defined]
        except BenchmarkError as error:
            raise CommandError(str(error)) from None
        print(json.dumps(result, indent=None if args.json else 2))
        return 0

    return run
