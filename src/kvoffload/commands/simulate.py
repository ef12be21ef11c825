"""``kvoffload simulate``: the main job, a seeded multi-turn workload through the simulated engine."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any

from kvoffload.commands.errors import CommandError
from kvoffload.offload.types import DEFAULT_POLICY


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run a seeded multi-turn workload through the engine simulator and report hits and checks",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--users", type=int, default=24)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
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
    parser.add_argument("--trace", metavar="FILE", help="write every lifecycle transition as ndjson")
    parser.add_argument("--max-steps", type=int, default=200_000)
    parser.add_argument("--mutant", metavar="NAME", help="run a bug-zoo mutant instead of our code (kvoffload mutants)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kvoffload.sim.runner import SimulationOptions, simulate

    try:
        options = SimulationOptions(
            users=args.users, turns=args.turns, seed=args.seed, num_gpu_blocks=args.gpu_blocks,
            num_cpu_blocks=args.cpu_blocks, gpu_block_size=args.block_size, blocks_per_chunk=args.blocks_per_chunk,
            policy=args.policy, delay=args.delay, faults=args.faults, backend=args.backend,
            trace_path=args.trace, max_steps=args.max_steps, mutant=args.mutant,
        )
    except ValueError as error:
        raise CommandError(str(error)) from None
    started = time.perf_counter()
    result = simulate(options, progress=not args.json and sys.stderr.isatty())
    result["seconds"] = round(time.perf_counter() - started, 3)
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result, options_dict=asdict(options))
    return 0 if result["violations"] == 0 and result["leaks"] == 0 else 1


def _print_table(result: dict[str, Any], options_dict: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    admitted = max(1, result["admitted_tokens"])

    def share(key: str) -> str:
        return f"{result[key]} ({result[key] / admitted:.1%})"

    sections: list[tuple[str, list[tuple[str, str]]]] = [
        ("workload", [
            ("requests finished / aborted", f"{result['finished']} / {result['aborted']}"),
            ("engine steps", str(result["steps"])),
            ("preemptions / reset_cache calls", f"{result['preemptions']} / {result['resets']}"),
        ]),
        ("tokens needing KV at admission", [
            ("total (re-admissions after preemption count again)", str(result["admitted_tokens"])),
            ("served by the GPU prefix cache", share("gpu_hit_tokens")),
            ("served by CPU offload", share("offload_hit_tokens")),
        ]),
        ("transfers", [
            ("chunks stored / loaded", f"{result['stored_chunks']} / {result['loaded_chunks']}"),
            ("failed stores / loads", f"{result['store_failures']} / {result['load_failures']}"),
            ("stale completions after reset", str(result["stale_completions"])),
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
