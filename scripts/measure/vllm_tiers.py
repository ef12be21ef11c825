"""The secondary tiers in a real vLLM engine: one workload, one engine run per configuration; prints JSON.

Run with vLLM's environment (``.venv-vllm/bin/python scripts/measure/vllm_tiers.py``; set
``KVOFFLOAD_REDIS_PORTS=LOW-HIGH`` to keep the private redis-server to those loopback ports).

The workload: four prompts of 320 tokens, each run, then a flood of twelve unrelated prompts that
evicts it from the engine's prefix cache (48 blocks) and from a CPU tier of 16 chunks, then run
again. Configurations: no offloading; kvoffload's connector with the CPU tier only, CPU + file,
CPU + Redis; two engines over Redis (the second runs the workload after the first); and vLLM's own
OffloadingConnector with its own CPU manager (``VllmManagerSpec`` below: vLLM's
``CPUOffloadingManager`` with kvoffload's mover, since vLLM's CPU worker needs CUDA).

Per configuration: the engine steps and the mean wall time per step; the time spent inside the
connector's calls (scheduler side and worker side) per step; the prompt tokens served from vLLM's
prefix cache and from the offload tiers (vLLM's counters) and, for kvoffload's connector, per
secondary tier the tokens it promoted into CPU memory, those a load then used, and those the CPU
tier evicted before any load used them. ``connector_ms_per_step_ratio`` divides kvoffload's
connector time per step by vLLM's own on the same workload (CPU-only configurations).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# vLLM's own log handler writes to stdout, which is the JSON's: leave logging to Python (stderr).
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")

from vllm.v1.kv_offload.base import OffloadingManager, OffloadingMetricMetadata
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager as VllmCPUOffloadingManager
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

from kvoffload.vllm.spec import KVOffloadSpec
from kvoffload_lab.vllm.common.engine import (
    InProcessEngine,
    build_tiny_model,
    connector_transfer_config,
    spec_transfer_config,
)

BLOCK_SIZE = 32
GPU_BLOCKS = 48
CPU_CHUNKS = 16
MAX_TOKENS = 16
SCHEDULER_CALLS = ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
                   "update_connector_output", "request_finished")
WORKER_CALLS = ("handle_preemptions", "start_load_kv", "wait_for_save", "get_finished",
                "get_block_ids_with_load_errors", "build_connector_worker_meta")


class VllmManagerSpec(KVOffloadSpec):
    """vLLM's own CPU manager (LRU) behind vLLM's OffloadingConnector, with kvoffload's mover."""

    @classmethod
    def build_metric_definitions(cls, extra_config: dict[str, Any]) -> dict[str, OffloadingMetricMetadata]:
        # vLLM's CPU manager reports its own metrics; vLLM asserts each one was defined.
        return CPUOffloadingSpec.build_metric_definitions(extra_config)

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.vllm_manager: OffloadingManager | None = None

    def get_manager(self) -> OffloadingManager:
        if self.vllm_manager is None:
            self.vllm_manager = VllmCPUOffloadingManager(self.num_cpu_blocks, "lru")
        return self.vllm_manager


def workload(seed: int = 7) -> list[list[list[int]]]:
    rng = random.Random(seed)

    def tokens() -> list[int]:
        return [rng.randrange(1000) for _ in range(320)]

    batches: list[list[list[int]]] = []
    for _ in range(4):
        prompt = tokens()
        batches += [[prompt], [tokens() for _ in range(12)], [prompt]]
    return batches


class Timer:
    """Wraps named methods of an object and adds up the seconds spent in them."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def wrap(self, target: Any, names: tuple[str, ...]) -> None:
        for name in names:
            method = getattr(target, name, None)
            if method is not None:
                setattr(target, name, self._timed(method))

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        return timed


def step_timers(engine: InProcessEngine) -> tuple[Timer, Timer]:
    """Timers on an in-process engine: its scheduler's steps, and the time inside its connector's
    calls (scheduler side and worker side)."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

    steps = Timer()
    steps.wrap(engine.core.scheduler, ("schedule",))
    connector = Timer()
    if engine.scheduler_connector is not None:
        connector.wrap(engine.scheduler_connector, SCHEDULER_CALLS)
    if has_kv_transfer_group():
        connector.wrap(get_kv_transfer_group(), WORKER_CALLS)
    return steps, connector


def run(model_dir: Path, config: dict[str, Any] | None, batches: list[list[list[int]]]) -> dict[str, Any]:
    """One engine through ``batches``: steps, time per step, connector time, hits by source."""
    engine = InProcessEngine(model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS)
    try:
        steps, connector = step_timers(engine)
        outputs: list[list[int]] = []
        start = time.perf_counter()
        for batch in batches:
            outputs += engine.generate(batch, MAX_TOKENS)[0]
        engine.drain()
        seconds = time.perf_counter() - start
        local, external, _ = engine.counters()
        result: dict[str, Any] = {
            "steps": steps.calls,
            "ms_per_step": round(1000 * seconds / max(steps.calls, 1), 3),
            "connector_ms_per_step": round(1000 * connector.seconds / max(steps.calls, 1), 3),
            "gpu_prefix_hit_tokens": local,
            "offload_hit_tokens": external,
        }
        own = getattr(engine.scheduler_connector, "kvoffload_scheduler", None)
        if own is not None and own.tiers is not None:
            chunk_tokens = own.scheduler.config.chunk_tokens
            # Promoted: read from the tier into CPU memory; loaded: then used by a request's load.
            result["tier_promoted_tokens"] = {
                name: stats.promoted_keys * chunk_tokens for name, stats in own.tiers.tier_stats.items()
            }
            result["tier_loaded_tokens"] = {
                name: stats.loaded_keys * chunk_tokens for name, stats in own.tiers.tier_stats.items()
            }
            result["tier_evicted_before_load_tokens"] = {
                name: stats.evicted_before_load_keys * chunk_tokens for name, stats in own.tiers.tier_stats.items()
            }
        result["outputs"] = outputs
        return result
    finally:
        engine.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7, help="workload seed (default 7)")
    args = parser.parse_args()
    from kvoffload_lab.redis_server import RedisServer

    batches = workload(args.seed)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kvoffload-vllm-tiers-") as directory, RedisServer() as server:
        model_dir = build_tiny_model(Path(directory) / "model")
        file_tier = {"file_tier": {"path": str(Path(directory) / "kv.tier"), "size_bytes": 64 << 20}}
        redis_tier = {"redis_tier": {"url": server.url}}

        def connector(tiers: dict[str, Any] | None = None) -> dict[str, Any]:
            return connector_transfer_config(CPU_CHUNKS, "lru", check_invariants=False, tiers=tiers)

        results["no_offload"] = run(model_dir, None, batches)
        results["kvoffload_cpu"] = run(model_dir, connector(), batches)
        results["kvoffload_cpu_file"] = run(model_dir, connector(file_tier), batches)
        results["kvoffload_cpu_redis"] = run(model_dir, connector(redis_tier), batches)
        server.restart()  # empty, so the second engine's hits are the first engine's chunks
        run(model_dir, connector(redis_tier), batches)
        results["kvoffload_two_engines_redis_second"] = run(model_dir, connector(redis_tier), batches)
        results["vllm_offloading_connector_cpu"] = run(
            model_dir, spec_transfer_config(CPU_CHUNKS, spec_module="vllm_tiers", spec_name="VllmManagerSpec"),
            batches,
        )
    expected = results["no_offload"]["outputs"]
    for result in results.values():
        result["outputs_equal_no_offload"] = result.pop("outputs") == expected
    own = results["kvoffload_cpu"]["connector_ms_per_step"]
    theirs = results["vllm_offloading_connector_cpu"]["connector_ms_per_step"]
    summary = {
        "workload": {"batches": len(batches), "prompt_tokens": sum(len(p) for b in batches for p in b),
                     "gpu_blocks": GPU_BLOCKS, "cpu_chunks": CPU_CHUNKS, "block_size": BLOCK_SIZE},
        "runs": results,
        "connector_ms_per_step_ratio": round(own / theirs, 3) if theirs else None,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
