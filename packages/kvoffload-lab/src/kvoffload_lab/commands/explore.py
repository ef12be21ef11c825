"""``kvoffload explore``: model-check the real scheduler + manager over every interleaving within bounds.

Exit status 0 when no invariant is violated, 1 when a counterexample was found (printed as a
numbered list of actions with the state changes of each), 2 on a usage error, 130 when interrupted
(Ctrl-C; one line with the figures reached so far).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from kvoffload_lab.commands.errors import EXIT_INTERRUPTED, CommandError

# The default bounds: every interleaving within them is searched to the end in minutes on 2 cores
# (docs/checkers.md); the tiering model has more actions per state, so its requests are shorter.
CHUNKS = 3
TIER_CHUNKS = 2


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explore",
        help="explore every interleaving of the real scheduler + manager (bounded), shortest counterexample",
        description=__doc__,
    )
    parser.add_argument("--requests", type=int, default=2, help="concurrent requests (default 2)")
    parser.add_argument("--chunks", type=int, default=None, help="chunks per request (default 3; 2 with --tiers)")
    parser.add_argument("--mutant", default=None, help="explore a bug-zoo mutant (see `kvoffload mutants`)")
    parser.add_argument("--max-states", type=int, default=None, help="stop after this many distinct states")
    parser.add_argument("--max-depth", type=int, default=None, help="do not explore beyond this many actions")
    parser.add_argument("--cpu-blocks", type=int, default=None, help="CPU pool size (default: chunks - 1, at least 2)")
    parser.add_argument("--policy", default="lru", help="eviction policy (default lru)")
    parser.add_argument("--max-resets", type=int, default=1, help="reset_cache calls per run (default 1)")
    parser.add_argument("--max-preemptions", type=int, default=1, help="preemptions per run (default 1)")
    parser.add_argument("--no-failures", action="store_true", help="transfers never fail")
    parser.add_argument(
        "--speculative-decoding", action="store_true",
        help="add steps whose draft chunk verification rejects (speculative decoding)",
    )
    parser.add_argument(
        "--drain", choices=("final", "all", "none"), default="final",
        help="run the EventuallyCleaned/NoLeak drain check on final states (default), every state, or never",
    )
    parser.add_argument("--all-violations", action="store_true", help="keep going after the first violation")
    parser.add_argument(
        "--workers", type=int, default=None,
        help="processes searching in parallel (default: 2 when the machine has 2+ cores; 1: one process, with "
        "partial-order reduction; ignored with --max-depth)",
    )
    parser.add_argument(
        "--no-reduction", action="store_true",
        help="one process, full search without partial-order reduction (the exact transition counts)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--tiers", action="store_true",
        help="explore the tiering manager with one file tier (mutants: kvoffload_lab.verify.tiering.mutants)",
    )
    parser.add_argument("--shared-tier", action="store_true", help="with --tiers: a shared (redis) tier instead")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kvoffload.offload.policies import POLICIES
    from kvoffload_lab.statemachine.explore import explore, format_result
    from kvoffload_lab.statemachine.explore_parallel import explore_parallel
    from kvoffload_lab.verify.bugzoo import MUTANTS, explore_model_for

    for name in ("requests", "chunks", "max_states", "max_depth", "cpu_blocks", "workers"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise CommandError(f"--{name.replace('_', '-')} must be positive, got {value}")
    for name in ("max_resets", "max_preemptions"):
        value = getattr(args, name)
        if value < 0:
            raise CommandError(f"--{name.replace('_', '-')} must be >= 0, got {value}")
    if args.tiers:
        if args.chunks is None:
            args.chunks = TIER_CHUNKS
        return _run_tiers(args)
    if args.chunks is None:
        args.chunks = CHUNKS
    mutant = None
    if args.mutant is not None:
        mutant = MUTANTS.get(args.mutant)
        if mutant is None:
            raise CommandError(f"unknown mutant {args.mutant!r}; known: {', '.join(sorted(MUTANTS))}")
    if args.policy not in POLICIES:
        raise CommandError(f"--policy {args.policy!r} is unknown; known: {', '.join(sorted(POLICIES))}")
    if args.chunks < 2:
        raise CommandError(f"--chunks must be at least 2, got {args.chunks}")
    options: dict[str, object] = {
        "policy": args.policy,
        "max_resets": args.max_resets,
        "max_preemptions": args.max_preemptions,
        "allow_failures": not args.no_failures,
    }
    if args.cpu_blocks is not None:
        options["cpu_blocks"] = args.cpu_blocks
    if args.speculative_decoding:
        options["speculative_decoding"] = True
    try:
        model = explore_model_for(mutant, args.requests, args.chunks, **options)
    except ValueError as error:
        raise CommandError(str(error)) from None
    workers = args.workers if args.workers is not None else min(2, os.cpu_count() or 1)
    if args.no_reduction or args.max_depth is not None:
        workers = 1
    if workers > 1:
        result = explore_parallel(
            model, workers, max_states=args.max_states, stop_at_first=not args.all_violations, drain=args.drain
        )
    else:
        result = explore(
            model,
            max_depth=args.max_depth,
            max_states=args.max_states,
            stop_at_first=not args.all_violations,
            drain=args.drain,
            reduce=not args.no_reduction,
        )
    if result.interrupted:
        print(
            f"kvoffload explore: interrupted after {result.seconds:.1f} s: {result.states} states, "
            f"{result.transitions} transitions, depth {result.depth}, {len(result.violations)} violation(s) so far",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    if args.json:
        out = result.to_json()
        out["workers"] = workers
        out["model"] = {
            "requests": args.requests, "chunks": args.chunks, "mutant": args.mutant,
            "cpu_blocks": model.cpu_blocks, "gpu_blocks": model.gpu_blocks, **options,
        }
        print(json.dumps(out))
    else:
        what = f"mutant {mutant.name} ({mutant.source})" if mutant else "our scheduler + manager"
        print(f"explore: {what}, {args.requests} request(s) x {args.chunks} chunk(s), "
              f"{model.cpu_blocks} CPU / {model.gpu_blocks} GPU blocks")
        print(format_result(result))
    return 0 if result.ok else 1


def _run_tiers(args: argparse.Namespace) -> int:
    """``kvoffload explore --tiers [--mutant NAME]``: exit 0 when nothing is violated, 1 otherwise."""
    from kvoffload_lab.statemachine.explore import explore, format_result
    from kvoffload_lab.verify.tiering.explore_model import TierExploreModel
    from kvoffload_lab.verify.tiering.mutants import TIER_MUTANTS

    make_manager = None
    drain = args.drain
    if args.mutant is not None:
        mutant = TIER_MUTANTS.get(args.mutant)
        if mutant is None:
            raise CommandError(f"unknown tier mutant {args.mutant!r}; known: {', '.join(sorted(TIER_MUTANTS))}")
        make_manager = mutant.make_manager
        drain = "all" if mutant.drain == "all" else drain
    try:
        model = TierExploreModel(
            args.requests, args.chunks, args.cpu_blocks or 1, 2, not args.no_failures, make_manager,
            shared=args.shared_tier, max_resets=args.max_resets,
        )
    except ValueError as error:
        raise CommandError(str(error)) from None
    result = explore(model, max_depth=args.max_depth, max_states=args.max_states,
                     stop_at_first=not args.all_violations, drain=drain)
    if args.json:
        tiers = ["cpu", "redis" if model.shared else "file"]
        print(json.dumps({**result.to_json(), "model": {"tiers": tiers, "requests": args.requests,
                                                       "chunks": args.chunks, "mutant": args.mutant}}))
    else:
        print(f"explore --tiers: {args.mutant or 'our scheduler + tiering manager'}, {args.requests} request(s) x "
              f"{args.chunks} chunk(s), {model.cpu_blocks} CPU block(s), "
              f"{'a shared redis tier' if model.shared else f'{model.tier_slots} file tier slot(s)'}")
        print(format_result(result))
    return 0 if result.ok else 1
