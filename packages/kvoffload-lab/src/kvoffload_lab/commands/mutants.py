"""``kvoffload mutants``: the bug zoo, historical offloading bugs reintroduced as mutants of our code."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("mutants", help="list the bug-zoo mutants (kvoffload explore --mutant NAME)")
    parser.add_argument("--json", action="store_true", help='print {"mutants": [...]}')
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kvoffload_lab.verify.bugzoo import MUTANTS
    from kvoffload_lab.verify.tiering.mutants import TIER_MUTANTS

    entries = [mutant.to_json() for mutant in MUTANTS.values()]
    tier_entries = [mutant.to_json() for mutant in TIER_MUTANTS.values()]
    if args.json:
        print(json.dumps({"mutants": entries, "tier_mutants": tier_entries}))
        return 0
    width = max(len(entry["name"]) for entry in (*entries, *tier_entries))
    tier_heading = "tiering mutants (kvoffload explore --tiers --mutant NAME):"
    for heading, listed in (("", entries), (tier_heading, tier_entries)):
        if heading:
            print(heading)
        for entry in listed:
            print(f"{entry['name']:<{width}}  {entry['source']:<30}  caught by {entry['invariant']}")
            print(f"{'':<{width}}  {entry['summary']}")
    return 0
