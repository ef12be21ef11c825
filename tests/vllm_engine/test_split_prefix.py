"""A prefix split between vLLM's GPU prefix cache and the CPU tier, in a real engine: an ordinary
chat workload whose users share a system prompt (``make check-vllm-engine``).

Twelve users send a first turn (system prompt + their own tokens), unrelated prompts flood the
GPU prefix cache, then each user sends a second turn (the first + new tokens). The first second
turn loads the whole first turn from the CPU tier; the others wait for that load (their system
prompt is being loaded), then find the system prompt in the GPU prefix cache and load only their
own blocks from the CPU tier. Every output must equal the run without offloading.

This workload served wrong KV before the scheduler's ordering rule 9: vLLM caches a block when its
tokens are scheduled, so in the first turn each user after the first hit the system-prompt blocks
that the first user was computing in the same step, and kvoffload stored them before that step's
forward pass wrote them (the manager then skipped the first user's correct store of those keys).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from vllm_partial_chunk import PrefixCacheGuardConnector

from kvoffload_lab.vllm.common.engine import (
    EngineReport,
    InProcessEngine,
    build_tiny_model,
    connector_transfer_config,
    run_batches,
    spec_transfer_config,
)

BLOCK_SIZE = 32
GPU_BLOCKS = 48
CPU_CHUNKS = 1024
USERS = 12
MAX_TOKENS = 12


def chat_workload(system_tokens: int, seed: int = 7) -> list[list[list[int]]]:
    """First turns, a flood of unrelated prompts, second turns."""
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1000) for _ in range(n)]

    system = tokens(system_tokens)
    first = [system + tokens(96) for _ in range(USERS)]
    flood = [tokens(352) for _ in range(16)]
    return [first, flood, [prompt + tokens(64) for prompt in first]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def _run(model_dir: Path, workload: list[list[list[int]]], config: dict | None) -> EngineReport:
    engine = InProcessEngine(model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS, max_num_seqs=4)
    connector = engine.scheduler_connector
    guarded = isinstance(connector, PrefixCacheGuardConnector)
    if guarded:
        connector.block_pool = engine.core.scheduler.kv_cache_manager.block_pool
    try:
        report = run_batches(engine, workload, MAX_TOKENS)
    finally:
        engine.shutdown()
    if guarded:
        report.violations += connector.prefix_cache_writes
    return report


def _guarded_config(connector_name: str = "PrefixCacheGuardConnector") -> dict:
    """Chunks of two blocks; every load checked against vLLM's prefix cache (vllm_partial_chunk.py)."""
    return connector_transfer_config(
        CPU_CHUNKS, blocks_per_chunk=2, verify_loads=True, connector_module="vllm_partial_chunk",
        connector_name=connector_name,
    )


@pytest.fixture(scope="module")
def baselines(model_dir: Path) -> dict[int, EngineReport]:
    """The run without offloading, per system-prompt length."""
    return {system: _run(model_dir, chat_workload(system), None) for system in (192, 160)}


def _assert_same_outputs(baseline: EngineReport, report: EngineReport) -> None:
    differing = [i for i, (a, b) in enumerate(zip(baseline.outputs, report.outputs, strict=True)) if a != b]
    assert not differing, f"requests {differing} differ from the run without offloading"
    assert report.violations == [] and report.leaks == []


def test_connector_serves_a_prefix_split_between_gpu_cache_and_cpu_tier(
    model_dir: Path, baselines: dict[int, EngineReport]
) -> None:
    baseline = baselines[192]
    report = _run(model_dir, chat_workload(192), connector_transfer_config(CPU_CHUNKS, verify_loads=True))
    _assert_same_outputs(baseline, report)
    second = report.cached_tokens[2]
    # The engine alone keeps only the system prompt; with the tier the whole first turn is served.
    assert baseline.cached_tokens[2][1:] == [192] * (USERS - 1)
    assert second == [288] * USERS
    scheduler = report.kvoffload["scheduler"]
    # One load of all 9 blocks, then one load of 3 blocks behind a GPU hit per other user ...
    assert scheduler["loads"] == USERS
    assert scheduler["loaded_chunks"] == 9 + 3 * (USERS - 1)
    # ... which first waited for the system prompt that the first user was loading.
    assert scheduler["deferred_lookups"] >= USERS - 1


def test_connector_with_two_block_chunks(model_dir: Path, baselines: dict[int, EngineReport]) -> None:
    """The GPU hit (192 tokens, 3 chunks of 64) ends on a chunk boundary; the users' own chunk loads."""
    config = connector_transfer_config(CPU_CHUNKS, blocks_per_chunk=2, verify_loads=True)
    report = _run(model_dir, chat_workload(192), config)
    _assert_same_outputs(baselines[192], report)
    # 288-token first turns store 4 whole chunks: the system prompt's 3 and 1 of the user's own.
    assert report.cached_tokens[2] == [256] * USERS
    assert report.kvoffload["scheduler"]["loaded_chunks"] == 4 + (USERS - 1)


def test_connector_when_the_gpu_hit_ends_inside_a_chunk(model_dir: Path, baselines: dict[int, EngineReport]) -> None:
    """A 160-token system prompt is 2.5 chunks of 64: behind that GPU hit, kvoffload's connector
    loads the rest of the third chunk (its second block) and the user's own chunk, and never writes
    a block of vLLM's prefix cache. Before it did, it loaded nothing there (256 tokens in all)."""
    report = _run(model_dir, chat_workload(160), _guarded_config())
    _assert_same_outputs(baselines[160], report)
    # Every second turn is served up to its 4 stored chunks: the first loads all 256 tokens, the
    # others 96 behind their 160-token GPU hit, as vLLM's OffloadingConnector does.
    assert report.cached_tokens[2] == [256] * USERS
    assert report.external_hit_tokens == 256 + 96 * (USERS - 1)
    scheduler = report.kvoffload["scheduler"]
    assert scheduler["hit_tokens"] == report.external_hit_tokens
    assert scheduler["loads"] == USERS
    assert scheduler["loaded_chunks"] == 4 + 2 * (USERS - 1)


def test_a_connector_writing_the_whole_first_chunk_is_caught(model_dir: Path) -> None:
    """The negative control: a load that writes the first chunk's blocks vLLM's prefix cache holds."""
    report = _run(model_dir, chat_workload(160), _guarded_config("WholeFirstChunkConnector"))
    assert report.violations, "a load writing vLLM's prefix-cache blocks went unnoticed"
    assert all("writes prefix-cache blocks" in violation for violation in report.violations)


def test_spec_when_the_gpu_hit_ends_inside_a_chunk(model_dir: Path, baselines: dict[int, EngineReport]) -> None:
    """vLLM's OffloadingConnector loads from inside a chunk: the mover skips the chunk's first block."""
    config = spec_transfer_config(CPU_CHUNKS, "lru", 2 * BLOCK_SIZE, verify_loads=True)
    report = _run(model_dir, chat_workload(160), config)
    _assert_same_outputs(baselines[160], report)
    assert report.external_hit_tokens > 0
    # Some second turns got a GPU hit of 160 tokens and the CPU tier's blocks after it.
    assert any(cached > 160 for cached in report.cached_tokens[2][1:])
