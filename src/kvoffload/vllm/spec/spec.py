"""``KVOffloadSpec``: kvoffload's manager, policies and mover inside vLLM's own OffloadingConnector.

Turn it on with (``vllm serve ... --kv-transfer-config '<json>'``, or ``LLM(kv_transfer_config=...)``)::

    {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
     "kv_connector_extra_config": {"spec_module_path": "kvoffload.vllm.spec",
                                   "spec_name": "KVOffloadSpec",
                                   "num_cpu_blocks": 4096, "eviction_policy": "doorkeeper_lfu",
                                   "block_size": 64}}

``kv_connector_extra_config`` keys read here: ``num_cpu_blocks`` (CPU chunks) or
``cpu_bytes_to_use`` (bytes, turned into chunks), ``eviction_policy`` (a kvoffload policy name,
default ``doorkeeper_lfu``), ``verify_loads`` (true: the worker checks every loaded block's bytes
against the digest of what was stored, :mod:`kvoffload.dataplane.integrity`), ``cpu_kernel``
(false: the mover copies with torch on CPU instead of the numba kernel); vLLM itself reads
``block_size`` (tokens per offloaded chunk, a multiple of the engine's block size).
``file_tier`` and ``redis_tier`` add secondary tiers below the CPU tier, with the same settings and
checks as :class:`~kvoffload.vllm.connector.KVOffloadConnector` (:mod:`kvoffload.vllm.tier_settings`).

The scheduler side gets :class:`~kvoffload.vllm.spec.manager_adapter.StrictManagerAdapter`; the worker
side :class:`~kvoffload.vllm.spec.mover_worker.MoverWorker` on the engine's KV tensors. With tiers the
scheduler side gets :class:`~kvoffload.vllm.spec.tiers.TieredManagerAdapter`, which runs the tier
I/O itself on the workers' CPU pools, shared through /dev/shm (:mod:`kvoffload.vllm.spec.shared_pool`):
vLLM's OffloadingConnector carries no tier jobs or outcomes between the processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from vllm.v1.kv_offload.base import CanonicalKVCaches, OffloadingManager, OffloadingSpec, OffloadingWorker
from vllm.v1.kv_offload.config import OffloadingConfig, OffloadingGroupConfig

from kvoffload.dataplane.integrity import LoadVerifier
from kvoffload.dataplane.mover import BlockMover
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.policies import POLICIES
from kvoffload.offload.types import DEFAULT_POLICY
from kvoffload.vllm.kv_groups import declared_kinds
from kvoffload.vllm.metrics import SPEC_COUNTERS, configured_tiers
from kvoffload.vllm.settings import ConfigError, flag
from kvoffload.vllm.spec.manager_adapter import StrictManagerAdapter
from kvoffload.vllm.spec.mover_worker import MoverWorker
from kvoffload.vllm.spec.shared_pool import create_pool, open_pool, pool_path
from kvoffload.vllm.tier_io import LayerChunks, WorkerTiers, open_backends, writer_id
from kvoffload.vllm.tier_manager import tiering_manager
from kvoffload.vllm.tier_settings import tier_settings


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


def tier_layout(layout: str, group_kinds: tuple[str, ...]) -> str:
    """The layout name of the tiers' namespace: ``layout`` and, unless the engine has one group of
    full attention, each group's kind (its sliding window), which the layout cannot name: engines
    of one model with other windows keep the same groups and layers, but other KV."""
    return layout if group_kinds == ("full",) else f"{layout}/{'+'.join(group_kinds)}"


def spec_layout(config: OffloadingConfig) -> str:
    """A name of the KV layout one chunk has in this engine, for the tiers' namespace (dtype,
    layers, one worker's bytes per block, block tokens, blocks per chunk, tensor-parallel size)."""
    group = config.groups[0]
    layout = (
        f"spec/{config.model.dtype}/l{len(group.layer_names)}/w{config.worker_kv_bytes_per_block}"
        f"/b{group.tokens_per_block}x{config.cache.blocks_per_chunk}/tp{config.parallel.tp_size}"
    )
    # vLLM's keys carry their group's index; another group layout must still never read these chunks.
    return layout if len(config.groups) == 1 else f"{layout}/g{len(config.groups)}"


def check_group_pages(groups: Sequence[OffloadingGroupConfig], kv_caches: CanonicalKVCaches) -> None:
    """Raises :class:`ConfigError` unless every group's layers use every KV tensor, each within its
    page. The mover copies a block's whole page row of every tensor: attention groups fill the
    page; a Mamba group's state fills its start (vLLM pads a page at its end, and its own offloading
    worker copies that start), so a copied row holds the state, and the padding copied with it is
    never read."""
    if len(kv_caches.group_data_refs) < 2:
        return
    whole = {index: entry.page_size_bytes for index, entry in enumerate(kv_caches.tensors)}
    for group, refs in zip(groups, kv_caches.group_data_refs, strict=True):
        used = {ref.tensor_idx: ref.page_size_bytes for ref in refs}
        if used.keys() != whole.keys() or any(used[index] > whole[index] for index in used):
            raise ConfigError(
                f"KVOffloadSpec offloads KV cache groups whose layers use every KV tensor's page; group "
                f"{group.group_id} (layers {list(group.layer_names)}) uses pages {used} of {whole}"
            )


class KVOffloadSpec(OffloadingSpec):
    """An ``OffloadingSpec`` whose manager is kvoffload's strict manager and whose worker is
    kvoffload's block mover."""

    @classmethod
    def build_metric_definitions(cls, extra_config: dict[str, Any]) -> dict[str, Any]:
        """What kvoffload adds to vLLM's OffloadingConnector counters in ``/metrics``
        (:data:`kvoffload.vllm.metrics.SPEC_COUNTERS`; the tiers' only with tiers configured)."""
        from vllm.v1.kv_offload.base import OffloadingCounterMetadata

        tiers = bool(configured_tiers(extra_config))
        return {
            counter.name: OffloadingCounterMetadata(documentation=counter.documentation, labelnames=counter.labelnames)
            for counter in SPEC_COUNTERS
            if tiers or counter.labelnames != ("tier",)
        }

    def __init__(self, config: OffloadingConfig) -> None:
        super().__init__(config)
        extra = dict(self.extra_config)
        shapes = {(group.tokens_per_block, len(group.layer_names)) for group in config.groups}
        if len(shapes) != 1:
            raise ConfigError(
                f"KVOffloadSpec needs one block size and layer count for every KV cache group; this model's groups "
                f"have (tokens per block, layers) {sorted(shapes)}"
            )
        self.tier_settings = tier_settings(extra)
        parallel = config.parallel
        if self.tier_settings.any and parallel.world_size != parallel.tp_size:
            raise ConfigError(
                f"KVOffloadSpec with secondary tiers supports tensor parallelism only; {parallel.world_size} "
                f"workers for tensor_parallel_size={parallel.tp_size}"
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
        if self.verify_loads and self.tier_settings.any:
            # The worker's digests come from its stores; a promotion writes the pool from the
            # scheduler process, so a promoted chunk would be refused as damaged.
            raise ConfigError(
                "kv_connector_extra_config['verify_loads'] = true cannot be combined with secondary tiers in "
                "KVOffloadSpec (every promoted chunk is verified against its record instead)"
            )
        self.cpu_kernel = flag(extra, "cpu_kernel", default=True)
        self._manager: StrictManagerAdapter | None = None
        self._worker: MoverWorker | None = None
        # Part of the tiers' namespace: chunks of another layout are never read as this one's.
        self.layout = spec_layout(config)

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
            if self.tier_settings.any:
                self._manager = self._tiered_manager(manager)
            else:
                self._manager = StrictManagerAdapter(manager, self.chunk_tokens, self.policy)
        return self._manager

    def _tiered_manager(self, cpu: CPUOffloadingManager) -> StrictManagerAdapter:
        """The tiering manager over ``cpu``, with the tier I/O of every rank on its shared pool
        (the workers created the pools when they registered their KV caches, before vLLM builds
        the scheduler)."""
        from kvoffload.tiers.record import Namespace
        from kvoffload.vllm.spec.tiers import PoolTiers, TieredManagerAdapter

        world_size = self.config.parallel.world_size
        pools = [open_pool(pool_path(self.config.engine_id, rank)) for rank in range(world_size)]
        for pool in pools:
            pool.unlink()
        chunks = [LayerChunks(pool.layers, self.blocks_per_chunk) for pool in pools]
        chunk_bytes = chunks[0].chunk_bytes
        file_slots = self.tier_settings.file.slots(chunk_bytes) if self.tier_settings.file is not None else 0
        writer = writer_id(self.config.engine_id)
        ranks = []
        for rank, rank_chunks in enumerate(chunks):
            settings = self.tier_settings.for_rank(rank, world_size)
            namespace = Namespace(self.config.model.name, self.tier_namespace_layout(pools[rank].group_kinds), rank)
            backends = open_backends(settings, chunk_bytes, file_slots, namespace, writer)
            ranks.append(WorkerTiers(backends, rank_chunks))
        manager = tiering_manager(cpu, self.tier_settings, file_slots)
        return TieredManagerAdapter(manager, self.chunk_tokens, PoolTiers(ranks), self.policy)

    def tier_namespace_layout(self, group_kinds: tuple[str, ...]) -> str:
        """The layout name in the tiers' namespace (:func:`tier_layout`), from the groups' kinds the
        worker wrote in its pool; a hook for tests."""
        return tier_layout(self.layout, group_kinds)

    def make_mover(
        self, layers: Sequence[torch.Tensor], num_cpu_blocks: int, cpu_layers: Sequence[torch.Tensor] | None = None
    ) -> BlockMover:
        """The mover on the engine's per-layer block tensors, its CPU pool ``cpu_layers`` when given
        (a hook for tests and subclasses)."""
        return BlockMover(layers, num_cpu_blocks, cpu_layers=cpu_layers, cpu_kernel=self.cpu_kernel)

    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        if self._worker is None:
            layers = [entry.tensor for entry in kv_caches.tensors]
            for index, layer in enumerate(layers):
                if not layer.is_contiguous():
                    raise ConfigError(
                        f"KV tensor {index} of shape {tuple(layer.shape)} has strides {layer.stride()}: "
                        "KVOffloadSpec needs each block's page contiguous (no packed layouts)"
                    )
            check_group_pages(self.config.groups, kv_caches)
            rows = self.num_cpu_blocks * self.blocks_per_chunk
            if self.tier_settings.any:
                path = pool_path(self.config.engine_id, self.config.parallel.rank)
                kinds = declared_kinds([group.layer_names for group in self.config.groups])
                pool = create_pool(path, [int(layer.shape[1]) for layer in layers], rows, kinds)
                mover = self.make_mover(layers, rows, pool.layers)
                release = pool.unlink
            else:
                mover = self.make_mover(layers, rows)
                release = None
            verifier = LoadVerifier(layers, mover.cpu_layers) if self.verify_loads else None
            self._worker = MoverWorker(mover, self.blocks_per_chunk, verifier, release)
        return self._worker
