"""vLLM's connector scheduler behind kvoffload's engine (:class:`kvoffload_lab.sim.Engine`).

:class:`VllmConnector` has the methods the engine calls on kvoffload's own ``OffloadingScheduler``
and turns each call into what vLLM's core scheduler would pass at that point:

- every request is a real ``vllm.v1.request.Request`` (same tokens, so the same chained block
  hashes as the engine's), announced with ``on_new_request`` when the engine adds it, its status,
  output tokens and ``num_computed_tokens`` kept as vLLM's scheduler keeps them;
- an admission is ``get_num_new_matched_tokens`` then ``update_state_after_alloc`` with real
  ``KVCacheBlocks`` (prefix-cache hits carry their block hash);
- each step's ``SchedulerOutput`` lists first-time requests in ``scheduled_new_reqs`` with all
  their blocks, running ones in ``scheduled_cached_reqs`` (resumed after a preemption or a load
  with all their blocks, otherwise only the new ones; from 0.34.0 a resumed request is re-sent in
  ``scheduled_new_reqs``, as vLLM's scheduler does), ``preempted_req_ids``, and in
  ``finished_req_ids`` the requests vLLM's scheduler saw finish since the previous step;
- ``request_finished`` runs when the request finishes, its status already ``FINISHED_*``, and its
  GPU blocks are freed then (the connector returns False). With ``async_scheduling`` the scheduler
  processes a step's output only after it scheduled the next step, so a finish reaches vLLM (and
  frees the blocks) one step after the engine sampled it: the adapter holds the blocks that step;
- a request whose asynchronous load finished is re-allocated when it is scheduled again:
  ``update_state_after_alloc`` with all its blocks and no external tokens, without a lookup (its
  tokens are computed), as vLLM's scheduler does;
- the worker's results come back as a ``KVConnectorOutput`` with ``OffloadingWorkerMetadata``,
  except after a step that scheduled nothing and whose worker reported nothing: vLLM's engine in
  process drops that empty output, its multiprocess executor passes it on
  (``empty_step_reports``);
- ``reset_cache`` resets the connector whatever runs and the GPU prefix cache only when no request
  holds a block, as ``reset_prefix_cache(reset_connector=True)`` does.

The last three were learned from live engines (:mod:`kvoffload_lab.vllm.offloading.live.conformance`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kvoffload.lifecycles.invariants import SystemSnapshot
from kvoffload.offload.types import ConnectorUpdate, SchedulerOutput
from kvoffload_lab.sim.engine import Engine, EngineConfig, StepReport
from kvoffload_lab.sim.request import SimRequest
from kvoffload_lab.vllm.common.vllm_objects import scheduler_output_fields
from kvoffload_lab.vllm.offloading.build import ConnectorShape, build_connector, shutdown_connector
from kvoffload_lab.vllm.offloading.compat import PrivateReads
from kvoffload_lab.vllm.offloading.proxy import RecordingManager
from kvoffload_lab.vllm.offloading.worker import VLLM_BLOCK_OFFSET, PatternWorker, WorkerStep


def _vllm_blocks(block_ids: Iterable[int]) -> list[int]:
    return [block + VLLM_BLOCK_OFFSET for block in block_ids]


@dataclass
class _Tracked:
    request: Any  # vllm.v1.request.Request
    sim: SimRequest
    scheduled_before: bool = False
    finish_status: Any = None
    needs_all_blocks: bool = True
    # Tokens served by the GPU prefix cache or a load at any admission (not this request's to store).
    computed_from: int = 0


class VllmConnector:
    """vLLM's ``OffloadingConnectorScheduler`` (``connector``) with a recording manager proxy."""

    def __init__(
        self,
        manager: str,
        shape: ConnectorShape,
        reads: PrivateReads,
        async_scheduling: bool = False,
        empty_step_reports: bool = False,
    ) -> None:
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        self.manager_name = manager
        self.shape = shape
        self.reads = reads
        self.async_scheduling = async_scheduling
        self.empty_step_reports = empty_step_reports
        self.connector, self.vllm_config = build_connector(manager, shape)
        self.proxy = RecordingManager(self.connector.manager, lambda: self.step, self._owed_keys, self._log)
        self.connector.manager = self.proxy
        init_none_hash(sha256)
        self._hasher = get_request_block_hasher(shape.block_size, sha256)
        self.step = 0
        self._scheduled_now = False
        self.tracked: dict[str, _Tracked] = {}
        self._finished: list[str] = []
        self._finished_later: list[str] = []
        self.events: list[tuple[int, str]] = []
        # GPU prefix-cache hit (tokens) of each admission in progress, from its lookup.
        self._local_tokens: dict[str, int] = {}
        # Keys of the chunks each finished request computed itself and still held.
        self._held_chunks: dict[str, list[bytes]] = {}

    # ------------------------------------------------------------------ requests
    def on_new_request(self, sim: SimRequest) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        request = Request(
            request_id=sim.request_id,
            prompt_token_ids=list(sim.prompt),
            sampling_params=SamplingParams(max_tokens=sim.max_tokens),
            pooling_params=None,
            block_hasher=self._hasher,
        )
        self.tracked[sim.request_id] = _Tracked(request, sim)
        self._log(f"add {sim.request_id} ({len(sim.prompt)} prompt tokens, max {sim.max_tokens} output)")
        self.connector.on_new_request(request)

    def _sync(self, tracked: _Tracked) -> Any:
        request, sim = tracked.request, tracked.sim
        missing = sim.output[len(request.output_token_ids):]
        if missing:
            request.append_output_token_ids(list(missing))
        request.num_computed_tokens = sim.num_computed_tokens
        return request

    def is_tracked(self, request_id: str) -> bool:
        return request_id in self.tracked

    def get_num_new_matched_tokens(self, sim: SimRequest, num_computed_tokens: int) -> tuple[int | None, bool]:
        from vllm.v1.request import RequestStatus

        tracked = self.tracked[sim.request_id]
        request = self._sync(tracked)
        request.num_computed_tokens = 0
        if request.status != RequestStatus.PREEMPTED:
            request.status = RequestStatus.WAITING
        self._local_tokens[sim.request_id] = num_computed_tokens
        tokens, load_async = self.connector.get_num_new_matched_tokens(request, num_computed_tokens)
        if tokens is None:
            self._log(f"lookup {sim.request_id}: retry later")
        return tokens, load_async

    def update_state_after_alloc(self, sim: SimRequest, block_ids: list[int], num_external_tokens: int) -> None:
        from vllm.v1.core.kv_cache_manager import KVCacheBlocks
        from vllm.v1.core.kv_cache_utils import KVCacheBlock, make_block_hash_with_group_id
        from vllm.v1.request import RequestStatus

        tracked = self.tracked[sim.request_id]
        request = tracked.request
        local_blocks = self._local_tokens.pop(sim.request_id, 0) // self.shape.block_size
        blocks = []
        for index, block_id in enumerate(block_ids):
            block = KVCacheBlock(block_id=block_id + VLLM_BLOCK_OFFSET)
            if index < local_blocks:
                block.set_block_hash(make_block_hash_with_group_id(request.block_hashes[index], 0))
            blocks.append(block)
        tracked.needs_all_blocks = True
        # Chunks up to here came from the GPU prefix cache or a load at some admission of this
        # request: vLLM's chunk-level policy leaves storing them to whoever computed them first,
        # also when a preempted request computes them again.
        tracked.computed_from = max(tracked.computed_from, local_blocks * self.shape.block_size + num_external_tokens)
        request.status = RequestStatus.WAITING_FOR_REMOTE_KVS if num_external_tokens else RequestStatus.RUNNING
        self._log(
            f"admit {sim.request_id}: GPU blocks {list(block_ids)}, {local_blocks * self.shape.block_size} "
            f"token(s) from the GPU prefix cache, {num_external_tokens} to load"
        )
        self.connector.update_state_after_alloc(request, KVCacheBlocks((blocks,)), num_external_tokens)

    def request_finished(self, sim: SimRequest, block_ids: list[int]) -> bool:
        from vllm.v1.request import RequestStatus

        tracked = self.tracked[sim.request_id]
        self._sync(tracked)
        tracked.finish_status = (
            RequestStatus.FINISHED_LENGTH_CAPPED
            if len(sim.output) >= sim.max_tokens
            else RequestStatus.FINISHED_ABORTED
        )
        self._log(f"finish {sim.request_id} ({tracked.finish_status.name}) holding GPU blocks {list(block_ids)}")
        self._held_chunks[sim.request_id] = self._computed_keys(tracked, block_ids)
        if self.async_scheduling:
            # Still running as far as vLLM knows, until it processes this step's output.
            self._finished_later.append(sim.request_id)
            return True
        return self._tell_finished(tracked)

    @property
    def finishes_in_flight(self) -> bool:
        """Async scheduling: finishes sampled but not yet seen by vLLM (those requests still run)."""
        return bool(self._finished_later)

    def _tell_finished(self, tracked: _Tracked) -> bool:
        tracked.request.status = tracked.finish_status
        self._finished.append(tracked.sim.request_id)
        keep, _params = self.connector.request_finished(tracked.request)
        return bool(keep)

    def _computed_keys(self, tracked: _Tracked, block_ids: list[int]) -> list[bytes]:
        from vllm.v1.kv_offload.base import make_offload_key

        sim, request = tracked.sim, tracked.request
        end = sim.num_computed_tokens
        if self.shape.prompt_only:
            end = min(end, len(sim.prompt))
        first = -(-tracked.computed_from // self.shape.block_size)
        last = min(end // self.shape.block_size, len(block_ids), len(request.block_hashes))
        return [make_offload_key(request.block_hashes[i], 0) for i in range(first, last)]

    def _owed_keys(self, request_id: str) -> list[bytes]:
        return self._held_chunks.get(request_id, [])

    # ------------------------------------------------------------------ per step
    def build_connector_meta(self, output: SchedulerOutput) -> Any:
        from vllm.v1.core.sched.output import CachedRequestData, NewRequestData
        from vllm.v1.core.sched.output import SchedulerOutput as VllmSchedulerOutput
        from vllm.v1.request import RequestStatus

        self.step += 1
        self._scheduled_now = bool(output.num_scheduled_tokens)
        for request_id in output.num_scheduled_tokens:
            self._reallocate_after_load(self.tracked[request_id])
        for request_id in output.preempted:
            tracked = self.tracked[request_id]
            tracked.request.status = RequestStatus.PREEMPTED
            tracked.request.num_computed_tokens = 0
            tracked.needs_all_blocks = True
            self._log(f"preempt {request_id}")
        new_reqs = []
        cached = CachedRequestData.make_empty()
        for request_id, num_tokens in output.num_scheduled_tokens.items():
            tracked = self.tracked[request_id]
            request = self._sync(tracked)
            request.status = RequestStatus.RUNNING
            resumed = tracked.needs_all_blocks and tracked.scheduled_before
            if tracked.needs_all_blocks and (not resumed or self.reads.resumed_as_new_request()):
                # Every release's scheduler passes all the request's tokens as its prefill tokens
                # (0.34.0 made the argument required).
                new_reqs.append(NewRequestData.from_request(request, (_vllm_blocks(tracked.sim.block_ids),),
                                                            list(request.all_token_ids)))
            else:
                added = tracked.sim.block_ids if resumed else output.new_block_ids.get(request_id, ())
                new_blocks = _vllm_blocks(added)
                cached.req_ids.append(request_id)
                if resumed:
                    cached.resumed_req_ids.add(request_id)
                cached.new_token_ids.append([])
                cached.new_block_ids.append((new_blocks,) if new_blocks or resumed else None)
                cached.num_computed_tokens.append(request.num_computed_tokens)
                cached.num_output_tokens.append(len(request.output_token_ids))
            tracked.scheduled_before = True
            tracked.needs_all_blocks = False
            self._log(f"schedule {request_id}: +{num_tokens} token(s) from {request.num_computed_tokens}")
        finished = set(self._finished)
        self._finished = []
        scheduler_output = VllmSchedulerOutput(**scheduler_output_fields(VllmSchedulerOutput, {
            "scheduled_new_reqs": new_reqs,
            "scheduled_cached_reqs": cached,
            "num_scheduled_tokens": dict(output.num_scheduled_tokens),
            "total_num_scheduled_tokens": sum(output.num_scheduled_tokens.values()),
            "scheduled_spec_decode_tokens": {},
            "scheduled_encoder_inputs": {},
            "num_common_prefix_blocks": [0],
            "finished_req_ids": finished,
            "free_encoder_mm_hashes": [],
            "preempted_req_ids": set(output.preempted),
        }))
        metadata = self.connector.build_connector_meta(scheduler_output)
        for request_id in finished:
            self.tracked.pop(request_id, None)
        self._log_jobs(metadata)
        return metadata

    def _reallocate_after_load(self, tracked: _Tracked) -> None:
        """A request whose load finished is scheduled again: vLLM's scheduler skips the lookup (its
        tokens are computed) and calls ``update_state_after_alloc`` with all its blocks and no
        external tokens, the loaded blocks now in its prefix cache."""
        from vllm.v1.core.kv_cache_manager import KVCacheBlocks
        from vllm.v1.core.kv_cache_utils import KVCacheBlock, make_block_hash_with_group_id
        from vllm.v1.request import RequestStatus

        request = tracked.request
        if request.status != RequestStatus.WAITING_FOR_REMOTE_KVS:
            return
        request.status = RequestStatus.WAITING
        request = self._sync(tracked)
        cached = min(tracked.sim.num_computed_tokens // self.shape.block_size, len(request.block_hashes))
        blocks = []
        for index, block_id in enumerate(tracked.sim.block_ids):
            block = KVCacheBlock(block_id=block_id + VLLM_BLOCK_OFFSET)
            if index < cached:
                block.set_block_hash(make_block_hash_with_group_id(request.block_hashes[index], 0))
            blocks.append(block)
        self._log(f"re-allocate {tracked.sim.request_id} after its load: GPU blocks {list(tracked.sim.block_ids)}")
        self.connector.update_state_after_alloc(request, KVCacheBlocks((blocks,)), 0)

    def _log_jobs(self, metadata: Any) -> None:
        for kind, jobs in (("store", metadata.store_jobs), ("load", metadata.load_jobs)):
            for job_id, job in jobs.items():
                gpu_spec, cpu_spec = (job.src_spec, job.dst_spec) if kind == "store" else (job.dst_spec, job.src_spec)
                gpu_blocks = [int(b) - VLLM_BLOCK_OFFSET for b in gpu_spec.block_ids]
                self._log(
                    f"job {job_id}: {kind} of {job.req_id} GPU {gpu_blocks} "
                    f"{'->' if kind == 'store' else '<-'} CPU {[int(b) for b in cpu_spec.block_ids]}"
                )
        if metadata.jobs_to_flush:
            self._log(f"flush jobs {sorted(metadata.jobs_to_flush)}")

    def update_connector_output(self, step: WorkerStep) -> ConnectorUpdate:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
        from vllm.v1.outputs import KVConnectorOutput

        step.finish()
        if step.completed:
            self._log(f"worker reports jobs {sorted(step.completed)} done")
        reported = bool(step.completed or step.finished_recving)
        if not self._scheduled_now and not reported and not self.empty_step_reports:
            # In process, vLLM's engine passes an empty step's worker output on only when it holds
            # something; its multiprocess executor passes it on all the same.
            return self._release_async_finishes()
        output = KVConnectorOutput(
            finished_sending=set(),
            finished_recving=set(step.finished_recving),
            kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=dict(step.completed)),
        )
        self.connector.update_connector_output(output)
        update = self._release_async_finishes()
        return ConnectorUpdate(loaded=tuple(sorted(step.finished_recving)), released=update.released)

    def _release_async_finishes(self) -> ConnectorUpdate:
        # Async scheduling: the finishes the engine sampled last step reach vLLM now.
        released = []
        for request_id in self._finished_later:
            self._log(f"vLLM sees {request_id} finished (async scheduling)")
            if not self._tell_finished(self.tracked[request_id]):
                released.append(request_id)
        self._finished_later = []
        return ConnectorUpdate(loaded=(), released=tuple(released))

    def reset_cache(self) -> tuple[str, ...]:
        self._log("reset_cache")
        self.connector.reset_cache()
        return ()

    def take_events(self) -> list[Any]:
        return list(self.connector.take_events())

    def has_pending_work(self) -> bool:
        return bool(self._finished or self._finished_later) or bool(self.connector.has_pending_push_work())

    @property
    def finishes_not_yet_reported(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Finished requests vLLM reports in the next step's ``finished_req_ids``, and those the
        asynchronous scheduler holds back one step more (part of the explorer's fingerprint)."""
        return tuple(self._finished), tuple(self._finished_later)

    def snapshot(self, gpu_writes_under_store: Iterable[str] = ()) -> SystemSnapshot:
        """Only what an engine-side snapshot can show of vLLM's state: GPU writes under a store."""
        return SystemSnapshot(
            requests=(), jobs=(), manager_entries={}, manager_free_blocks=(),
            manager_requests_in_flight=frozenset(), num_cpu_blocks=self.shape.cpu_chunks,
            gpu_writes_under_store=tuple(gpu_writes_under_store),
        )

    def leaks(self) -> list[str]:
        """State vLLM still holds after the drain (private reads, one place per version range)."""
        found = [f"connector still tracks request {rid!r}" for rid in self.reads.tracked_requests(self.connector)]
        found += [f"connector still has job {job}" for job in self.reads.jobs_in_flight(self.connector)]
        found += [f"cache reset still waits for job {job}" for job in self.reads.reset_jobs_pending(self.connector)]
        if self.proxy.inner.has_pending_work():
            found.append("manager.has_pending_work() is still True")
        return found

    def close(self) -> None:
        """Shut vLLM's connector down, as the engine does when it stops (see ``shutdown_connector``)."""
        shutdown_connector(self.connector, self.vllm_config)

    def _log(self, text: str) -> None:
        self.events.append((self.step, text))


class VllmEngine(Engine):
    """kvoffload's engine around a :class:`VllmConnector`; it announces each request to vLLM when it
    is added, as vLLM's ``Scheduler.add_request`` does. ``on_error`` receives what that raised (the
    harness's crash handling; without one it propagates): the workloads add requests themselves."""

    def __init__(self, config: EngineConfig, connector: VllmConnector, worker: PatternWorker) -> None:
        super().__init__(config, scheduler=connector, backend=worker)  # type: ignore[arg-type]
        self.connector = connector
        self.worker = worker
        self.on_error: Callable[[Exception], None] | None = None

    def add_request(self, prompt: list[int], max_tokens: int, request_id: str | None = None) -> SimRequest:
        request = super().add_request(prompt, max_tokens, request_id)
        try:
            self.connector.on_new_request(request)
        except Exception as error:
            if self.on_error is None:
                raise
            self.on_error(error)
        return request

    def reset_cache(self, prefix_cache: bool = True) -> None:
        # vLLM's reset_prefix_cache(reset_connector=True) resets the connector whatever runs, and
        # its GPU prefix cache only when no request holds a block (it fails otherwise).
        holding = bool(self.running or self.loading or self.held)
        super().reset_cache(prefix_cache=prefix_cache and not holding)

    def step(self) -> StepReport:
        # vLLM's scheduler recomputes the last token of a request whose whole prompt was loaded
        # (Scheduler._update_waiting_for_remote_kv), so the model has logits to sample from.
        for request in self.running:
            if request.num_computed_tokens >= request.num_tokens:
                request.num_computed_tokens = request.num_tokens - 1
        return super().step()
