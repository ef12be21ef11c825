"""The vLLM objects every connector's check builds, whatever the connector: the checks' tiny model
(a hand-written ``config.json``, no weights: the connectors only read its shape), one layer's KV
tensor, and the ``ModelRunnerOutput`` of one step; each chooses fields by the release's own
dataclasses, 0.26.0 to 0.34.0.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from dataclasses import fields
from functools import cache
from pathlib import Path
from typing import Any

# A model small enough that one KV page is a few hundred bytes; vLLM only reads its shape.
_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 1,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "float32",
}
LAYER = "model.layers.0.self_attn.attn"


@cache
def _model_dir() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="kvoffload-vllm-model-"))
    atexit.register(shutil.rmtree, folder, True)
    (folder / "config.json").write_text(json.dumps(_MODEL_CONFIG))
    return folder


@cache
def model_config() -> Any:
    """vLLM's ``ModelConfig`` of the checks' tiny model (the connectors' checks share it)."""
    # Built once per process: vLLM inspects the architecture in a subprocess (~20 s).
    from vllm.config import ModelConfig

    folder = str(_model_dir())
    return ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype="float32", max_model_len=4096)


def kv_cache_tensor(page_bytes: int, num_blocks: int) -> Any:
    """One layer's KV tensor; its fields changed after 0.26 (``shared_by`` became ``layers`` plus strides),
    so they are chosen by the dataclass's own field names."""
    from vllm.v1.kv_cache_interface import KVCacheTensor

    names = {field.name for field in fields(KVCacheTensor)}
    size = page_bytes * num_blocks
    if "shared_by" in names:
        return KVCacheTensor(size=size, shared_by=[LAYER])
    return KVCacheTensor(size=size, layers=[LAYER], layer_stride=size, block_stride=page_bytes)


def scheduler_output_fields(cls: type, values: dict[str, Any]) -> dict[str, Any]:
    """The ``values`` dataclass ``cls`` has fields for (the fields of ``SchedulerOutput`` and
    ``ModelRunnerOutput`` differ by release)."""
    names = {f.name for f in fields(cls)}
    return {name: value for name, value in values.items() if name in names}


def model_runner_output(scheduler_output: Any, sampled: dict[str, list[int]], connector_output: Any) -> Any:
    """vLLM's ``ModelRunnerOutput`` of one step: each scheduled request's sampled tokens, and the
    connector's output."""
    from vllm.v1.outputs import ModelRunnerOutput

    request_ids = list(scheduler_output.num_scheduled_tokens)
    # 0.34.0 dropped req_id_to_index (the index is the position in req_ids).
    return ModelRunnerOutput(**scheduler_output_fields(ModelRunnerOutput, {
        "req_ids": request_ids,
        "req_id_to_index": {rid: i for i, rid in enumerate(request_ids)},
        "sampled_token_ids": [sampled[rid] for rid in request_ids],
        "logprobs": None,
        "prompt_logprobs_dict": {},
        "pooler_output": [],
        "kv_connector_output": connector_output,
    }))


def warm_up() -> None:
    """Build the model config once (vLLM inspects the architecture in a subprocess), so the
    checkers' timings do not include it."""
    model_config()
