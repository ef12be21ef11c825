"""``kvoffload diagram``: draw a declared lifecycle (default: the request lifecycle) as mermaid or
Graphviz dot."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

# name -> (module, attribute) of every declared lifecycle; imported only when drawn.
LIFECYCLES: dict[str, tuple[str, str]] = {
    "request": ("kvoffload.spec.lifecycle", "REQUEST_LIFECYCLE"),
    "tier_chunk": ("kvoffload.tiers.lifecycles", "CHUNK_RESIDENCY"),
    "promotion": ("kvoffload.tiers.lifecycles", "PROMOTION"),
    "cascade": ("kvoffload.tiers.lifecycles", "CASCADE"),
    "probe": ("kvoffload.tiers.lifecycles", "PROBE"),
    "tier_request": ("kvoffload.tiers.lifecycles", "TIER_REQUEST"),
}


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload diagram [--format mermaid|dot] [--lifecycle NAME]``."""
    parser = subparsers.add_parser(
        "diagram",
        help="draw a declared lifecycle as a mermaid stateDiagram-v2 or a Graphviz digraph",
        description=__doc__,
    )
    parser.add_argument(
        "--format", choices=("mermaid", "dot"), default="mermaid", help="output format (default: mermaid)"
    )
    parser.add_argument(
        "--lifecycle", choices=tuple(LIFECYCLES), default="request", help="which lifecycle (default: request)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the diagram on stdout."""
    from kvoffload.statemachine.diagram import render

    module, attribute = LIFECYCLES[getattr(args, "lifecycle", "request")]
    print(render(getattr(importlib.import_module(module), attribute), args.format), end="")
    return 0
