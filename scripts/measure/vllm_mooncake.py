"""The Mooncake trace's prefixes through a real vLLM engine, next to what ``kvoffload replay`` predicts.

Run with the vLLM venv (``make check-vllm-engine`` creates it)::

    .venv-vllm/bin/python scripts/measure/vllm_mooncake.py [--start 9500] [--requests 1000] [--gpu-blocks 256] \
        [--cpu-blocks 2048]

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

Prints one JSON object: per policy, vLLM's own counters (prefix-cache hits, external = offload-tier
hits, in blocks and as a share of all full prompt blocks), kvoffload's violations and leaks, and the
replay's prediction for the same requests and sizes.
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

from kvoffload.offload.policies import POLICIES
from kvoffload.tracestudy.bounds import infinite_cache
from kvoffload.tracestudy.mooncake import MOONCAKE_BLOCK_TOKENS, TraceRequest, block_chains, read_trace
from kvoffload.tracestudy.replay import replay_trace
from kvoffload.vllm.harness import (
    Engine,
    build_tiny_model,
    connector_transfer_config,
    kvoffload_state,
    spec_transfer_config,
)

DEFAULT_TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
VOCAB = 1000
# Policies run by vLLM's own CPU manager (vllm_own_offloading_spec.VllmOwnCPUSpec), named "vllm-<its name>".
VLLM_OWN_PREFIX = "vllm-"


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
    engine = Engine(model_dir, config, block_size=args.block_size, num_gpu_blocks=args.gpu_blocks + 1)
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
    parser.add_argument("--policies", default="doorkeeper_lfu,lru,arc,vllm-lru,vllm-arc")
    parser.add_argument("--integration", choices=("connector", "spec"), default="connector")
    args = parser.parse_args(argv)
    if not args.trace.exists():
        print(f"vllm_mooncake: trace {args.trace} not found (expected ../shared/traces/)", file=sys.stderr)
        return 2
    if args.start < 0 or args.requests < 1:
        print(f"vllm_mooncake: --start {args.start} --requests {args.requests}: need START >= 0 and N >= 1",
              file=sys.stderr)
        return 2
    policies = args.policies.split(",")
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
        model_dir = build_tiny_model(Path(directory))
        for policy in policies:
            report["policies"][policy] = {
                "vllm": run_engine(model_dir, requests, args, policy),
                "replay": predicted(requests, args, policy),
            }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
