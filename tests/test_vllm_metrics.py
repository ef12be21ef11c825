"""kvoffload's counters through vLLM's KV connector stats API (kvoffload.vllm.metrics): deltas,
aggregation over workers and steps, the payload through vLLM's IPC encoding, and the Prometheus
side for both integrations. `tests/vllm_engine/test_vllm_serve.py` reads them from a live server."""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-serve` installs it in .venv-vllm")

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import OffloadConfig
from kvoffload.vllm.connector import KVOffloadConnector
from kvoffload.vllm.connector.scheduler_side import SchedulerSide
from kvoffload.vllm.metrics import (
    CONNECTOR_COUNTERS,
    EVICTIONS,
    HIT_TOKENS,
    LOAD_BYTES,
    TIER_OUTAGES,
    VIOLATIONS,
    CounterDeltas,
    KVOffloadPromMetrics,
    KVOffloadStats,
    scheduler_counters,
    spec_counters,
)
from kvoffload.vllm.spec import KVOffloadSpec
from kvoffload.vllm.spec.manager_adapter import StrictManagerAdapter


def test_deltas_report_only_increases() -> None:
    deltas = CounterDeltas()
    assert deltas.take({("a", ()): 3, ("b", ("x",)): 0}) == {("a", ()): 3}
    assert deltas.take({("a", ()): 3, ("b", ("x",)): 2}) == {("b", ("x",)): 2}
    # A counter that went down (rebuilt source) reports nothing, then counts from its new value.
    assert deltas.take({("a", ()): 1, ("b", ("x",)): 2}) == {}
    assert deltas.take({("a", ()): 4, ("b", ("x",)): 2}) == {("a", ()): 3}


def test_aggregate_sums_per_series_over_workers_and_steps() -> None:
    rank0 = KVOffloadStats.of({(LOAD_BYTES, ()): 100, (EVICTIONS, ("lru",)): 2})
    rank1 = KVOffloadStats.of({(LOAD_BYTES, ()): 50, (EVICTIONS, ("arc",)): 1})
    scheduler = KVOffloadStats.of({(HIT_TOKENS, ()): 64})
    total = rank0.aggregate(rank1).aggregate(scheduler).aggregate(KVOffloadStats())
    assert isinstance(total, KVOffloadStats)
    assert total.samples() == {
        (LOAD_BYTES, ()): 150,
        (EVICTIONS, ("lru",)): 2,
        (EVICTIONS, ("arc",)): 1,
        (HIT_TOKENS, ()): 64,
    }
    assert total.reduce() == {
        EVICTIONS + "{arc}": 1,
        EVICTIONS + "{lru}": 2,
        HIT_TOKENS: 64,
        LOAD_BYTES: 150,
    }
    assert not total.is_empty() and KVOffloadStats().is_empty()
    with pytest.raises(TypeError, match="cannot aggregate KVOffloadStats with KVConnectorStats"):
        from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

        total.aggregate(KVConnectorStats())


def test_the_payload_survives_vllms_ipc_encoding_and_is_copied_on_rebuild() -> None:
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    stats = KVOffloadStats.of({(HIT_TOKENS, ()): 32, (TIER_OUTAGES, ("file",)): 1})
    payload = MsgpackDecoder().decode(MsgpackEncoder().encode(stats.to_dict()))
    rebuilt = KVOffloadConnector.build_kv_connector_stats(payload)
    assert rebuilt.samples() == stats.samples()
    # vLLM's logging accumulates into the rebuilt object; the payload it came from stays as sent.
    rebuilt.aggregate(KVOffloadStats.of({(HIT_TOKENS, ()): 1}))
    assert KVOffloadConnector.build_kv_connector_stats(payload).samples()[(HIT_TOKENS, ())] == 32
    assert KVOffloadConnector.build_kv_connector_stats(None).is_empty()


def test_scheduler_counters_follow_the_scheduler_manager_and_violations() -> None:
    config = OffloadConfig(gpu_block_size=32, blocks_per_chunk=1, num_cpu_blocks=4, policy="lru")
    side = SchedulerSide(OffloadingScheduler(config, CPUOffloadingManager(4, "lru", enable_events=False)))
    deltas = CounterDeltas()
    assert deltas.take(scheduler_counters(side, "lru")) == {}, "a fresh connector counts nothing"
    side.scheduler.stats.hit_tokens += 96
    side.scheduler.manager.stats.evictions += 2
    side.violations.append("lookup: refused")
    assert deltas.take(scheduler_counters(side, "lru")) == {
        (HIT_TOKENS, ()): 96,
        (EVICTIONS, ("lru",)): 2,
        (VIOLATIONS, ()): 1,
    }


def _registry_types() -> tuple[dict[type, Any], CollectorRegistry]:
    """Prometheus classes bound to a private registry, so a test never clashes with vLLM's."""
    registry = CollectorRegistry()
    return {kind: functools.partial(kind, registry=registry) for kind in (Counter, Gauge, Histogram)}, registry


def _config(extra: dict[str, Any]) -> Any:
    return SimpleNamespace(kv_transfer_config=SimpleNamespace(kv_connector_extra_config=extra))


def test_connector_prom_metrics_start_at_zero_and_add_the_payloads() -> None:
    types, registry = _registry_types()
    extra = {"eviction_policy": "lru", "file_tier": {"path": "/tmp/x", "size_bytes": 1 << 20}}
    prom = KVOffloadPromMetrics(_config(extra), types, ["model_name", "engine"], {0: ["m", "0"], 1: ["m", "1"]})

    def value(name: str, engine: str, **labels: str) -> float | None:
        return registry.get_sample_value(name + "_total", {"model_name": "m", "engine": engine, **labels})

    # Before any traffic every unlabeled counter, the policy's and the file tier's show 0.
    assert value(VIOLATIONS, "0") == 0.0 and value(VIOLATIONS, "1") == 0.0
    assert value(EVICTIONS, "0", policy="lru") == 0.0
    assert value(TIER_OUTAGES, "1", tier="file") == 0.0
    assert value(TIER_OUTAGES, "0", tier="redis") is None, "an unconfigured tier is not shown"
    for step in range(2):
        payload = KVOffloadStats.of({(HIT_TOKENS, ()): 32, (EVICTIONS, ("lru",)): step}).to_dict()
        prom.observe(payload, engine_idx=1)
    assert value(HIT_TOKENS, "1") == 64.0 and value(HIT_TOKENS, "0") == 0.0
    assert value(EVICTIONS, "1", policy="lru") == 1.0
    with pytest.raises(ValueError, match="unknown counter 'vllm:nope'"):
        prom.observe(KVOffloadStats.of({("vllm:nope", ()): 1}).to_dict())
    assert len({counter.name for counter in CONNECTOR_COUNTERS}) == len(CONNECTOR_COUNTERS)


def test_spec_stats_are_accepted_by_vllms_offloading_prom_metrics() -> None:
    """The spec's extra counters go through vLLM's own OffloadPromMetrics, which refuses any name
    the spec's build_metric_definitions did not declare."""
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadPromMetrics

    extra = {
        "spec_module_path": "kvoffload.vllm.spec",
        "spec_name": "KVOffloadSpec",
        "eviction_policy": "lru",
    }
    types, registry = _registry_types()
    prom = OffloadPromMetrics(_config(extra), types, ["model_name", "engine"], {0: ["m", "0"]})
    manager = CPUOffloadingManager(4, "lru", enable_events=False)
    adapter = StrictManagerAdapter(manager, 32, "lru")
    assert adapter.get_stats() is None, "nothing happened yet"
    manager.stats.evictions += 3
    manager.stats.admitted_keys += 5
    adapter.violations.append("lookup: refused")
    stats = adapter.get_stats()
    assert stats is not None
    prom.observe(stats.to_dict())
    labels = {"model_name": "m", "engine": "0", "policy": "lru"}
    assert registry.get_sample_value(EVICTIONS + "_total", labels) == 3.0
    assert registry.get_sample_value("vllm:kvoffload_admissions_total", labels) == 5.0
    assert registry.get_sample_value(VIOLATIONS + "_total", {"model_name": "m", "engine": "0"}) == 1.0
    assert adapter.get_stats() is None, "a second call reports only what changed since"
    # The tier counters are declared only with a tier configured.
    assert TIER_OUTAGES not in KVOffloadSpec.build_metric_definitions(extra)
    assert TIER_OUTAGES in KVOffloadSpec.build_metric_definitions({**extra, "file_tier": {"path": "/tmp/x"}})
    assert spec_counters(manager.stats, "lru", 0, None, [{"file": {"outages": 1}}, {"file": {"outages": 2}}])[
        (TIER_OUTAGES, ("file",))
    ] == 3, "the ranks' outages add up"
