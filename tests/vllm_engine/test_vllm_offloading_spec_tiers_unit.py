"""KVOffloadSpec with secondary tiers, driven through vLLM's own interfaces without an engine
(``make check-vllm-tiers``): the tier settings are checked as KVOffloadConnector checks them (one
line naming the key and the value), and a chunk stored by the worker cascades to the file tier,
is evicted from the CPU tier, answers ``RETRY`` while it is promoted back, and then loads the
bytes the worker stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-tiers` installs it in .venv-vllm")
pytest.importorskip("xxhash", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")

from vllm.v1.kv_offload.base import (
    CanonicalKVCacheRef,
    CanonicalKVCaches,
    CanonicalKVCacheTensor,
    GPULoadStoreSpec,
    LookupResult,
    ReqContext,
    ScheduleEndContext,
    make_offload_key,
)
from vllm.v1.kv_offload.config import (
    OffloadingCacheConfig,
    OffloadingConfig,
    OffloadingGroupConfig,
    OffloadingModelConfig,
    OffloadingParallelConfig,
)

from kvoffload.vllm.settings import ConfigError
from kvoffload.vllm.spec import KVOffloadSpec
from kvoffload.vllm.spec.shared_pool import pool_path

PAGE = 512
GPU_BLOCKS = 8
STEP = ScheduleEndContext((), ())


def _config(extra: dict[str, Any], engine_id: str, pp_size: int = 1) -> OffloadingConfig:
    parallel = OffloadingParallelConfig(
        rank=0, world_size=pp_size, tp_size=1, pp_size=pp_size, pcp_size=1, dcp_size=1, data_parallel_index=0,
        data_parallel_size=1, data_parallel_rank_local=None, is_parallelism_agnostic=False,
    )
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(16, ("layer.0", "layer.1"), 0),),
        worker_kv_bytes_per_block=2 * PAGE,
        enable_kv_cache_events=False,
        extra_config={"num_cpu_blocks": 2, "eviction_policy": "lru", "cpu_kernel": False, **extra},
        engine_id=engine_id,
        model=OffloadingModelConfig("tiny", "float32"),
        cache=OffloadingCacheConfig(16, 1),
        parallel=parallel,
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"file_tier": {"path": "/tmp/kv.tier", "size_bytes": 0}},
         "kv_connector_extra_config['file_tier']['size_bytes'] must be a positive integer, got 0"),
        ({"redis_tier": {"url": "http://127.0.0.1:6379"}},
         "kv_connector_extra_config['redis_tier']['url'] must be a redis:// or rediss:// URL, got 'http://127.0.0.1:6379'"),
        ({"redis_tier": {"url": "redis://127.0.0.1:6379", "ttl_s": -1}},
         "kv_connector_extra_config['redis_tier']['ttl_s'] must be a positive integer, got -1"),
        ({"file_tier": {"path": "/tmp/kv.tier", "size_bytes": 1 << 20}, "verify_loads": True},
         "kv_connector_extra_config['verify_loads'] = true cannot be combined with secondary tiers in KVOffloadSpec"),
    ],
)
def test_bad_tier_settings_give_one_line(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        KVOffloadSpec(_config(extra, "bad-settings"))
    assert str(refused.value).startswith(message)
    assert "\n" not in str(refused.value)


def test_pipeline_parallelism_with_tiers_is_refused(tmp_path: Path) -> None:
    extra = {"file_tier": {"path": str(tmp_path / "kv.tier"), "size_bytes": 1 << 20}}
    with pytest.raises(ConfigError, match="supports tensor parallelism only; 2 workers for tensor_parallel_size=1"):
        KVOffloadSpec(_config(extra, "pp", pp_size=2))


def test_a_scheduler_without_the_workers_pool_names_the_file(tmp_path: Path) -> None:
    spec = KVOffloadSpec(_config({"file_tier": {"path": str(tmp_path / "kv.tier"), "size_bytes": 1 << 20}}, "lonely"))
    with pytest.raises(ConfigError, match=f"shared CPU pool {pool_path('lonely', 0)} cannot be opened"):
        spec.get_manager()


def _step(manager: Any) -> None:
    # A tier job reports one scheduler step after it started.
    manager.on_schedule_end(STEP)
    manager.on_schedule_end(STEP)


def _store(manager: Any, worker: Any, key: bytes, gpu_block: int, context: ReqContext, job_id: int) -> None:
    plan = manager.prepare_store([key], context)
    assert plan is not None and plan.keys_to_store == [key]
    worker.submit_store(job_id, GPULoadStoreSpec([gpu_block], [1], [0]), plan.store_spec)
    worker.wait({job_id})
    assert [result.job_id for result in worker.get_finished()] == [job_id]
    manager.complete_store([key], context)


def _engine(tmp_path: Path) -> tuple[list[torch.Tensor], Any, Any, str]:
    """The engine's KV layers, the spec's worker and its scheduler-side manager (a file tier)."""
    extra = {"file_tier": {"path": str(tmp_path / "kv.tier"), "size_bytes": 1 << 20}}
    engine_id = f"unit-{tmp_path.name}"
    worker_spec, scheduler_spec = KVOffloadSpec(_config(extra, engine_id)), KVOffloadSpec(_config(extra, engine_id))
    generator = torch.Generator().manual_seed(3)
    layers = [torch.randint(-128, 128, (GPU_BLOCKS, PAGE), dtype=torch.int8, generator=generator) for _ in range(2)]
    caches = CanonicalKVCaches(
        [CanonicalKVCacheTensor(layer, PAGE) for layer in layers],
        [[CanonicalKVCacheRef(0, PAGE), CanonicalKVCacheRef(1, PAGE)]],
    )
    worker = worker_spec.get_worker(caches)
    return layers, worker, scheduler_spec.get_manager(), engine_id


def test_a_chunk_comes_back_from_the_file_tier(tmp_path: Path) -> None:
    layers, worker, manager, engine_id = _engine(tmp_path)
    context = ReqContext("r1")
    manager.on_new_request(context)
    keys = [make_offload_key(bytes([index]) * 32, 0) for index in range(3)]
    try:
        _store(manager, worker, keys[0], 3, context, 1)
        _step(manager)
        assert manager.tiers.tier_stats["file"].cascaded_keys == 1
        assert not manager.has_pending_work()
        # Two more chunks evict the first from the two-chunk CPU tier.
        _store(manager, worker, keys[1], 4, context, 2)
        _store(manager, worker, keys[2], 5, context, 3)
        _step(manager)
        assert manager.lookup(keys[0], context) == LookupResult.RETRY
        assert manager.has_pending_work()
        _step(manager)
        assert manager.lookup(keys[0], context) == LookupResult.HIT
        assert manager.tiers.tier_stats["file"].promoted_keys == 1
        load = manager.prepare_load([keys[0]], context)
        worker.submit_load(4, load, GPULoadStoreSpec([6], [1], [0]))
        worker.wait({4})
        worker.get_finished()
        manager.complete_load([keys[0]], context)
        for layer in layers:
            assert torch.equal(layer[6], layer[3]), "the promoted chunk is not the bytes the worker stored"
        manager.on_request_finished(context)
        _step(manager)
        assert manager.violations == [] and manager.leaks() == []
        assert not manager.has_pending_work()
    finally:
        manager.shutdown()
        worker.shutdown()
    assert not Path(pool_path(engine_id, 0)).exists()


def test_a_reset_waits_for_the_cascade_in_flight(tmp_path: Path) -> None:
    """vLLM's reset_cache while a cascade reads its CPU block: the reset waits for the cascade's
    outcome (nothing is stored or hit meanwhile), then both tiers are empty."""
    _, worker, manager, _ = _engine(tmp_path)
    context = ReqContext("r1")
    manager.on_new_request(context)
    key = make_offload_key(bytes([7]) * 32, 0)
    try:
        _store(manager, worker, key, 3, context, 1)
        manager.on_schedule_end(STEP)
        assert manager.tiers.tier_jobs_in_flight, "the cascade is not in flight"
        manager.reset_cache()
        assert manager.lookup(key, context) == LookupResult.MISS
        assert manager.prepare_store([make_offload_key(bytes([8]) * 32, 0)], context) is None
        manager.on_schedule_end(STEP)
        assert not manager.has_pending_work()
        assert manager.lookup(key, context) == LookupResult.MISS
        manager.on_request_finished(context)
        assert manager.violations == [] and manager.leaks() == []
    finally:
        manager.shutdown()
        worker.shutdown()
