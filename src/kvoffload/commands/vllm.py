"""``kvoffload vllm check``: run kvoffload's checkers against vLLM's own offloading connector.

vLLM is the installed package, or the sources in ``--vllm-src DIR`` / ``$KVOFFLOAD_VLLM_SRC`` (an
unpacked wheel or a git checkout). Exit status 0 when every checker holds, 1 on any violation,
2 on bad input (vLLM missing, a module it needs moved, an unknown manager or checker).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from typing import Any

from kvoffload.commands.errors import CommandError

MANAGER_CHOICES = ("lru", "arc", "tiering", "all")
CHECKER_CHOICES = ("sim", "hypothesis", "explore", "all")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("vllm", help="check vLLM's own offloading connector", description=__doc__)
    actions = parser.add_subparsers(dest="vllm_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="vLLM's connector scheduler + managers through kvoffload's checkers",
                               description=__doc__)
    check.add_argument("--manager", default="all", help=f"one of {', '.join(MANAGER_CHOICES)} (default all)")
    check.add_argument("--checker", default="all", help=f"one of {', '.join(CHECKER_CHOICES)} (default all)")
    check.add_argument("--vllm-src", default=None, metavar="DIR",
                       help="vLLM sources (unpacked wheel or git checkout); default $KVOFFLOAD_VLLM_SRC or installed")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(func=run)


def _choice(value: str, choices: tuple[str, ...], flag: str) -> list[str]:
    if value not in choices:
        raise CommandError(f"{flag} {value!r} is unknown; choose one of {', '.join(choices)}")
    return list(choices[:-1]) if value == "all" else [value]


def run(args: argparse.Namespace) -> int:
    managers = _choice(args.manager, MANAGER_CHOICES, "--manager")
    checkers = _choice(args.checker, CHECKER_CHOICES, "--checker")
    # vLLM logs every connector step at INFO; its findings are ours to report.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.getLogger("vllm").setLevel(logging.ERROR)
    started = time.perf_counter()
    from kvoffload.vllm.locate import VllmNotFound, locate_vllm

    try:
        install = locate_vllm(args.vllm_src)
    except VllmNotFound as error:
        raise CommandError(str(error)) from None
    from kvoffload.vllm.check.build import warm_up
    from kvoffload.vllm.check.compat import private_reads
    from kvoffload.vllm.check.runner import format_table, run_checks, to_json

    warm_up()
    setup = time.perf_counter() - started
    results = run_checks(managers, checkers, private_reads(install.version))
    if args.json:
        print(json.dumps(to_json(install.version, results, setup)))
    else:
        print(f"{install.describe()}; set-up {setup:.1f} s")
        print(format_table(install.version, results))
    return 1 if any(r.result == "violation" for r in results) else 0
