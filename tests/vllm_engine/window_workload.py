"""The workload of the sliding-window engine tests (test_vllm_window.py, test_vllm_gpt_oss.py):
a prompt whose prefix is several windows long, a neighbour that takes the prompt's freed window
blocks before its chunks are stored, a flood that evicts the prefix from vLLM's prefix cache, and
the prompt's second turn, which must be served from the offload tier."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.common.engine import EngineReport, InProcessEngine, random_prompts, run_batches

BLOCK_SIZE = 32
# 39 usable blocks: the prompt's prefill leaves fewer free blocks than the neighbour needs, so
# vLLM admits the neighbour the next step, from the blocks never used and the window blocks the
# prompt has just freed.
GPU_BLOCKS = 40
MAX_MODEL_LEN = 512
CPU_CHUNKS = 96
MAX_TOKENS = 8


def workload(prefix_tokens: int, seed: int = 5) -> list[list[list[int]]]:
    """Three batches: [prompt, neighbour], the flood, [the prompt's second turn]."""
    rng = random.Random(seed)
    prefix, tail, neighbour, *flood = random_prompts(rng, [prefix_tokens, 40, 300, *[360] * 6])
    first = prefix + tail
    return [[first, neighbour], flood, [first + random_prompts(rng, [24])[0]]]


def run(model_dir: Path, config: dict[str, Any] | None, batches: list[list[list[int]]]) -> EngineReport:
    """The batches through an engine with two KV cache groups (sliding window and full attention)."""
    engine = InProcessEngine(
        model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS, max_model_len=MAX_MODEL_LEN
    )
    try:
        specs = [type(group.kv_cache_spec).__name__ for group in engine.core.scheduler.kv_cache_config.kv_cache_groups]
        assert sorted(specs) == ["FullAttentionSpec", "SlidingWindowSpec"], f"vLLM made the KV cache groups {specs}"
        return run_batches(engine, batches, MAX_TOKENS)
    finally:
        engine.shutdown()
