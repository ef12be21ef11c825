"""The Mooncake trace's prefixes through a real vLLM engine, next to what ``kvoffload replay`` predicts.

Run with the vLLM venv (``make check-vllm-engine`` creates it)::

    .venv-vllm/bin/python scripts/measure/vllm_mooncake.py [--start 9500] [--requests 1000] [--gpu-blocks 256] \
        [--cpu-blocks 2048] [--policies P,...] [--tiers cpu,cpu+file,cpu+redis,two-engines-redis]

``--start``/``--requests`` pick a window of the trace in arrival order; the JSON gives its
infinite-cache bound (``infinite_hit_ratio``). Requests 9,500-10,499 reach 0.250; the first 300
reach 0.082, too sparse to rank policies.

Each trace hash id becomes one engine block of ``--block-size`` token ids drawn from a generator
seeded with the hash id, so equal hash-id prefixes are equal token prefixes; a request's prompt is
its full 512-token blocks (``input_length // 512`` hash ids) plus one token, which the engine
always computes (the replay's model of a request). Requests run one at a time, each to completion
and drained, with one output token: the sequential model of ``kvoffload replay``. The GPU prefix
cache has ``--gpu-blocks`` usable blocks, the CPU tier ``--cpu-blocks`` chunks of one block.

``--policies`` names kvoffload policies, run through kvoffload's integration (``--integration``),
and ``vllm-lru`` / ``vllm-arc``: vLLM's own CPU manager with its LRU or ARC through vLLM's
``OffloadingConnector`` (``vllm_own_offloading_spec.py``: vLLM's spec with a CPU-capable worker). The replay
runs only kvoffload's policies, so vLLM's own get ``"replay": null`` and no violations or leaks.

``--tiers`` names configurations of kvoffload's connector with secondary tiers, its CPU tier of
``--cpu-blocks`` chunks with ``--tier-policy`` (LRU by default: only chunks the CPU tier admitted
cascade down), invariants not checked per step (their snapshot would be timed as the connector's):

- ``cpu``: the CPU tier only;
- ``cpu+file``: a file tier of ``--file-tier-mib`` MiB below it (in a temporary directory);
- ``cpu+redis``: a Redis tier below it, on a private ``redis-server`` this script starts on
  127.0.0.1, port ``--redis-port`` (0: a free one, within ``KVOFFLOAD_REDIS_PORTS=LOW-HIGH`` when
  set), emptied before each configuration and stopped (by its pid) at the end;
- ``two-engines-redis``: two engines one after the other over that server, the first serving the
  window's first half, the second the second half (its CPU tier starts empty: what it gets from
  Redis beyond its own stores, the first engine computed).

Without ``--policies`` a ``--tiers`` run runs no policy comparison.

Prints one JSON object: per policy, vLLM's own counters (prefix-cache hits, external = offload-tier
hits, in blocks and as a share of all full prompt blocks), kvoffload's violations and leaks, and the
replay's prediction for the same requests and sizes. Per tier configuration: engine steps, wall
milliseconds per step and inside the connector's calls per step, and the prompt tokens served per
source: vLLM's GPU prefix cache, then kvoffload's loads split into chunks that were in the CPU tier
and chunks a promotion brought up from the file or Redis tier (each promoted chunk counts once, at
the first load that used it); with each tier's promotion counters (a promoted chunk the CPU tier
evicted before any load used it is counted in ``evicted_before_load_keys``, not as a hit).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vllm_own_offloading_spec import VLLM_POLICIES, vllm_own_transfer_config
from vllm_tiers import step_timers

from kvoffload.offload.policies import POLICIES
from kvoffload_lab.redis_server import INSTALL_HINT, RedisServer, RedisServerMissing
from kvoffload_lab.tracestudy.bounds import infinite_cache
from kvoffload_lab.tracestudy.mooncake import MOONCAKE_BLOCK_TOKENS, TraceRequest, block_chains, read_trace
from kvoffload_lab.tracestudy.replay import replay_trace
from kvoffload_lab.vllm.common.engine import (
    InProcessEngine,
    build_tiny_model,
    connector_transfer_config,
    kvoffload_state,
    spec_transfer_config,
)

DEFAULT_TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
VOCAB = 1000
# Policies run by vLLM's own CPU manager (vllm_own_offloading_spec.VllmOwnCPUSpec), named "vllm-<its name>".
VLLM_OWN_PREFIX = "vllm-"
DEFAULT_POLICIES = "doorkeeper_lfu,lru,arc,vllm-lru,vllm-arc"
TIER_CONFIGS = ("cpu", "cpu+file", "cpu+redis", "two-engines-redis")
SOURCES = {"file": "file_tier", "redis": "redis_tier"}


def prompt_tokens(request: TraceRequest, block_size: int) -> list[int]:
    """Token ids of the request's full blocks (one engine block per hash id) and one more token."""
    tokens: list[int] = []
    for hash_id in request.hash_ids[: request.full_blocks()]:
        rng = random.Random(hash_id)
        tokens.extend(rng.randrange(VOCAB) for _ in range(block_size))
    tokens.append(request.line % VOCAB)
    return tokens


def run_engine(
    model_dir: Path, requests: list[TraceRequest], args: argparse.Namespace, policy: str
) -> dict[str, Any]:
    vllm_own = policy.startswith(VLLM_OWN_PREFIX)
    if vllm_own:
        config = vllm_own_transfer_config(args.cpu_blocks, policy.removeprefix(VLLM_OWN_PREFIX))
    elif args.integration == "connector":
        config = connector_transfer_config(args.cpu_blocks, policy)
    else:
        config = spec_transfer_config(args.cpu_blocks, policy)
    # One more block than the replay's GPU tier: vLLM keeps one as its null block.
    engine = InProcessEngine(model_dir, config, block_size=args.block_size, num_gpu_blocks=args.gpu_blocks + 1)
    started = time.perf_counter()
    try:
        for request in requests:
            engine.generate([prompt_tokens(request, args.block_size)], max_tokens=1)
            engine.drain()
        local, external, _ = engine.counters()
        # vLLM's own manager keeps no violation or leak record: None, not an empty list.
        violations, leaks, counters = (None, None, {}) if vllm_own else kvoffload_state(engine.scheduler_connector)
    finally:
        engine.shutdown()
    blocks = sum(r.full_blocks() for r in requests)
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "prefix_cache_hit_blocks": local // args.block_size,
        "offload_hit_blocks": external // args.block_size,
        "prefix_cache_hit_ratio": local / args.block_size / blocks,
        "offload_hit_ratio": external / args.block_size / blocks,
        "violations": violations,
        "leaks": leaks,
        "kvoffload": counters,
    }


def run_tiered_engine(
    model_dir: Path, requests: list[TraceRequest], args: argparse.Namespace, tiers: dict[str, Any]
) -> dict[str, Any]:
    """One kvoffload connector engine with ``tiers`` through ``requests``: steps, time per step,
    hit tokens per source, tier counters, violations and leaks."""
    config = connector_transfer_config(args.cpu_blocks, args.tier_policy, check_invariants=False, tiers=tiers)
    engine = InProcessEngine(model_dir, config, block_size=args.block_size, num_gpu_blocks=args.gpu_blocks + 1)
    try:
        steps, connector = step_timers(engine)
        started = time.perf_counter()
        for request in requests:
            engine.generate([prompt_tokens(request, args.block_size)], max_tokens=1)
            engine.drain()
        seconds = time.perf_counter() - started
        local, external, _ = engine.counters()
        violations, leaks, counters = kvoffload_state(engine.scheduler_connector)
    finally:
        engine.shutdown()
    tiers_counters = counters.get("tiers", {})
    # One chunk is one engine block (blocks_per_chunk 1).
    from_tiers = {SOURCES[name]: stats["loaded_keys"] * args.block_size for name, stats in tiers_counters.items()}
    loaded = counters["scheduler"]["hit_tokens"]
    return {
        "seconds": round(seconds, 1),
        "steps": steps.calls,
        "ms_per_step": round(1000 * seconds / max(steps.calls, 1), 3),
        "connector_ms_per_step": round(1000 * connector.seconds / max(steps.calls, 1), 3),
        "hit_tokens": {
            "gpu_prefix_cache": local,
            "cpu_tier": loaded - sum(from_tiers.values()),
            "file_tier": from_tiers.get("file_tier", 0),
            "redis_tier": from_tiers.get("redis_tier", 0),
        },
        "offload_hit_tokens_vllm": external,
        "tiers": tiers_counters,
        "violations": violations,
        "leaks": leaks,
    }


def summed(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Two engines' results as one: counts added, times per step over all steps."""
    steps = sum(r["steps"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    connector_ms = sum(r["connector_ms_per_step"] * r["steps"] for r in runs)
    tiers: dict[str, dict[str, int]] = {}
    for run in runs:
        for name, stats in run["tiers"].items():
            total = tiers.setdefault(name, dict.fromkeys(stats, 0))
            for key, value in stats.items():
                total[key] += value
    return {
        "seconds": round(seconds, 1),
        "steps": steps,
        "ms_per_step": round(1000 * seconds / max(steps, 1), 3),
        "connector_ms_per_step": round(connector_ms / max(steps, 1), 3),
        "hit_tokens": {source: sum(r["hit_tokens"][source] for r in runs) for source in runs[0]["hit_tokens"]},
        "offload_hit_tokens_vllm": sum(r["offload_hit_tokens_vllm"] for r in runs),
        "tiers": tiers,
        "violations": [v for r in runs for v in r["violations"]],
        "leaks": [leak for r in runs for leak in r["leaks"]],
        "engines": runs,
    }


def run_tier_configs(
    model_dir: Path, directory: Path, requests: list[TraceRequest], args: argparse.Namespace, configs: list[str]
) -> dict[str, Any]:
    """Each tier configuration of ``configs`` once, in order; a private redis-server if one needs it."""
    server = RedisServer(maxmemory=args.redis_maxmemory, port=args.redis_port) if any(
        "redis" in name for name in configs
    ) else None
    results: dict[str, Any] = {}
    try:
        if server is not None:
            server.start()
        for name in configs:
            tiers: dict[str, Any] = {}
            if "file" in name:
                path = directory / f"{name}.tier"
                tiers["file_tier"] = {"path": str(path), "size_bytes": args.file_tier_mib << 20}
            if server is not None and "redis" in name:
                server.restart()  # empty: each configuration starts from nothing
                tiers["redis_tier"] = {"url": server.url}
            if name == "two-engines-redis":
                half = len(requests) // 2
                results[name] = summed([
                    run_tiered_engine(model_dir, requests[:half], args, tiers),
                    run_tiered_engine(model_dir, requests[half:], args, tiers),
                ])
            else:
                results[name] = run_tiered_engine(model_dir, requests, args, tiers)
    finally:
        if server is not None:
            server.stop()
    return results


def predicted(requests: list[TraceRequest], args: argparse.Namespace, policy: str) -> dict[str, Any] | None:
    """The replay's hits for a kvoffload policy; None for vLLM's own (the replay runs kvoffload's)."""
    if policy.startswith(VLLM_OWN_PREFIX):
        return None
    result = replay_trace(requests, args.gpu_blocks, args.cpu_blocks, policy, bounds=False)
    return {
        "prefix_cache_hit_blocks": result.gpu_hits,
        "offload_hit_blocks": result.cpu_hits,
        "prefix_cache_hit_ratio": result.gpu_hits / result.blocks,
        "offload_hit_ratio": result.cpu_hits / result.blocks,
        "violations": result.violations,
        "leaks": result.leaks,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--start", type=int, default=9500, help="first request of the window (arrival order)")
    parser.add_argument("--requests", type=int, default=1000, help="requests in the window")
    parser.add_argument("--gpu-blocks", type=int, default=256)
    parser.add_argument("--cpu-blocks", type=int, default=2048)
    parser.add_argument("--block-size", type=int, default=32, help="tokens per engine block (one hash id)")
    parser.add_argument("--policies", default=None, help=f"default {DEFAULT_POLICIES} (none with --tiers)")
    parser.add_argument("--integration", choices=("connector", "spec"), default="connector")
    parser.add_argument("--tiers", default="", help=f"tier configurations, of {','.join(TIER_CONFIGS)}")
    parser.add_argument("--tier-policy", default="lru", help="the CPU tier's policy in tier configurations")
    parser.add_argument("--file-tier-mib", type=int, default=1024, help="the file tier's size")
    parser.add_argument("--redis-port", type=int, default=0, help="the private redis-server's port (0: a free one)")
    parser.add_argument("--redis-maxmemory", default="1gb", help="the private redis-server's maxmemory")
    args = parser.parse_args(argv)
    if not args.trace.exists():
        print(f"vllm_mooncake: trace {args.trace} not found (expected ../shared/traces/)", file=sys.stderr)
        return 2
    if args.start < 0 or args.requests < 1:
        print(f"vllm_mooncake: --start {args.start} --requests {args.requests}: need START >= 0 and N >= 1",
              file=sys.stderr)
        return 2
    if args.policies is None:
        args.policies = "" if args.tiers else DEFAULT_POLICIES
    policies = [p for p in args.policies.split(",") if p]
    tier_configs = [c for c in args.tiers.split(",") if c]
    unknown_configs = [c for c in tier_configs if c not in TIER_CONFIGS]
    if unknown_configs:
        print(f"vllm_mooncake: --tiers {','.join(unknown_configs)}: not one of {','.join(TIER_CONFIGS)}",
              file=sys.stderr)
        return 2
    if not policies and not tier_configs:
        print("vllm_mooncake: --policies and --tiers are both empty: nothing to run", file=sys.stderr)
        return 2
    if tier_configs and args.tier_policy not in POLICIES:
        print(f"vllm_mooncake: --tier-policy {args.tier_policy}: not a kvoffload policy", file=sys.stderr)
        return 2
    if args.file_tier_mib < 1 or not 0 <= args.redis_port < 65536:
        print(f"vllm_mooncake: --file-tier-mib {args.file_tier_mib} --redis-port {args.redis_port}: need MiB >= 1 "
              "and a port in 0-65535", file=sys.stderr)
        return 2
    unknown = [p for p in policies if p not in POLICIES and p.removeprefix(VLLM_OWN_PREFIX) not in VLLM_POLICIES]
    if unknown:
        print(f"vllm_mooncake: --policies {','.join(unknown)}: not a kvoffload policy nor "
              f"{', '.join(VLLM_OWN_PREFIX + p for p in VLLM_POLICIES)}", file=sys.stderr)
        return 2
    requests = read_trace(args.trace).requests[args.start : args.start + args.requests]
    if not requests:
        print(f"vllm_mooncake: --start {args.start} is past the trace's end", file=sys.stderr)
        return 2
    too_long = [r.line for r in requests if r.full_blocks() + 1 > args.gpu_blocks]
    if too_long:
        print(f"vllm_mooncake: trace lines {too_long[:5]} need more than --gpu-blocks blocks", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "start": args.start,
        "requests": len(requests),
        "infinite_hit_ratio": infinite_cache(block_chains(requests)).hit_ratio,
        "full_prompt_blocks": sum(r.full_blocks() for r in requests),
        "trace_block_tokens": MOONCAKE_BLOCK_TOKENS,
        "engine_block_tokens": args.block_size,
        "gpu_blocks": args.gpu_blocks,
        "cpu_blocks": args.cpu_blocks,
        "integration": args.integration,
        "policies": {},
    }
    with tempfile.TemporaryDirectory() as directory:
        model_dir = build_tiny_model(Path(directory) / "model")
        for policy in policies:
            report["policies"][policy] = {
                "vllm": run_engine(model_dir, requests, args, policy),
                "replay": predicted(requests, args, policy),
            }
        if tier_configs:
            report["tier_policy"] = args.tier_policy
            try:
                report["tiers"] = run_tier_configs(model_dir, Path(directory), requests, args, tier_configs)
            except RedisServerMissing:
                print(f"vllm_mooncake: --tiers {args.tiers} needs redis-server: {INSTALL_HINT}", file=sys.stderr)
                return 2
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
