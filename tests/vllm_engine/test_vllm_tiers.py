"""Secondary tiers behind KVOffloadConnector in a real vLLM engine (``make check-vllm-tiers``).

The CPU tier (16 chunks, LRU) is too small to keep prompt A through a flood of unrelated prompts,
so A's re-run can only come back from the file or Redis tier. Every run must give the greedy
token ids of the run without offloading, and the tier must have served A (the connector's
promotion counters and vLLM's ``vllm:external_prefix_cache_hits``).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-tiers` installs it in .venv-vllm")

from kvoffload.vllm.harness import Engine, EngineReport, build_tiny_model, connector_transfer_config, run_batches

BLOCK_SIZE = 32
GPU_BLOCKS = 48
CPU_CHUNKS = 16
MAX_TOKENS = 16
PROMPT_A_TOKENS = 320
# kvoffload's scheduler leaves the chunk holding the last prompt token to the engine.
SERVED = (PROMPT_A_TOKENS - 1) // BLOCK_SIZE * BLOCK_SIZE
FILE_TIER_BYTES = 16 << 20


def _workload(seed: int = 7) -> list[list[list[int]]]:
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1000) for _ in range(n)]

    prompt_a = tokens(PROMPT_A_TOKENS)
    return [[prompt_a], [tokens(320) for _ in range(12)], [prompt_a]]


WORKLOAD = _workload()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def _run(model_dir: Path, config: dict | None, workload: list[list[list[int]]] = WORKLOAD) -> EngineReport:
    engine = Engine(model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS)
    try:
        return run_batches(engine, workload, MAX_TOKENS)
    finally:
        engine.shutdown()


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> EngineReport:
    report = _run(model_dir, None)
    assert report.cached_tokens[-1] == [0], "A must be evicted from the GPU prefix cache by the workload"
    return report


def tier_config(tiers: dict) -> dict:
    return connector_transfer_config(CPU_CHUNKS, "lru", tiers=tiers)


def check_served_by(baseline: EngineReport, report: EngineReport, tier: str) -> None:
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    assert report.violations == [], report.violations
    assert report.leaks == [], report.leaks
    assert report.cached_tokens[-1] == [SERVED], "A's re-run was not served from the offload tiers"
    assert report.external_hit_tokens >= SERVED
    assert report.kvoffload["tiers"][tier]["promoted_keys"] >= SERVED // BLOCK_SIZE, report.kvoffload["tiers"]


def test_file_tier_serves_what_the_cpu_tier_lost(model_dir: Path, baseline: EngineReport, tmp_path: Path) -> None:
    tiers = {"file_tier": {"path": str(tmp_path / "kv.tier"), "size_bytes": FILE_TIER_BYTES}}
    report = _run(model_dir, tier_config(tiers))
    check_served_by(baseline, report, "file")
