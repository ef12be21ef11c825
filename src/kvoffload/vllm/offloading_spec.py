"""``KVOffloadSpec``: kvoffload's manager, policies and mover inside vLLM's own OffloadingConnector.

Turn it on with (``vllm serve ... --kv-transfer-config '<json>'``, or ``LLM(kv_transfer_config=...)``)::

    {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
     "kv_connector_extra_config": {"spec_module_path": "kvoffload.vllm.offloading_spec",
                                   "spec_name": "KVOffloadSpec",
                                   "num_cpu_blocks": 4096, "eviction_policy": "doorkeeper_lfu",
                                   "block_size": 64}}

``kv_connector_extra_config`` keys read here: ``num_cpu_blocks`` (CPU chunks) or
``cpu_bytes_to_use`` (bytes, turned into chunks), ``eviction_policy`` (a kvoffload policy name,
default ``doorkeeper_lfu``), ``verify_loads`` (true: the worker checks every loaded block's bytes
against the digest of what was stored, :mod:`kvoffload.dataplane.integrity`), ``cpu_kernel``
(false: the mover copies with torch on CPU instead of the numba kernel); vLLM itself reads
``block_size`` (tokens per offloaded chunk, a multiple of the engine's block size).

The scheduler side gets :class:`~kvoffload.vllm.manager_adapter.StrictManagerAdapter`; the worker
side :class:`~kvoffload.vllm.mover_worker.MoverWorker` on the engine's KV tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from vllm.v1.kv_offload.base import CanonicalKVCaches, OffloadingManager, OffloadingSpec, OffloadingWorker
from vllm.v1.kv_offload.config import OffloadingConfig

from kvoffload.dataplane.integrity import LoadVerifier
from kvoffload.dataplane.mover import BlockMover
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.policies import POLICIES
from kvoffload.offload.types import DEFAULT_POLICY
from kvoffload.vllm.manager_adapter import StrictManagerAdapter
from kvoffload.vllm.mover_worker import MoverWorker
from kvoffload.vllm.settings import ConfigError, flag


def _positive_int(extra: dict[str, Any], key: str) -> int | None:
    value = extra.get(key)
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"kv_connector_extra_config[{key!r}] must be a positive integer, got {value!r}") from None
    if number < 1:
        raise ConfigError(f"kv_connector_extra_config[{key!r}] must be a positive integer, got {value!r}")
    return number


class KVOffloadSpec(OffloadingSpec):
    """An ``OffloadingSpec`` whose manager is kvoffload's strict manager and whose worker is
    kvoffload's block mover."""

    def __init__(self, config: OffloadingConfig) -> None:
        super().__init__(config)
        extra = dict(self.extra_config)
        if len(config.groups) != 1:
            raise ConfigError(
                f"KVOffloadSpec supports models with one KV cache group; this one has {len(config.groups)}"
            )
        tiers = sorted(key for key in ("file_tier", "redis_tier") if key in extra)
        if tiers:
            # vLLM's OffloadingConnector carries no metadata of ours to the worker, where the CPU
            # tier's bytes are: tier I/O has no channel here yet (docs/design.md, vLLM tiers).
            raise ConfigError(
                f"kv_connector_extra_config[{tiers[0]!r}]: KVOffloadSpec has no secondary tiers yet; "
                "use KVOffloadConnector for file and Redis tiers"
            )
        self.policy = str(extra.get("eviction_policy", DEFAULT_POLICY))
        if self.policy not in POLICIES:
            raise ConfigError(
                f"kv_connector_extra_config['eviction_policy'] = {self.policy!r} is not a kvoffload policy; "
                f"known: {', '.join(sorted(POLICIES))}"
            )
        self.num_cpu_blocks = self._num_chunks(extra, config.worker_kv_bytes_per_block)
        self.chunk_tokens = config.groups[0].tokens_per_block * self.blocks_per_chunk
        self.verify_loads = flag(extra, "verify_loads")
        self.cpu_kernel = flag(extra, "cpu_kernel", default=True)
        self._manager: StrictManagerAdapter | None = None
        self._worker: MoverWorker | None = None

    def _num_chunks(self, extra: dict[str, Any], bytes_per_block: int) -> int:
        chunks = _positive_int(extra, "num_cpu_blocks")
        if chunks is not None:
            return chunks
        budget = _positive_int(extra, "cpu_bytes_to_use")
        if budget is None:
            raise ConfigError("kv_connector_extra_config needs 'num_cpu_blocks' or 'cpu_bytes_to_use'")
        chunk_bytes = bytes_per_block * self.blocks_per_chunk
        if chunk_bytes <= 0:
            raise ConfigError("cpu_bytes_to_use needs the KV size per block, unknown here: give num_cpu_blocks")
        if budget < chunk_bytes:
            raise ConfigError(f"cpu_bytes_to_use={budget} is less than one chunk ({chunk_bytes} bytes)")
        return budget // chunk_bytes

    def get_manager(self) -> OffloadingManager:
        if self._manager is None:
            manager = CPUOffloadingManager(
                self.num_cpu_blocks, self.policy, enable_events=self.kv_events_config.enable_kv_cache_events
            )
            self._manager = StrictManagerAdapter(manager, self.chunk_tokens)
        return self._manager

    def make_mover(self, layers: Sequence[torch.Tensor], num_cpu_blocks: int) -> BlockMover:
        """The mover on the engine's per-layer block tensors (a hook for tests and subclasses)."""
        return BlockMover(layers, num_cpu_blocks, cpu_kernel=self.cpu_kernel)

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._worker is None:
            layers = [entry.tensor for entry in kv_caches.tensors]
            for index, layer in enumerate(layers):
                if not layer.is_contiguous():
                    raise ConfigError(
                        f"KV tensor {index} of shape {tuple(layer.shape)} has strides {layer.stride()}: "
                        "KVOffloadSpec needs each block's page contiguous (no packed layouts)"
                    )
            mover = self.make_mover(layers, self.num_cpu_blocks * self.blocks_per_chunk)
            verifier = LoadVerifier(layers, mover.cpu_layers) if self.verify_loads else None
            self._worker = MoverWorker(mover, self.blocks_per_chunk, verifier)
        return self._worker
