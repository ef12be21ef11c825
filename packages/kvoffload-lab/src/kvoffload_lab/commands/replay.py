"""``kvoffload replay TRACE.jsonl``: replay a Mooncake block trace through the real scheduler.

Every request goes through the real OffloadingScheduler, CPUOffloadingManager and lifecycle, one
at a time in timestamp order, with a 512-token block as the scheduling unit, a vLLM-like GPU prefix
cache of --gpu-blocks blocks in front and the CPU tier of --cpu-blocks blocks behind it. Reports
the fraction of full prompt blocks served from GPU or CPU instead of recomputed, next to Belady's
offline bound (one cache of G + C blocks), the infinite-cache bound and the CPU oracle (the same
replay with the CPU tier decided by Belady's rule from the trace's future: the fair target of a
CPU policy); counts invariant
violations and leaks (exit status 1 if any). --sweep replays every policy over a range of CPU
sizes and plots hit ratio vs capacity.

Trace format: one JSON object per line with timestamp (ms), input_length, output_length and
hash_ids (one prefix block hash per 512-token block), as in kvcache-ai/Mooncake, folder
FAST25-release/traces.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kvoffload.offload.policies import POLICIES
from kvoffload.offload.types import OffloadConfig
from kvoffload_lab.commands.errors import CommandError

# How many skipped-line messages go to stderr (the count is always reported).
SHOWN_SKIPPED = 5
# Formats the sweep's plot is written in (chosen by the --plot extension).
PLOT_SUFFIXES = (".png", ".pdf", ".svg")



def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(_positive(part) for part in text.split(",") if part.strip())
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"--cpu-sizes: {error}") from None


def _window(text: str) -> slice:
    """``START:END`` (either may be empty): a half-open range of request indices in arrival order."""
    start_text, colon, end_text = text.partition(":")
    try:
        if not colon:
            raise ValueError
        start = int(start_text) if start_text.strip() else 0
        end = int(end_text) if end_text.strip() else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"--requests: expected START:END, got {text!r}") from None
    if start < 0 or (end is not None and end <= start):
        raise argparse.ArgumentTypeError(f"--requests: expected 0 <= START < END, got {text!r}")
    return slice(start, end)


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload replay``."""
    parser = subparsers.add_parser(
        "replay",
        help="replay a Mooncake trace through the real scheduler; hit ratio vs Belady and infinite cache",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("trace", help="Mooncake-format .jsonl trace")
    parser.add_argument("--gpu-blocks", type=_positive, default=1000, help="GPU prefix cache blocks (default 1000)")
    parser.add_argument("--cpu-blocks", type=_positive, default=4000, help="CPU tier blocks (default 4000)")
    parser.add_argument(
        "--policy",
        default=OffloadConfig().policy,
        help=f"CPU eviction policy: {', '.join(POLICIES)} (default {OffloadConfig().policy})",
    )
    parser.add_argument("--limit", type=_positive, help="replay only the first N usable requests of the file")
    parser.add_argument(
        "--requests", type=_window, default=None, metavar="START:END",
        help="replay only requests START..END-1 in arrival order (e.g. :6015 and 6015: split the trace by time)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument("--strict", action="store_true", help="stop at the first malformed line")
    parser.add_argument("--sweep", action="store_true", help="every policy over --cpu-sizes, with a plot")
    parser.add_argument(
        "--cpu-sizes", type=_sizes, default=None, help="sweep: comma-separated CPU sizes (default 1000,...,16000)"
    )
    parser.add_argument("--policies", default=None, help="sweep: comma-separated policies (default: all)")
    parser.add_argument(
        "--plot", default=None, help="sweep: plot path ending .png, .pdf or .svg (default replay_sweep.png)"
    )
    parser.add_argument(
        "--oracle-breakdown", action="store_true",
        help="also replay the half-clairvoyant bounds that split the CPU oracle's advantage",
    )
    parser.add_argument(
        "--check-every", type=_positive, default=100, help="check the invariants every N requests (default 100)"
    )
    parser.add_argument(
        "--tier-blocks", type=_tier_blocks, default=None, metavar="NAME=N[,NAME=N]",
        help="secondary tiers under the CPU tier, in order (e.g. file=20000,redis=80000): hit ratio per tier",
    )
    parser.set_defaults(func=run)


def _tier_blocks(text: str) -> dict[str, int]:
    tiers: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, size = part.partition("=")
        if not name or name in tiers or name == "cpu":
            raise argparse.ArgumentTypeError(f"--tier-blocks: {part!r} needs a new tier name other than cpu")
        try:
            tiers[name] = _positive(size)
        except argparse.ArgumentTypeError as error:
            raise argparse.ArgumentTypeError(f"--tier-blocks {name}: {error}") from None
    if not tiers:
        raise argparse.ArgumentTypeError("--tier-blocks: expected NAME=N[,NAME=N]")
    return tiers


def _policies(names: str | None, fallback: Sequence[str]) -> tuple[str, ...]:
    chosen = tuple(n.strip() for n in names.split(",") if n.strip()) if names else tuple(fallback)
    unknown = [name for name in chosen if name not in POLICIES]
    if unknown or not chosen:
        raise CommandError(
            f"unknown eviction policy {', '.join(map(repr, unknown)) or '(none)'}; known: {', '.join(POLICIES)}"
        )
    return chosen


@contextmanager
def _progress(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (never stdout, which may carry JSON)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True, disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task(description, total=total)
        pending = 0

        def advance(count: int) -> None:
            # Redrawing per request would cost more than replaying it.
            nonlocal pending
            pending += count
            if pending >= 50:
                progress.advance(task, pending)
                pending = 0

        yield advance


def _check_sizes(gpu_blocks: int, cpu_blocks: int) -> None:
    """Refuse pools whose bookkeeping would not fit in memory, before allocating them."""
    from kvoffload_lab.sim.runner import BOOKKEEPING_BYTES_PER_BLOCK, memory_limit_bytes

    planned, limit = (gpu_blocks + cpu_blocks) * BOOKKEEPING_BYTES_PER_BLOCK, memory_limit_bytes()
    if planned > limit:
        raise CommandError(
            f"--gpu-blocks {gpu_blocks} + --cpu-blocks {cpu_blocks} needs about {planned / 2**30:.1f} GiB, "
            f"more than the {limit / 2**30:.1f} GiB allowed (half of this machine's memory)"
        )


def _plot_path(args: argparse.Namespace) -> str | None:
    """The sweep's plot path, checked before the sweep runs (None without --sweep)."""
    from kvoffload_lab.commands.output_paths import writable_file

    if not args.sweep:
        if args.plot is not None:
            raise CommandError("--plot needs --sweep")
        return None
    try:
        return str(writable_file(args.plot or "replay_sweep.png", "--plot", PLOT_SUFFIXES, create_parents=True))
    except ValueError as error:
        raise CommandError(str(error)) from None


def run(args: argparse.Namespace) -> int:
    from kvoffload_lab.tracestudy.mooncake import TraceError, read_trace
    from kvoffload_lab.tracestudy.replay import ReplayError

    plot = _plot_path(args)
    if args.sweep:
        from kvoffload_lab.tracestudy.sweep import DEFAULT_CPU_SIZES

        _check_sizes(args.gpu_blocks, max(args.cpu_sizes or DEFAULT_CPU_SIZES))
    else:
        _check_sizes(args.gpu_blocks, args.cpu_blocks)
    try:
        trace = read_trace(args.trace, strict=args.strict, limit=args.limit)
    except TraceError as error:
        raise CommandError(str(error)) from None
    if args.requests is not None:
        selected = trace.requests[args.requests]
        if not selected:
            raise CommandError(f"--requests {args.requests.start}:{args.requests.stop or ''} selects no request "
                               f"of the {len(trace.requests)} in {args.trace}")
        trace.requests = selected
    for message in trace.skipped[:SHOWN_SKIPPED]:
        print(f"kvoffload replay: skipped {message}", file=sys.stderr)
    if trace.skipped_lines > SHOWN_SKIPPED:
        print(f"kvoffload replay: ... {trace.skipped_lines - SHOWN_SKIPPED} more malformed line(s)", file=sys.stderr)
    try:
        if plot is not None:
            return _sweep(args, trace, plot)
        return _single(args, trace)
    except ReplayError as error:
        raise CommandError(str(error)) from None


def _single(args: argparse.Namespace, trace: Any) -> int:
    from kvoffload_lab.tracestudy.replay import replay_trace

    (policy,) = _policies(args.policy, ())
    if args.tier_blocks:
        if args.oracle_breakdown:
            raise CommandError("--oracle-breakdown does not combine with --tier-blocks")
        from kvoffload_lab.tracestudy.tiered_replay import replay_tiered

        data = {"trace": trace.path, **replay_tiered(
            trace.requests, args.gpu_blocks, args.cpu_blocks, policy, args.tier_blocks, args.check_every
        ), "skipped_lines": trace.skipped_lines}
        print(json.dumps(data, indent=2))
        return 0 if not (data["violations"] or data["leaks"]) else 1
    with _progress(len(trace.requests), f"replay {policy}") as advance:
        result = replay_trace(
            trace.requests, args.gpu_blocks, args.cpu_blocks, policy, progress=advance, check_every=args.check_every
        )
    data = {"trace": trace.path, **_window_field(args), **result.as_dict(), "skipped_lines": trace.skipped_lines}
    if args.oracle_breakdown:
        from kvoffload_lab.tracestudy.mooncake import block_chains
        from kvoffload_lab.tracestudy.oracle_breakdown import oracle_breakdown

        data["oracle_breakdown"] = oracle_breakdown(
            block_chains(trace.requests), args.gpu_blocks, args.cpu_blocks,
            oracle_hit_ratio=result.cpu_oracle_hit_ratio,
        )
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_single(data)
    bounds_failed = any(row["violations"] or row["leaks"] for row in data.get("oracle_breakdown", ()))
    return 0 if not (result.violations or result.leaks or bounds_failed) else 1


def _window_field(args: argparse.Namespace) -> dict[str, Any]:
    """The --requests window, as the JSON reports it (nothing without one)."""
    if args.requests is None:
        return {}
    return {"request_window": [args.requests.start, args.requests.stop]}


def _print_single(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="kvoffload replay", show_header=False)
    for key in (
        "trace", "policy", "gpu_blocks", "cpu_blocks", "requests", "blocks", "hit_ratio", "gpu_hit_ratio",
        "cpu_hit_ratio", "belady_hit_ratio", "infinite_hit_ratio", "ratio_to_belady", "cpu_oracle_hit_ratio",
        "ratio_to_cpu_oracle", "violations", "leaks",
        "skipped_lines", "seconds",
    ):
        value = data[key]
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    for row in data.get("oracle_breakdown", ()):
        horizon = f" within {row['horizon']}" if row["horizon"] else ""
        ratio = f"{row['hit_ratio']:.4f} ({row['ratio_to_cpu_oracle']:.2f} x oracle)"
        table.add_row(f"{row['policy']}{horizon}", ratio)
    console = Console()
    console.print(table)
    for message in [*data["violation_messages"], *data["leak_messages"]]:
        console.print(f"[red]{message}[/red]", highlight=False)


def _sweep(args: argparse.Namespace, trace: Any, plot: str) -> int:
    from kvoffload_lab.tracestudy.sweep import DEFAULT_CPU_SIZES, plot_sweep, run_sweep

    policies = _policies(args.policies, tuple(POLICIES))
    sizes = args.cpu_sizes or DEFAULT_CPU_SIZES
    with _progress(len(trace.requests) * len(policies) * len(sizes), "sweep") as advance:
        result = run_sweep(
            trace.requests, args.gpu_blocks, sizes, policies, advance, args.check_every, args.oracle_breakdown
        )
    try:
        plot_path = plot_sweep(result, plot)
    except OSError as error:
        raise CommandError(f"--plot {plot}: cannot write: {error.strerror or error}") from None
    data = {
        "trace": trace.path, **_window_field(args), **result.as_dict(), "skipped_lines": trace.skipped_lines,
        "plot": str(plot_path),
    }
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_sweep(data)
    return 0 if not (result.violations or result.leaks) else 1


def _print_sweep(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    sizes = data["cpu_sizes"]
    table = Table(
        title=f"hit ratio, {data['requests']} requests, {data['blocks']} blocks, GPU {data['gpu_blocks']} blocks"
    )
    table.add_column("policy")
    for size in sizes:
        table.add_column(f"C={size}", justify="right")
    table.add_column("violations", justify="right")
    table.add_column("leaks", justify="right")
    for policy in data["policies"]:
        runs = {run["cpu_blocks"]: run for run in data["runs"] if run["policy"] == policy}
        table.add_row(
            policy,
            *(f"{runs[size]['hit_ratio']:.4f}" for size in sizes),
            str(sum(run["violations"] for run in runs.values())),
            str(sum(run["leaks"] for run in runs.values())),
        )
    table.add_row("cpu oracle", *(f"{data['cpu_oracle_hit_ratio'][str(size)]:.4f}" for size in sizes), "", "")
    table.add_row("belady", *(f"{data['belady_hit_ratio'][str(size)]:.4f}" for size in sizes), "", "")
    table.add_row("infinite", *(f"{data['infinite_hit_ratio']:.4f}" for _ in sizes), "", "")
    console = Console()
    console.print(table)
    console.print(f"plot: {data['plot']}", highlight=False)
