"""``kvoffload diagram``: draw the request lifecycle (REQUEST_LIFECYCLE) as mermaid or Graphviz dot."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload diagram [--format mermaid|dot]``."""
    parser = subparsers.add_parser(
        "diagram",
        help="draw the request lifecycle as a mermaid stateDiagram-v2 or a Graphviz digraph",
        description=__doc__,
    )
    parser.add_argument(
        "--format", choices=("mermaid", "dot"), default="mermaid", help="output format (default: mermaid)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the diagram on stdout."""
    from kvoffload.spec.lifecycle import REQUEST_LIFECYCLE
    from kvoffload.statemachine.diagram import render

    print(render(REQUEST_LIFECYCLE, args.format), end="")
    return 0
