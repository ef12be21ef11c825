"""``kvoffload diagram``: draw a declared lifecycle (``request``, ``job`` or a tier lifecycle) as mermaid
or Graphviz dot, or print it as the TLA+ module of its state machine (``--format tla``)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload diagram [--lifecycle NAME] [--format mermaid|dot|tla]``."""
    from kvoffload.lifecycles import LIFECYCLES

    parser = subparsers.add_parser(
        "diagram",
        help="draw a declared lifecycle as a mermaid stateDiagram-v2 or a Graphviz digraph",
        description=__doc__,
    )
    parser.add_argument(
        "--format", choices=("mermaid", "dot", "tla"), default="mermaid", help="output format (default: mermaid)"
    )
    parser.add_argument(
        "--lifecycle", choices=tuple(LIFECYCLES), default="request", help="which lifecycle (default: request)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the diagram on stdout."""
    from kvoffload.lifecycles import LIFECYCLES
    from kvoffload.statemachine.diagram import render
    from kvoffload_lab.statemachine.lifecycle_tla import lifecycle_module

    declaration = LIFECYCLES[args.lifecycle]
    text = lifecycle_module(declaration)[1] if args.format == "tla" else render(declaration, args.format)
    print(text, end="")
    return 0
