"""``kvoffload link [DIR] [--write]``: check that the TLA+ spec and the declared lifecycles agree.

Checks (``kvoffload_lab.verify.spec_link``): the generated ``RequestLifecycle.tla`` and
``JobLifecycle.tla`` in DIR are current; every action of ``KVOffload.tla`` moves requests and jobs
only along declared edges (``KVOffloadRefinement.tla`` with ``KVOffloadRefinement.cfg``); every
declared request edge is taken by some action unless the refinement lists it as unmodelled.
Exit 0 when the link holds, 1 with one line per problem, 2 for a DIR without the spec.
``--write`` regenerates the modules first.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kvoffload_lab.commands.errors import CommandError


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload link``."""
    parser = subparsers.add_parser(
        "link",
        help="check that tla/KVOffload.tla moves requests and jobs only along the declared lifecycles",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("directory", type=Path, nargs="?", default=Path("tla"), help="the spec's directory (tla)")
    parser.add_argument("--write", action="store_true", help="regenerate the lifecycle modules, then check")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the link; one line per problem."""
    from kvoffload_lab.verify.spec_link import DECLARATIONS, LINK_CONFIG, REFINEMENT, SPEC, check_link, write_modules

    directory: Path = args.directory
    for name in (SPEC, REFINEMENT, LINK_CONFIG):
        if not (directory / name).is_file():
            raise CommandError(f"{directory / name}: no such file")
    if args.write:
        for path in write_modules(DECLARATIONS, directory):
            print(f"wrote {path}")
    report = check_link(directory)
    for problem in report.problems:
        print(problem)
    if report.ok:
        print(
            f"{directory / SPEC}: OK: the lifecycle modules are current, every action follows the declared "
            f"edges, and {report.covered_edges} declared request edges are taken"
        )
    return 0 if report.ok else 1
