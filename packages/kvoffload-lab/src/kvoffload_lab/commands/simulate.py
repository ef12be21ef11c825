"""``kvoffload simulate``: the main job, a seeded multi-turn workload through the simulated engine."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kvoffload.offload.types import DEFAULT_POLICY
from kvoffload_lab.commands.errors import EXIT_INTERRUPTED, CommandError

if TYPE_CHECKING:
    from kvoffload_lab.sim.runner import EngineFactory


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run a seeded multi-turn workload through the engine simulator and report hits and checks",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--users", type=int, default=24)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arrival-spread", type=int, default=60, metavar="STEPS",
                        help="steps over which the users' first turns arrive (0: all in the first step)")
    parser.add_argument("--system-prompts", type=int, default=1, metavar="N",
                        help="system prompts the users share in turn (default 1: one for all)")
    parser.add_argument("--gpu-blocks", type=int, default=96)
    parser.add_argument("--cpu-blocks", type=int, default=512)
    parser.add_argument("--block-size", type=int, default=16, help="tokens per GPU block")
    parser.add_argument("--blocks-per-chunk", type=int, default=1, help="GPU blocks per CPU block")
    parser.add_argument("--policy", default=DEFAULT_POLICY, help=f"CPU eviction policy (default {DEFAULT_POLICY})")
    parser.add_argument("--delay", type=int, default=1, help="engine steps a transfer job takes")
    parser.add_argument(
        "--faults", type=float, default=0.0, metavar="RATE",
        help="inject transfer failures at RATE, plus aborts and reset_cache calls",
    )
    parser.add_argument("--backend", choices=("model", "torch"), default="torch",
                        help="model: contents tracked as hashes; torch: real tensors through the mover")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="torch backend: where the engine's KV tensors live (cuda: the mover's CUDA path)")
    parser.add_argument("--trace", metavar="FILE", help="write every lifecycle transition as ndjson")
    parser.add_argument("--max-steps", type=int, default=200_000)
    parser.add_argument("--mutant", metavar="NAME", help="run a bug-zoo mutant instead of our code (kvoffload mutants)")
    parser.add_argument(
        "--speculative-tokens", type=int, default=0, metavar="K",
        help="speculative decoding: K draft tokens per decode step (default 0: off)",
    )
    parser.add_argument(
        "--speculative-acceptance", type=float, default=0.7, metavar="P",
        help="probability that verification accepts each draft, seeded by --seed (default 0.7)",
    )
    tiers = parser.add_argument_group("secondary tiers (kvoffload.tiers)")
    tiers.add_argument("--tiers", default="cpu", help="tier chain, e.g. cpu,file,redis (default: cpu only)")
    tiers.add_argument("--engines", type=int, default=1, help="engine instances sharing the redis tier")
    tiers.add_argument("--file-slots", type=int, default=2048, help="slots of each engine's file tier")
    tiers.add_argument("--redis-url", help="redis[s]://[:password@]host:port/db (default: a private redis-server)")
    tiers.add_argument("--tier-dir", help="directory of the file tiers (default: a temporary one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kvoffload_lab.commands.output_paths import writable_file
    from kvoffload_lab.sim.runner import SimulationOptions, SimulationStopped, simulate

    try:
        options = SimulationOptions(
            users=args.users, turns=args.turns, seed=args.seed, arrival_spread=args.arrival_spread,
            system_prompts=args.system_prompts, num_gpu_blocks=args.gpu_blocks,
            num_cpu_blocks=args.cpu_blocks, gpu_block_size=args.block_size, blocks_per_chunk=args.blocks_per_chunk,
            policy=args.policy, delay=args.delay, faults=args.faults, backend=args.backend, device=args.device,
            trace_path=args.trace and str(writable_file(args.trace, "--trace")), max_steps=args.max_steps,
            speculative_tokens=args.speculative_tokens, speculative_acceptance=args.speculative_acceptance,
        )
        make_engine = _mutant_engine_factory(args.mutant)
    except ValueError as error:
        raise CommandError(str(error)) from None
    started = time.perf_counter()
    if args.tiers != "cpu" or args.engines != 1:
        if args.mutant is not None:
            raise CommandError("--mutant runs a bug-zoo mutant of the CPU tier alone; drop --tiers/--engines")
        return _run_tiered(args, options, started)
    try:
        result = simulate(options, progress=not args.json and sys.stderr.isatty(), make_engine=make_engine)
    except SimulationStopped as stop:
        figures = _figures(stop.summary)
        if stop.reason.startswith("interrupted"):
            print(f"kvoffload simulate: {stop.reason}: {figures}", file=sys.stderr)
            return EXIT_INTERRUPTED
        raise CommandError(f"{stop.reason}: {figures}") from None
    except OSError as error:
        raise CommandError(f"--trace {args.trace}: cannot write: {error.strerror or error}") from None
    except KeyboardInterrupt:
        print("kvoffload simulate: interrupted before the first step", file=sys.stderr)
        return EXIT_INTERRUPTED
    _report(result, started, args.json, lambda figures: _print_table(figures, options_dict=asdict(options)))
    return 0 if result["violations"] == 0 and result["leaks"] == 0 else 1


def _mutant_engine_factory(name: str | None) -> EngineFactory | None:
    """``--mutant NAME``'s engine factory, or None to run our engine."""
    if name is None:
        return None
    from kvoffload_lab.commands.mutant_engine import mutant_engine_factory

    return mutant_engine_factory(name)


def _report(
    result: dict[str, Any], started: float, as_json: bool, print_text: Callable[[dict[str, Any]], None]
) -> None:
    """Print a finished run's figures (with its wall time) as JSON or as text."""
    result["seconds"] = round(time.perf_counter() - started, 3)
    if as_json:
        print(json.dumps(result))
    else:
        print_text(result)


def _figures(summary: dict[str, Any]) -> str:
    """The partial figures of a stopped run, on one line."""
    return (
        f"{summary['steps']} steps, {summary['finished']} finished, {summary['aborted']} aborted, "
        f"{summary['truncated_conversations']} truncated, {summary['violations']} violations, "
        f"{summary['integrity_failures']} integrity failures"
    )


def _run_tiered(args: argparse.Namespace, options: Any, started: float) -> int:
    from dataclasses import replace

    from kvoffload_lab.sim.tiered.runner import TierSimOptions, print_summary, simulate_tiered

    if args.device != "cpu":
        raise CommandError(
            f"--device {args.device} moves real tensors, but --tiers/--engines track contents as hashes: drop one"
        )
    try:
        tier_options = TierSimOptions(
            replace(options, backend="model"), tuple(args.tiers.split(",")), args.engines, args.file_slots,
            redis_url=args.redis_url, tier_dir=args.tier_dir,
        )
        result = simulate_tiered(tier_options)
    except OSError as error:  # e.g. --tier-dir does not exist or is not writable
        raise CommandError(f"cannot use the file tier: {error}") from None
    except (ValueError, RuntimeError) as error:
        raise CommandError(str(error)) from None
    except KeyboardInterrupt:
        print("kvoffload simulate: interrupted; a tiered run keeps no partial figures", file=sys.stderr)
        return EXIT_INTERRUPTED
    _report(result, started, args.json, print_summary)
    ok = result["violations"] == 0 and result["leaks"] == 0 and result["integrity_failures"] == 0
    return 0 if ok else 1


def _print_table(result: dict[str, Any], options_dict: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    admitted = max(1, result["admitted_tokens"])

    def share(key: str) -> str:
        return f"{result[key]} ({result[key] / admitted:.1%})"

    sections: list[tuple[str, list[tuple[str, str]]]] = [
        ("workload", [
            ("requests finished / aborted", f"{result['finished']} / {result['aborted']}"),
            ("conversations truncated (outgrew the context)", str(result["truncated_conversations"])),
            ("engine steps", str(result["steps"])),
            ("preemptions / reset_cache calls", f"{result['preemptions']} / {result['resets']}"),
        ]),
        ("tokens needing KV at admission", [
            ("total (re-admissions after preemption count again)", str(result["admitted_tokens"])),
            ("served by the GPU prefix cache", share("gpu_hit_tokens")),
            ("admissions hitting blocks computed in the same step", str(result["same_step_gpu_hits"])),
            ("served by CPU offload", share("offload_hit_tokens")),
        ]),
        ("transfers", [
            ("chunks stored / loaded", f"{result['stored_chunks']} / {result['loaded_chunks']}"),
            ("failed stores / loads", f"{result['store_failures']} / {result['load_failures']}"),
            ("stale completions after reset", str(result["stale_completions"])),
            ("draft tokens accepted / scheduled", f"{result['accepted_draft_tokens']} / {result['draft_tokens']}"),
            ("policy", str(result["policy"])),
        ]),
        ("checks", [
            ("invariant violations", str(result["violations"])),
            ("leaks after drain", str(result["leaks"])),
            ("loaded blocks checked byte for byte", str(result["integrity_checked_blocks"])),
            ("integrity failures", str(result["integrity_failures"])),
        ]),
    ]
    table = Table(title=f"kvoffload simulate ({options_dict['users']} users x {options_dict['turns']} turns, "
                  f"{options_dict['backend']} backend)")
    table.add_column("")
    table.add_column("value", justify="right")
    for title, rows in sections:
        table.add_row(f"[bold]{title}[/bold]", "")
        for label, value in rows:
            table.add_row(f"  {label}", value)
    console = Console()
    console.print(table)
    ok = result["violations"] == 0 and result["leaks"] == 0 and result["integrity_failures"] == 0
    console.print("[green]OK: no violation, no leak, every loaded block intact[/green]" if ok else "[red]FAILED[/red]")
    for message in result.get("violation_messages", []):
        console.print(f"[red]{message}[/red]")
