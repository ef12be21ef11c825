"""Prefixes several sliding windows long in a real vLLM engine with its hybrid KV cache manager on
(``make check-vllm-engine``): KVOffloadConnector stores the full-attention part of every chunk and
the sliding-window part only where vLLM still held it, offers a hit only where the last window
before its end is stored, and the outputs equal the run without offloading token for token.

The workload: two prompts sharing a 320-token prefix (five windows of 64 tokens); a flood of
unrelated prompts that evicts them from the engine's prefix cache; second turns of both prompts.
vLLM frees a window block as soon as it leaves the window and gives it out again, so most of the
prefix's window blocks are gone before their chunks are stored: before window-aware stores, a
chunk naming a freed window block was not stored at all and the second turns got 64 tokens each
from the offload tier; now they get the whole prefix.

The model: a tiny random-weight Gemma 3 (four layers, sliding window 64 and full attention
alternating). A gpt-oss style model runs the same rules with window 128 (:func:`test_gpt_oss`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from kvoffload.vllm.harness import (
    WEIGHT_SCALE,
    Engine,
    EngineReport,
    connector_transfer_config,
    run_batches,
    spec_transfer_config,
)

BLOCK_SIZE = 32
GPU_BLOCKS = 40
MAX_MODEL_LEN = 512
CPU_CHUNKS = 96
MAX_TOKENS = 8
WINDOW = 64
PREFIX_TOKENS = 320
# What the old rule (a chunk naming a freed window block is not stored) served each second turn.
OLD_RULE_TOKENS = 64
GEMMA3 = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1000,
    "max_position_embeddings": 8192,
    "sliding_window": WINDOW,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    # Untied output embeddings: see test_vllm_hybrid.py (Gemma's scaled embeddings).
    "tie_word_embeddings": False,
}


def _workload(prefix_tokens: int, seed: int = 5) -> list[list[list[int]]]:
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1000) for _ in range(n)]

    first = tokens(prefix_tokens) + tokens(40)
    # Admitted the step after the first prompt's prefill, when vLLM has just freed the first
    # prompt's window blocks: it gets some of them before the first prompt's chunks are stored.
    neighbour = tokens(300)
    flood = [tokens(360) for _ in range(6)]
    return [[first, neighbour], flood, [first + tokens(24)]]


WORKLOAD = _workload(PREFIX_TOKENS)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    directory = tmp_path_factory.mktemp("tiny-gemma3-window")
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(Gemma3TextConfig(**GEMMA3))
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.mul_(WEIGHT_SCALE)
    model.save_pretrained(directory)
    return directory


def run(model_dir: Path, config: dict[str, Any] | None, workload: list[list[list[int]]] = WORKLOAD) -> EngineReport:
    engine = Engine(model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS, max_model_len=MAX_MODEL_LEN)
    try:
        groups = len(engine.core.scheduler.kv_cache_config.kv_cache_groups)
        assert groups == 2, f"vLLM made {groups} KV cache groups of a sliding-window + full-attention model"
        return run_batches(engine, workload, MAX_TOKENS)
    finally:
        engine.shutdown()


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> EngineReport:
    report = run(model_dir, None)
    assert report.cached_tokens[2] == [0], "the flood must evict the first prompt from the GPU prefix cache"
    return report


@pytest.fixture(scope="module")
def connector(model_dir: Path) -> EngineReport:
    return run(model_dir, connector_transfer_config(CPU_CHUNKS))


def test_the_connector_serves_a_prefix_several_windows_long(connector: EngineReport, baseline: EngineReport) -> None:
    assert connector.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    served = connector.cached_tokens[2]
    assert all(tokens >= PREFIX_TOKENS for tokens in served), f"second turns served {served} tokens"
    assert min(served) > OLD_RULE_TOKENS
    assert connector.violations == [], "kvoffload recorded lifecycle violations"
    assert connector.leaks == [], "kvoffload state left behind after the engine drained"


def test_chunks_past_the_window_are_stored_without_their_window_part(connector: EngineReport) -> None:
    scheduler = connector.kvoffload["scheduler"]
    assert scheduler["windowless_chunks"] > 0, "every chunk kept its window blocks: the workload tests nothing"
    assert scheduler["loaded_chunks"] >= 2 * PREFIX_TOKENS // BLOCK_SIZE


def test_negative_control_marking_window_blocks_loaded_without_loading_them(
    model_dir: Path, baseline: EngineReport
) -> None:
    """A worker that skips the window group's blocks of every load (vLLM still counts them as
    computed) must change the second turns' outputs."""
    config = connector_transfer_config(
        CPU_CHUNKS, connector_module="vllm_group_mutants", connector_name="WindowSkippingLoadConnector"
    )
    report = run(model_dir, config)
    assert all(tokens >= PREFIX_TOKENS for tokens in report.cached_tokens[2])
    assert report.outputs[:-1] == baseline.outputs[:-1]
    assert report.outputs[-1:] != baseline.outputs[-1:], "window blocks marked loaded without loading went unnoticed"


def test_the_spec_through_vllms_offloading_connector(model_dir: Path, baseline: EngineReport) -> None:
    """vLLM's OffloadingConnector decides what KVOffloadSpec stores and loads; token for token."""
    report = run(model_dir, spec_transfer_config(CPU_CHUNKS))
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"
