"""Every use of vLLM's private state or version-dependent API by the simple connector's checkers.

The rest of :mod:`kvoffload_lab.vllm.simple` uses only what 0.26.0 to 0.34.0 share.
"""

from __future__ import annotations

from typing import Any

# The scheduler-side manager's per-request and per-transfer state: all of it empty at idle. Names a
# release lacks are skipped.
_MANAGER_STATE = (
    "_reqs_to_load", "_reqs_to_store", "_pending_cpu_hits", "_load_event_to_reqs", "_store_event_to_blocks",
    "_store_event_to_reqs", "_in_flight_store_gpu_blocks", "_pending_finished_stores",
    "_abandoned_store_event_to_blocks", "_abandoned_reqs_to_load", "_store_event_pending_counts",
)


def _held_blocks(pool: Any) -> list[int]:
    return [block.block_id for block in pool.blocks if block.ref_cnt > 0 and not block.is_null]


class SimpleReads:
    """vLLM 0.26.0 and later."""

    def block_hasher(self, block_size: int) -> Any:
        from vllm.utils.hashing import sha256
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        init_none_hash(sha256)
        return get_request_block_hasher(block_size, sha256)

    def request(self, request_id: str, prompt: list[int], max_tokens: int, hasher: Any) -> Any:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
        return Request(request_id=request_id, prompt_token_ids=list(prompt), sampling_params=params,
                       pooling_params=None, block_hasher=hasher)

    def aborted_status(self) -> Any:
        from vllm.v1.request import RequestStatus

        return RequestStatus.FINISHED_ABORTED

    def runner_output(self, output: Any, sampled: dict[str, list[int]], finished_recving: set[str] | None,
                      worker_meta: Any) -> Any:
        from vllm.v1.outputs import KVConnectorOutput

        from kvoffload_lab.vllm.common.vllm_objects import model_runner_output

        connector_output = KVConnectorOutput(finished_recving=finished_recving, kv_connector_worker_meta=worker_meta)
        return model_runner_output(output, sampled, connector_output)

    def held(self, scheduler: Any, shape: Any) -> list[str]:
        """What the connector holds: GPU and CPU blocks with references, non-empty manager state."""
        manager = scheduler.connector.scheduler_manager
        held = []
        gpu = _held_blocks(scheduler.kv_cache_manager.block_pool)
        if gpu:
            held.append(f"GPU blocks {gpu} (ref_cnt > 0)")
        cpu = _held_blocks(manager.cpu_block_pool)
        if cpu:
            held.append(f"CPU blocks {cpu} (ref_cnt > 0)")
        for name in _MANAGER_STATE:
            value = getattr(manager, name, None)
            if value:
                shown = sorted(value) if isinstance(value, (dict, set)) else value
                held.append(f"SimpleCPUOffloadScheduler.{name} = {shown}")
        return held

    def gpu_pool(self, manager: Any) -> Any:
        """The GPU ``BlockPool`` the connector was bound to (``bind_gpu_block_pool``)."""
        return manager._gpu_block_pool

    def lazy(self, manager: Any) -> bool:
        """Whether the manager offloads lazily (``lazy_offload``)."""
        return bool(manager._lazy_mode)

    def lazy_cursor(self, manager: Any) -> Any:
        """The GPU block lazy mode's walk of the free queue stopped at (None: from the head)."""
        return manager._cursor

    def blocks_not_in_cpu(self, manager: Any, block_hashes: list[Any]) -> list[int]:
        """The indexes of ``block_hashes`` (group 0) the CPU block pool does not cache."""
        pool = manager.cpu_block_pool
        return [i for i, block_hash in enumerate(block_hashes) if not pool.get_cached_block(block_hash, [0])]


    def fingerprint(self, harness: Any) -> tuple[Any, ...]:
        """What distinguishes two engine states: requests, both block pools (references, hashes, the
        free queue's order), the manager's state, the worker's pending events, every KV byte."""
        scheduler = harness.scheduler
        manager = scheduler.connector.scheduler_manager
        requests = tuple(
            (rid, str(r.status), r.num_computed_tokens, r.num_tokens,
             tuple(scheduler.kv_cache_manager.get_block_ids(rid)[0]))
            for rid, r in sorted(scheduler.requests.items())
        )
        worker = harness.worker
        return (
            requests, tuple(sorted(scheduler.finished_req_ids)),
            _pool_state(scheduler.kv_cache_manager.block_pool), _pool_state(manager.cpu_block_pool),
            tuple((name, repr(sorted(value)) if isinstance(value, (dict, set)) else repr(value))
                  for name in _MANAGER_STATE if (value := getattr(manager, name, None))),
            worker.pending(),
            harness.model.kv.numpy().tobytes(),
            b"".join(t.numpy().tobytes() for t in worker.cpu_kv_caches.values()),
        )


def _pool_state(pool: Any) -> tuple[Any, ...]:
    blocks = tuple((b.ref_cnt, b.block_hash) for b in pool.blocks)
    return blocks, tuple(b.block_id for b in pool.free_block_queue.get_all_free_blocks())


def simple_reads(version: str) -> SimpleReads:
    """The reads for vLLM ``version``."""
    return SimpleReads()
