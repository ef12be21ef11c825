"""A sliding-window + full-attention model (Gemma 3 style) in a real vLLM engine with its hybrid KV
cache manager on (``make check-vllm-engine``): KVOffloadConnector offloads every group's blocks of
a chunk and loads them back, KVOffloadSpec copies each group's chunks vLLM's OffloadingConnector
picks, and in both the outputs equal the run without offloading token for token.

The model: a tiny random-weight Gemma 3 with four layers, sliding window 64 and full attention
alternating, so vLLM makes two KV cache groups and frees the sliding-window blocks that leave the
window while a request runs. The workload: two prompts sharing a 192-token prefix (longer than the
window); a flood of unrelated prompts that evicts them from the engine's prefix cache; second
turns of both prompts, which must be served from the offload tier.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from kvoffload_lab.vllm.common.engine import (
    EngineReport,
    InProcessEngine,
    connector_transfer_config,
    run_batches,
    save_random_model,
    shared_prefix_workload,
    spec_transfer_config,
)

BLOCK_SIZE = 32
GPU_BLOCKS = 48
# Both groups draw on the one block pool: the longest request it holds is shorter than 48 blocks.
MAX_MODEL_LEN = 512
CPU_CHUNKS = 64
MAX_TOKENS = 12
WINDOW = 64
PREFIX_TOKENS = 192
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
    # Gemma scales its input embeddings up: with tied output embeddings the logits then favour the
    # last input token and greedy decoding repeats it whatever the context, so a wrong KV would
    # not show in the outputs.
    "tie_word_embeddings": False,
}


def _workload() -> list[list[list[int]]]:
    return shared_prefix_workload(PREFIX_TOKENS, [320] * 8)


WORKLOAD = _workload()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    return save_random_model(Gemma3ForCausalLM, Gemma3TextConfig(**GEMMA3), tmp_path_factory.mktemp("tiny-gemma3"))


def run_gemma3(
    model_dir: Path,
    config: dict[str, Any] | None,
    workload: list[list[list[int]]] = WORKLOAD,
    hf_overrides: dict[str, Any] | None = None,
) -> tuple[EngineReport, Any]:
    """``workload`` through the tiny Gemma 3 (``hf_overrides``: e.g. another sliding window); the
    report, and whether HMA is on with how many KV cache groups."""
    engine = InProcessEngine(
        model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS, max_model_len=MAX_MODEL_LEN,
        hf_overrides=hf_overrides,
    )
    try:
        core = engine.core
        hybrid = (
            not core.vllm_config.scheduler_config.disable_hybrid_kv_cache_manager,
            len(core.scheduler.kv_cache_config.kv_cache_groups),
        )
        return run_batches(engine, workload, MAX_TOKENS), hybrid
    finally:
        engine.shutdown()


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> EngineReport:
    report, hybrid = run_gemma3(model_dir, None)
    assert hybrid == (True, 2), "vLLM's hybrid KV cache manager must make two groups of this model"
    assert report.cached_tokens[2] == [0, 0], "the flood must evict both prompts from the GPU prefix cache"
    return report


def test_kvoffload_connector_sliding_window_and_full_attention(model_dir: Path, baseline: EngineReport) -> None:
    report, hybrid = run_gemma3(model_dir, connector_transfer_config(CPU_CHUNKS))
    assert hybrid == (True, 2), "KVOffloadConnector must keep vLLM's hybrid KV cache manager on"
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    # Both second turns load at least the shared prefix's chunks (every group's blocks) from CPU.
    for served in report.cached_tokens[2]:
        assert served >= PREFIX_TOKENS, f"second turns served {report.cached_tokens[2]} tokens from cache"
    assert report.external_hit_tokens >= 2 * PREFIX_TOKENS
    assert report.kvoffload["scheduler"]["loaded_chunks"] >= 2 * PREFIX_TOKENS // BLOCK_SIZE
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"


@pytest.mark.parametrize("mutant", ["OneGroupLoadConnector", "SecondGroupLoadConnector"])
def test_negative_control_loading_one_group_changes_the_outputs(
    model_dir: Path, baseline: EngineReport, mutant: str
) -> None:
    """A load that copies only one group's blocks back must change the second turns' outputs: each
    group's part of a chunk is needed."""
    config = connector_transfer_config(CPU_CHUNKS, connector_module="vllm_group_mutants", connector_name=mutant)
    report, _ = run_gemma3(model_dir, config)
    # The second turns did load (so the difference below is about the bytes, not a missed hit) ...
    assert all(served >= PREFIX_TOKENS for served in report.cached_tokens[2])
    # ... and what they generated differs from the run without offloading.
    assert report.outputs[:-2] == baseline.outputs[:-2]
    assert report.outputs[-2:] != baseline.outputs[-2:], "loading one group's blocks went unnoticed"


def test_kvoffload_spec_sliding_window_and_full_attention(model_dir: Path, baseline: EngineReport) -> None:
    """KVOffloadSpec inside vLLM's OffloadingConnector: vLLM's scheduler picks each group's chunks
    (keys carry the group), kvoffload's manager holds them and its mover copies each group's blocks."""
    report, hybrid = run_gemma3(model_dir, spec_transfer_config(CPU_CHUNKS))
    assert hybrid == (True, 2), "vLLM's OffloadingConnector keeps its hybrid KV cache manager on"
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    for served in report.cached_tokens[2]:
        assert served >= PREFIX_TOKENS, f"second turns served {report.cached_tokens[2]} tokens from cache"
    assert report.kvoffload["manager"]["loaded_keys"] >= 1
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"


def test_negative_control_the_spec_copying_one_group_changes_the_outputs(
    model_dir: Path, baseline: EngineReport
) -> None:
    config = spec_transfer_config(CPU_CHUNKS, spec_module="vllm_group_mutants", spec_name="FirstGroupSpec")
    report, _ = run_gemma3(model_dir, config)
    assert all(served >= PREFIX_TOKENS for served in report.cached_tokens[2])
    assert report.outputs[:-2] == baseline.outputs[:-2]
    assert report.outputs[-2:] != baseline.outputs[-2:], "copying one group's blocks went unnoticed"
