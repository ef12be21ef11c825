"""``kvoffload diagram``: draw a declared lifecycle (``request`` or ``job``) as mermaid or Graphviz dot."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload diagram [--lifecycle NAME] [--format mermaid|dot]``."""
    from kvoffload.spec import LIFECYCLES

    parser = subparsers.add_parser(
        "diagram",
        help="draw a declared lifecycle as a mermaid stateDiagram-v2 or a Graphviz digraph",
        description=__doc__,
    )
    parser.add_argument(
        "--lifecycle", choices=sorted(LIFECYCLES), default="request", help="which declaration (default: request)"
    )
    parser.add_argument(
        "--format", choices=("mermaid", "dot"), default="mermaid", help="output format (default: mermaid)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the diagram on stdout."""
    from kvoffload.spec import LIFECYCLES
    from kvoffload.statemachine.diagram import render

    print(render(LIFECYCLES[args.lifecycle], args.format), end="")
    return 0
