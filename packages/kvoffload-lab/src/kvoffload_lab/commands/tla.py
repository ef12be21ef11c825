"""``kvoffload tla``: the command of the TLA+ checker, tlacheck (``tlacheck.cli``), under kvoffload's.

``kvoffload tla check SPEC.tla [--config MODEL.cfg]`` checks one model and exits with TLC's exit
code (0 success, 11 deadlock, 12 safety, 13 liveness, ...). ``kvoffload tla check-all DIR`` checks
every ``.cfg`` in DIR against the outcome its ``\\* expect: ...`` comment announces, and exits 0
only if every model met its expectation (``make tla``). Same actions, arguments, output and exit
statuses as ``tlacheck check`` and ``tlacheck check-all``.
"""

from __future__ import annotations

import argparse
from typing import Any

from kvoffload_lab.commands.errors import CommandError
from tlacheck.cli import add_actions, run
from tlacheck.engine import UsageError


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload tla`` and its ``check`` / ``check-all`` subcommands."""
    parser = subparsers.add_parser(
        "tla",
        help="model-check the TLA+ spec (TLC when a tla2tools.jar is found, else the embedded checker)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_actions(parser, "kvoffload tla")
    parser.set_defaults(func=run_action)


def run_action(args: argparse.Namespace) -> int:
    """Run the parsed action; the checker's bad-input error becomes kvoffload's (one line, same status)."""
    try:
        return run(args)
    except UsageError as error:
        raise CommandError(str(error), error.status) from error
