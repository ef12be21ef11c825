"""``KVOffloadConnector``: kvoffload's own OffloadingScheduler as a complete vLLM KV connector.

Turn it on with::

    {"kv_connector": "KVOffloadConnector", "kv_connector_module_path": "kvoffload.vllm.connector",
     "kv_role": "kv_both",
     "kv_connector_extra_config": {"num_cpu_blocks": 4096, "blocks_per_chunk": 1,
                                   "eviction_policy": "doorkeeper_lfu"}}

(``"check_invariants": true`` also checks kvoffload's invariants after every step, for tests;
``"verify_loads": true`` checks every loaded block's bytes against the digest of what was stored
for its key, raising :class:`~kvoffload.dataplane.integrity.DataIntegrity` on a wrong one;
``"cpu_kernel": false`` makes the mover copy with torch on CPU instead of the numba kernel;
``"file_tier"`` and ``"redis_tier"`` add secondary tiers below the CPU tier:
:mod:`kvoffload.vllm.tier_settings`.)

Secondary tiers: the scheduler side holds the tiering manager (what each tier holds, which
chunks cascade and promote), the worker side does their I/O on the CPU tier's bytes, which live
there. Tier jobs travel down in the step's metadata and their outcomes up in the worker's report,
as GPU<->CPU jobs do, so the same code runs with vLLM's multiprocessing on or off.

Unlike :class:`~kvoffload.vllm.spec.KVOffloadSpec` (kvoffload's manager and mover under vLLM's
scheduler logic), here kvoffload's scheduler makes every decision: the declared lifecycle, the
deferred ``on_request_finished`` signal, the GPU block fence, the preemption flush, the two-phase
reset and failure handling. The two sides talk only through vLLM's connector metadata
(:class:`KVOffloadConnectorMetadata` down, :class:`KVOffloadWorkerMetadata` up).

What vLLM's interface cannot express, and the behaviour chosen:

- kvoffload's ``reset_cache`` cancels in-flight loads and asks the engine to recompute them; vLLM
  cannot be told. The worker still completes those copies before any CPU block is reused (they
  are flushed first), so the KV the engine receives is right; kvoffload only stops tracking them.
- KV cache events (``take_events``) are not published: vLLM's events need per-block token
  metadata that kvoffload's chunk keys do not carry.
- Tensor parallelism: every rank runs the same jobs on its own shard (its tier keys carry its
  rank, its file tier is ``path.rankN``); a job counts as done only when every rank reported it,
  and as succeeded only if it succeeded on every rank (:mod:`kvoffload.vllm.rank_reports`).
  Pipeline parallelism is refused at start.
- A promotion from a secondary tier takes a step (two for Redis: the probe, then the read); the
  request waits meanwhile (``get_num_new_matched_tokens`` answers ``(None, False)``).
- A failed load is reported through ``get_block_ids_with_load_errors``; set vLLM's
  ``kv_load_failure_policy`` to ``"recompute"`` to recompute those tokens (vLLM's default,
  ``"fail"``, fails the request).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
    SupportsHMA,
)

from kvoffload.dataplane.mover import BlockMover
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import DEFAULT_POLICY, ConnectorMetadata, OffloadConfig, RequestId
from kvoffload.tiers.protocol import TierJob
from kvoffload.vllm.connector.scheduler_side import SchedulerSide
from kvoffload.vllm.connector.worker_side import WorkerSide, block_tensors, make_worker
from kvoffload.vllm.kv_groups import VLLM_NULL_BLOCK, KVGroups, interleave, kv_groups
from kvoffload.vllm.metrics import (
    CounterDeltas,
    KVOffloadPromMetrics,
    KVOffloadStats,
    scheduler_counters,
    stats_from_payload,
    worker_counters,
)
from kvoffload.vllm.rank_reports import RankReport
from kvoffload.vllm.settings import ConfigError, flag
from kvoffload.vllm.tier_io import LayerChunks, WorkerTiers, open_backends, writer_id
from kvoffload.vllm.tier_manager import tiering_manager
from kvoffload.vllm.tier_settings import tier_settings


@dataclass
class KVOffloadConnectorMetadata(KVConnectorMetadata):
    """Scheduler -> worker, once per step: kvoffload's jobs and the releases to report as sent."""

    jobs: ConnectorMetadata
    released: tuple[RequestId, ...] = ()
    tier_jobs: tuple[TierJob, ...] = ()


@dataclass
class KVOffloadWorkerMetadata(KVConnectorWorkerMetadata):
    """Worker -> scheduler, once per step: per rank, ``{job_id: ok}`` of the jobs that finished
    and the outcomes of the tier jobs that finished (vLLM aggregates the ranks' metadata)."""

    reports: tuple[RankReport, ...] = ()

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        if not isinstance(other, KVOffloadWorkerMetadata):
            raise TypeError(f"cannot aggregate KVOffloadWorkerMetadata with {type(other).__name__}")
        return KVOffloadWorkerMetadata(self.reports + other.reports)


def _offload_config(vllm_config: Any, groups: KVGroups) -> OffloadConfig:
    extra = dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})
    try:
        return OffloadConfig(
            gpu_block_size=int(vllm_config.cache_config.block_size),
            blocks_per_chunk=int(extra.get("blocks_per_chunk", 1)),
            num_cpu_blocks=int(extra.get("num_cpu_blocks", 1024)),
            policy=str(extra.get("eviction_policy", DEFAULT_POLICY)),
            kv_groups=len(groups.kinds),
            null_block=VLLM_NULL_BLOCK,
            window_groups=groups.windows,
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"KVOffloadConnector kv_connector_extra_config {extra}: {error}") from None


def kv_layout(vllm_config: Any, groups: KVGroups, blocks_per_chunk: int) -> tuple[str, int]:
    """A name of the KV layout one chunk has in this engine (dtype, layers, page bytes, block
    tokens, blocks per chunk, tensor-parallel size, and the KV cache groups' kinds unless one group
    of plain full attention: MLA's kind names its latent size; the rank is a field of the tiers'
    namespace), and the chunk's bytes as the scheduler side can know them (every layer's page of
    every group's blocks: an upper bound of what the worker moves)."""
    page = groups.page_bytes
    layers = groups.layers_per_group
    layout = (
        f"{vllm_config.cache_config.cache_dtype}/{vllm_config.model_config.dtype}/l{layers}/p{page}"
        f"/b{vllm_config.cache_config.block_size}x{blocks_per_chunk}/tp{vllm_config.parallel_config.tensor_parallel_size}"
    )
    if not groups.legacy:
        # Another group layout stores other blocks per chunk, and an MLA page of another latent size
        # (or a K/V page of MLA's size) means other bytes: it must never read these chunks.
        layout += "/g" + "+".join(groups.kinds)
    return layout, page * layers * blocks_per_chunk * len(groups.kinds)


class KVOffloadConnector(KVConnectorBase_V1, SupportsHMA):
    """kvoffload's scheduler (scheduler role) or worker (worker role) as a vLLM KV connector.

    With vLLM's hybrid KV cache manager (full-attention and sliding-window groups) a chunk is every
    group's blocks for its tokens (:mod:`kvoffload.vllm.kv_groups`)."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        parallel = vllm_config.parallel_config
        if parallel.pipeline_parallel_size != 1:
            stages = parallel.pipeline_parallel_size
            raise ConfigError(f"KVOffloadConnector supports tensor parallelism only; pipeline_parallel_size={stages}")
        self.world_size = int(parallel.tensor_parallel_size)
        self.rank = 0
        self.groups = kv_groups(kv_cache_config)
        self.config = _offload_config(vllm_config, self.groups)
        extra = vllm_config.kv_transfer_config.kv_connector_extra_config or {}
        self.verify_loads = flag(extra, "verify_loads")
        self.cpu_kernel = flag(extra, "cpu_kernel", default=True)
        check = flag(extra, "check_invariants")
        self.tier_settings = tier_settings(extra)
        self.model_name = str(vllm_config.model_config.model)
        self.layout, chunk_bytes = kv_layout(vllm_config, self.groups, self.config.blocks_per_chunk)
        self.file_slots = self.tier_settings.file.slots(chunk_bytes) if self.tier_settings.file is not None else 0
        self.writer = writer_id(str(vllm_config.kv_transfer_config.engine_id))
        self.kvoffload_scheduler: SchedulerSide | None = None
        self.kvoffload_worker: WorkerSide | None = None
        self.worker_tiers: WorkerTiers | None = None
        # Each side reports the increase of its counters since its last report (kvoffload.vllm.metrics).
        self._metric_deltas = CounterDeltas()
        if role == KVConnectorRole.SCHEDULER:
            cpu = CPUOffloadingManager(self.config.num_cpu_blocks, self.config.policy, enable_events=False)
            manager = tiering_manager(cpu, self.tier_settings, self.file_slots) if self.tier_settings.any else cpu
            self.kvoffload_scheduler = SchedulerSide(
                OffloadingScheduler(self.config, manager), check, self.world_size, self.groups.volatile
            )

    @property
    def requires_kv_delivery(self) -> bool:
        # A cache: a store dropped by preemption is a future miss, not lost data.
        return False

    def _scheduler(self) -> SchedulerSide:
        if self.kvoffload_scheduler is None:
            raise RuntimeError("scheduler-side call on the worker-side KVOffloadConnector")
        return self.kvoffload_scheduler

    def _worker(self) -> WorkerSide:
        if self.kvoffload_worker is None:
            raise RuntimeError("worker-side call before register_kv_caches")
        return self.kvoffload_worker

    # ------------------------------------------------------------------ worker side
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        # Every group's layers: groups share tensors, so a block's row of each distinct tensor is all
        # of its KV whichever group holds it.
        layers = block_tensors(
            kv_caches, list(self.groups.layer_names), self._kv_cache_config.num_blocks, self.groups.page_bytes
        )
        per_chunk = self.config.gpu_blocks_per_chunk
        mover = self.make_mover(layers, self.config.num_cpu_blocks * per_chunk)
        self.kvoffload_worker = make_worker(mover, per_chunk, self.verify_loads, VLLM_NULL_BLOCK)
        if self.world_size > 1:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

            self.rank = get_tensor_model_parallel_rank()
        if self.tier_settings.any:
            from kvoffload.tiers.record import Namespace

            chunks = LayerChunks(mover.cpu_layers, per_chunk)
            namespace = Namespace(self.model_name, self.layout, self.rank)
            settings = self.tier_settings.for_rank(self.rank, self.world_size)
            backends = open_backends(settings, chunks.chunk_bytes, self.file_slots, namespace, self.writer)
            self.worker_tiers = WorkerTiers(backends, chunks)

    def make_mover(self, layers: list[torch.Tensor], num_cpu_blocks: int) -> BlockMover:
        """The mover on the engine's per-layer block tensors (pinned CPU memory when they are on
        CUDA); a hook for tests and subclasses."""
        return BlockMover(layers, num_cpu_blocks, cpu_kernel=self.cpu_kernel)

    def _run_bound_metadata(self) -> None:
        metadata = self._get_connector_metadata()
        if not isinstance(metadata, KVOffloadConnectorMetadata):
            raise TypeError(f"expected KVOffloadConnectorMetadata, got {type(metadata).__name__}")
        self._execute(metadata)

    def _execute(self, metadata: KVOffloadConnectorMetadata) -> None:
        worker = self._worker()
        if metadata.jobs.step == worker.executed_step:
            return
        worker.execute(metadata.jobs, metadata.released)
        if self.worker_tiers is not None:
            for job, outcome in self.worker_tiers.run(metadata.tier_jobs, metadata.jobs.step):
                worker.promoted(job, outcome.results)
        elif metadata.tier_jobs:
            raise ValueError(f"{len(metadata.tier_jobs)} tier job(s) sent to a worker without tiers")

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        if not isinstance(kv_connector_metadata, KVOffloadConnectorMetadata):
            raise TypeError(f"expected KVOffloadConnectorMetadata, got {type(kv_connector_metadata).__name__}")
        self._execute(kv_connector_metadata)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        # Normally a no-op: handle_preemptions already ran this step's metadata before the forward.
        self._run_bound_metadata()

    def wait_for_layer_load(self, layer_name: str) -> None:
        return

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        return

    def wait_for_save(self) -> None:
        return

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        return self._worker().finished()

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker().take_load_errors()

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        completed = self._worker().take_completed()
        outcomes = self.worker_tiers.take_outcomes() if self.worker_tiers is not None else ()
        if not completed and not outcomes:
            return None
        return KVOffloadWorkerMetadata((RankReport(self.rank, completed, outcomes),))

    def shutdown(self) -> None:
        if self.worker_tiers is not None:
            self.worker_tiers.close()
        if self.kvoffload_worker is not None:
            self.kvoffload_worker.shutdown()

    # ------------------------------------------------------------------ metrics (both sides)
    def get_kv_connector_stats(self) -> KVOffloadStats | None:
        """The increase of this side's counters since the last call (vLLM calls it after every
        step on both sides and adds the workers' and the scheduler's together)."""
        if self.kvoffload_scheduler is not None:
            counters = scheduler_counters(self.kvoffload_scheduler, self.config.policy)
        elif self.kvoffload_worker is not None:
            counters = worker_counters(self.kvoffload_worker, self.worker_tiers)
        else:
            return None
        increases = self._metric_deltas.take(counters)
        return KVOffloadStats.of(increases) if increases else None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVOffloadStats:
        return stats_from_payload(data)

    @classmethod
    def build_prom_metrics(
        cls,
        vllm_config: Any,
        metric_types: dict[type, type],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> KVOffloadPromMetrics:
        return KVOffloadPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    # ------------------------------------------------------------------ scheduler side
    def get_num_new_matched_tokens(
        self, request: Any, num_computed_tokens: int, max_num_new_tokens: int | None = None
    ) -> tuple[int | None, bool]:
        tokens, load_async = self._scheduler().get_num_new_matched_tokens(request, num_computed_tokens)
        if tokens and max_num_new_tokens is not None and tokens > max_num_new_tokens:
            # vLLM caps the load; kvoffload's loads end on a chunk boundary, so it offers only what fits.
            tokens = self._scheduler().scheduler.offer_within(num_computed_tokens, max_num_new_tokens)
            load_async = bool(tokens)
        return tokens, load_async

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        self._scheduler().update_state_after_alloc(request, blocks.get_block_ids(), num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        jobs, released, tier_jobs = self._scheduler().build_connector_meta(scheduler_output)
        return KVOffloadConnectorMetadata(jobs, released, tier_jobs)

    def update_connector_output(self, connector_output: Any) -> None:
        meta = connector_output.kv_connector_worker_meta
        self._scheduler().report(meta.reports if isinstance(meta, KVOffloadWorkerMetadata) else ())

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return self._scheduler().request_finished(request, block_ids), None

    def request_finished_all_groups(
        self, request: Any, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        return self._scheduler().request_finished(request, interleave(block_ids)), None

    def has_pending_push_work(self) -> bool:
        return self._scheduler().has_pending_work()

    def reset_cache(self) -> bool | None:
        self._scheduler().reset_cache()
        return True
