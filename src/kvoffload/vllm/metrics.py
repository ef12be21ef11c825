"""kvoffload's counters in vLLM's ``/metrics``, through vLLM's KV connector stats API.

vLLM asks the connector for its stats after every engine step (``get_kv_connector_stats``, on the
worker side in each worker and on the scheduler side in the engine core), adds the workers' and
the scheduler's together (``KVConnectorStats.aggregate``), ships the payload (``to_dict``) to the
API server, rebuilds it there (``build_kv_connector_stats``) and hands it to the Prometheus
metrics the connector class built (``build_prom_metrics``). So each side reports the increase of
its cumulative counters since its last report (:class:`CounterDeltas`), and the API server only
adds them up.

Names: where a counter means what vLLM's OffloadingConnector's counter of that name means, it
carries vLLM's name (``vllm:kv_offload_*``), so one dashboard reads both; kvoffload's own counters
are ``vllm:kvoffload_*`` (the ``vllm:`` prefix also lets vLLM's metric clean-up, which unregisters
every collector whose name contains ``vllm``, remove them between two servers in one process).
prometheus_client appends ``_total`` to every counter's name in the exposition.

:data:`CONNECTOR_COUNTERS` are :class:`~kvoffload.vllm.connector.KVOffloadConnector`'s;
:data:`SPEC_COUNTERS` the few that :class:`~kvoffload.vllm.spec.KVOffloadSpec` adds to
vLLM's own OffloadingConnector counters (which already give bytes, times and allocation failures).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorPromMetrics, KVConnectorStats

from kvoffload.offload.types import DEFAULT_POLICY

if TYPE_CHECKING:
    from kvoffload.offload.manager import ManagerStats
    from kvoffload.tiers.manager import TierStats
    from kvoffload.vllm.connector.scheduler_side import SchedulerSide
    from kvoffload.vllm.connector.worker_side import WorkerSide
    from kvoffload.vllm.tier_io import WorkerTiers

# (metric name, label values): one time series of one counter.
Sample = tuple[str, tuple[str, ...]]

# Label values travel joined into one string key: the payload crosses vLLM's IPC (msgpack), where
# a string key is safe and a tuple key is not guaranteed to be.
_LABEL_SEPARATOR = "\x1f"
_COUNTERS = "counters"


@dataclass(frozen=True)
class CounterDef:
    """One counter: its Prometheus name, help text, labels, and whether vLLM's OffloadingConnector
    has a counter of the same name and meaning."""

    name: str
    documentation: str
    labelnames: tuple[str, ...] = ()
    same_as_vllm: bool = False


LOOKUPS = "vllm:kvoffload_lookups"
HIT_TOKENS = "vllm:kvoffload_hit_tokens"
LOADS = "vllm:kvoffload_loads"
LOADED_CHUNKS = "vllm:kvoffload_loaded_chunks"
LOAD_FAILURES = "vllm:kvoffload_load_failures"
STORES = "vllm:kvoffload_stores"
STORED_CHUNKS = "vllm:kvoffload_stored_chunks"
STORE_FAILURES = "vllm:kvoffload_store_failures"
ALLOCATION_FAILURE = "vllm:kv_offload_allocation_failure"
LOAD_BYTES = "vllm:kv_offload_load_bytes"
LOAD_TIME = "vllm:kv_offload_load_time"
STORE_BYTES = "vllm:kv_offload_store_bytes"
STORE_TIME = "vllm:kv_offload_store_time"
ADMISSIONS = "vllm:kvoffload_admissions"
ADMISSION_REJECTIONS = "vllm:kvoffload_admission_rejections"
EVICTIONS = "vllm:kvoffload_evictions"
TIER_PROBES = "vllm:kvoffload_tier_probes"
TIER_PROBE_HITS = "vllm:kvoffload_tier_probe_hit_chunks"
TIER_PROMOTIONS = "vllm:kvoffload_tier_promotions"
TIER_PROMOTED_CHUNKS = "vllm:kvoffload_tier_promoted_chunks"
TIER_LOADED_CHUNKS = "vllm:kvoffload_tier_loaded_chunks"
TIER_CASCADES = "vllm:kvoffload_tier_cascades"
TIER_CASCADED_CHUNKS = "vllm:kvoffload_tier_cascaded_chunks"
TIER_MISSES = "vllm:kvoffload_tier_misses"
TIER_CHECKSUM_FAILURES = "vllm:kvoffload_tier_checksum_failures"
TIER_FAULTS = "vllm:kvoffload_tier_faults"
TIER_OUTAGES = "vllm:kvoffload_tier_outages"
VIOLATIONS = "vllm:kvoffload_lifecycle_violations"

_POLICY = ("policy",)
_TIER = ("tier",)

CONNECTOR_COUNTERS: tuple[CounterDef, ...] = (
    CounterDef(LOOKUPS, "Lookups of a waiting request's prefix in the offload tiers."),
    CounterDef(HIT_TOKENS, "Prompt tokens loaded from the offload tiers instead of computed."),
    CounterDef(LOADS, "Load jobs (offload tier to GPU) started."),
    CounterDef(LOADED_CHUNKS, "Chunks loaded from the CPU tier to GPU."),
    CounterDef(LOAD_FAILURES, "Load jobs that failed (their tokens are recomputed or the request fails)."),
    CounterDef(STORES, "Store jobs (GPU to CPU tier) started."),
    CounterDef(STORED_CHUNKS, "Chunks stored from GPU to the CPU tier."),
    CounterDef(STORE_FAILURES, "Store jobs that failed (the chunks are dropped, never loadable)."),
    CounterDef(ALLOCATION_FAILURE, "Number of KV offload store allocation attempts that failed.", same_as_vllm=True),
    CounterDef(LOAD_BYTES, "Total bytes loaded from offload storage to GPU.", same_as_vllm=True),
    CounterDef(LOAD_TIME, "Total load time from offload storage to GPU, in seconds.", same_as_vllm=True),
    CounterDef(STORE_BYTES, "Total bytes stored from GPU to offload storage.", same_as_vllm=True),
    CounterDef(STORE_TIME, "Total store time from GPU to offload storage, in seconds.", same_as_vllm=True),
    CounterDef(ADMISSIONS, "Chunks the CPU tier's policy admitted (given a CPU block).", _POLICY),
    CounterDef(ADMISSION_REJECTIONS, "Chunks offered for storing that the CPU tier's policy refused.", _POLICY),
    CounterDef(EVICTIONS, "Chunks the CPU tier's policy evicted to make room.", _POLICY),
    CounterDef(TIER_PROBES, "Probes of a shared secondary tier (which chunks it holds).", _TIER),
    CounterDef(TIER_PROBE_HITS, "Chunks a secondary tier's probes found.", _TIER),
    CounterDef(TIER_PROMOTIONS, "Promotion jobs (secondary tier to CPU tier) started.", _TIER),
    CounterDef(TIER_PROMOTED_CHUNKS, "Chunks promoted from a secondary tier into the CPU tier.", _TIER),
    CounterDef(TIER_LOADED_CHUNKS, "Promoted chunks a load then used: the tier's hits as the engine saw them.", _TIER),
    CounterDef(TIER_CASCADES, "Cascade jobs (CPU tier to a secondary tier) started.", _TIER),
    CounterDef(TIER_CASCADED_CHUNKS, "Chunks written to a secondary tier.", _TIER),
    CounterDef(TIER_MISSES, "Chunks a promotion did not find in the secondary tier.", _TIER),
    CounterDef(TIER_CHECKSUM_FAILURES, "Chunks read from a secondary tier that failed their record's checks.", _TIER),
    CounterDef(TIER_FAULTS, "Chunks whose tier job faulted (the tier unavailable or an I/O error).", _TIER),
    CounterDef(TIER_OUTAGES, "Times a secondary tier became unavailable (summed over tensor-parallel ranks).", _TIER),
    CounterDef(VIOLATIONS, "Lifecycle violations kvoffload refused (each also stops the engine step)."),
)

# What KVOffloadSpec adds to vLLM's OffloadingConnector counters.
SPEC_COUNTERS: tuple[CounterDef, ...] = tuple(
    counter
    for counter in CONNECTOR_COUNTERS
    if counter.name in {ADMISSIONS, ADMISSION_REJECTIONS, EVICTIONS, VIOLATIONS} or counter.labelnames == _TIER
)


def label_key(labelvalues: tuple[str, ...]) -> str:
    """The payload's string key of ``labelvalues`` ("" when unlabeled)."""
    return _LABEL_SEPARATOR.join(labelvalues)


def label_values(key: str) -> tuple[str, ...]:
    """The label values of a payload key (the inverse of :func:`label_key`)."""
    return tuple(key.split(_LABEL_SEPARATOR)) if key else ()


class CounterDeltas:
    """Turns cumulative counters into the increase since the previous call. A counter that went
    down (its source was rebuilt) reports nothing: a Prometheus counter never decreases."""

    def __init__(self) -> None:
        self._last: dict[Sample, float] = {}

    def take(self, current: Mapping[Sample, float]) -> dict[Sample, float]:
        last = self._last
        increase = {sample: value - last.get(sample, 0) for sample, value in current.items()}
        self._last = dict(current)
        return {sample: value for sample, value in increase.items() if value > 0}


@dataclass
class KVOffloadStats(KVConnectorStats):
    """kvoffload's stats payload: ``data = {"counters": {name: {label key: increase}}}``; ``aggregate``
    adds increases up (workers, scheduler and steps alike)."""

    def __post_init__(self) -> None:
        if _COUNTERS not in self.data:
            self.reset()

    @classmethod
    def of(cls, increases: Mapping[Sample, float]) -> KVOffloadStats:
        """A payload holding ``increases``."""
        stats = cls()
        for (name, labelvalues), value in increases.items():
            stats.add(name, value, labelvalues)
        return stats

    def reset(self) -> None:
        self.data = {_COUNTERS: {}}

    def add(self, name: str, value: float, labelvalues: tuple[str, ...] = ()) -> None:
        """Count ``value`` more on ``name`` with ``labelvalues``."""
        series = self.data[_COUNTERS].setdefault(name, {})
        key = label_key(labelvalues)
        series[key] = series.get(key, 0) + value

    def samples(self) -> dict[Sample, float]:
        """Every time series with its value."""
        return {
            (name, label_values(key)): value
            for name, series in self.data[_COUNTERS].items()
            for key, value in series.items()
        }

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        if not isinstance(other, KVOffloadStats):
            raise TypeError(f"cannot aggregate KVOffloadStats with {type(other).__name__}")
        for (name, labelvalues), value in other.samples().items():
            self.add(name, value, labelvalues)
        return self

    def reduce(self) -> dict[str, int | float]:
        return {
            name + ("{" + ",".join(labelvalues) + "}" if labelvalues else ""): value
            for (name, labelvalues), value in sorted(self.samples().items())
        }

    def is_empty(self) -> bool:
        return not self.data[_COUNTERS]


def stats_from_payload(data: dict[str, Any] | None) -> KVOffloadStats:
    """A payload rebuilt from ``to_dict()``'s output; copied, since vLLM's logging accumulates into
    the object it gets while the same dict may still be read by the Prometheus logger."""
    if not data:
        return KVOffloadStats()
    return KVOffloadStats({_COUNTERS: {name: dict(series) for name, series in data.get(_COUNTERS, {}).items()}})


def _policy_counters(stats: ManagerStats, policy: str) -> dict[Sample, float]:
    label = (policy,)
    return {
        (ADMISSIONS, label): stats.admitted_keys,
        (ADMISSION_REJECTIONS, label): stats.rejected_by_admission,
        (EVICTIONS, label): stats.evictions,
    }


def _tier_counters(tier_stats: Mapping[str, TierStats]) -> dict[Sample, float]:
    counters: dict[Sample, float] = {}
    for tier, stats in tier_stats.items():
        label = (tier,)
        counters.update({
            (TIER_PROBES, label): stats.probes,
            (TIER_PROBE_HITS, label): stats.probe_hits,
            (TIER_PROMOTIONS, label): stats.promotions,
            (TIER_PROMOTED_CHUNKS, label): stats.promoted_keys,
            (TIER_LOADED_CHUNKS, label): stats.loaded_keys,
            (TIER_CASCADES, label): stats.cascades,
            (TIER_CASCADED_CHUNKS, label): stats.cascaded_keys,
            (TIER_MISSES, label): stats.misses,
            (TIER_CHECKSUM_FAILURES, label): stats.checksum_failures,
            (TIER_FAULTS, label): stats.faults,
        })
    return counters


def scheduler_counters(side: SchedulerSide, policy: str) -> dict[Sample, float]:
    """The cumulative counters :class:`~kvoffload.vllm.connector.KVOffloadConnector`'s scheduler
    side keeps (the scheduler's, the CPU tier's, each secondary tier's, the violations)."""
    scheduler = side.scheduler.stats
    counters: dict[Sample, float] = {
        (LOOKUPS, ()): scheduler.lookups,
        (HIT_TOKENS, ()): scheduler.hit_tokens,
        (LOADS, ()): scheduler.loads,
        (LOADED_CHUNKS, ()): scheduler.loaded_chunks,
        (LOAD_FAILURES, ()): scheduler.load_failures,
        (STORES, ()): scheduler.stores,
        (STORED_CHUNKS, ()): scheduler.stored_chunks,
        (STORE_FAILURES, ()): scheduler.store_failures,
        (ALLOCATION_FAILURE, ()): scheduler.store_allocation_failures,
        (VIOLATIONS, ()): len(side.violations),
    }
    counters.update(_policy_counters(side.scheduler.manager.stats, policy))
    if side.tiers is not None:
        counters.update(_tier_counters(side.tiers.tier_stats))
    return counters


def worker_counters(side: WorkerSide, tiers: WorkerTiers | None) -> dict[Sample, float]:
    """The cumulative counters one worker (one tensor-parallel rank) keeps: the bytes and copy
    seconds of its shard's loads and stores, and its secondary tiers' outages."""
    worker = side.worker
    counters: dict[Sample, float] = {
        (LOAD_BYTES, ()): worker.moved_bytes["load"],
        (LOAD_TIME, ()): worker.moved_seconds["load"],
        (STORE_BYTES, ()): worker.moved_bytes["store"],
        (STORE_TIME, ()): worker.moved_seconds["store"],
    }
    if tiers is not None:
        for tier, health in tiers.driver.stats().items():
            counters[(TIER_OUTAGES, (tier,))] = health.get("outages", 0)
    return counters


def spec_counters(
    stats: ManagerStats,
    policy: str,
    violations: int,
    tier_stats: Mapping[str, TierStats] | None = None,
    tier_health: Iterable[Mapping[str, Mapping[str, int]]] = (),
) -> dict[Sample, float]:
    """The cumulative counters :class:`~kvoffload.vllm.spec.KVOffloadSpec`'s manager
    adds to vLLM's own; ``tier_health``: per rank, per tier, ``TierDriver.stats()`` (the spec runs
    every rank's tier I/O in the scheduler process)."""
    counters = _policy_counters(stats, policy)
    counters[(VIOLATIONS, ())] = violations
    if tier_stats is not None:
        counters.update(_tier_counters(tier_stats))
    for rank in tier_health:
        for tier, health in rank.items():
            sample = (TIER_OUTAGES, (tier,))
            counters[sample] = counters.get(sample, 0) + health.get("outages", 0)
    return counters


def configured_tiers(extra: Mapping[str, Any]) -> list[str]:
    """The secondary tiers a ``kv_connector_extra_config`` turns on, by their metric label."""
    return [tier for tier, key in (("file", "file_tier"), ("redis", "redis_tier")) if extra.get(key)]


def initial_series(counters: Iterable[CounterDef], extra: Mapping[str, Any]) -> list[Sample]:
    """The time series to show at 0 before any traffic: every unlabeled counter, the policy's and
    the configured tiers' (a scrape can then tell "no failures" from "not exported")."""
    policy = str(extra.get("eviction_policy", DEFAULT_POLICY))
    tiers = configured_tiers(extra)
    series: list[Sample] = []
    for counter in counters:
        if not counter.labelnames:
            series.append((counter.name, ()))
        elif counter.labelnames == _POLICY:
            series.append((counter.name, (policy,)))
        else:
            series += [(counter.name, (tier,)) for tier in tiers]
    return series


class KVOffloadPromMetrics(KVConnectorPromMetrics):
    """Registers :data:`CONNECTOR_COUNTERS` as Prometheus counters (with vLLM's per-engine labels)
    and adds each payload's increases to them."""

    counters: tuple[CounterDef, ...] = CONNECTOR_COUNTERS

    def __init__(
        self,
        vllm_config: Any,
        metric_types: dict[type, type],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._families = {
            counter.name: self._counter_cls(
                name=counter.name,
                documentation=counter.documentation,
                labelnames=[*labelnames, *counter.labelnames],
            )
            for counter in self.counters
        }
        self._bound: dict[tuple[int, Sample], Any] = {}
        transfer = vllm_config.kv_transfer_config
        extra = dict(transfer.kv_connector_extra_config or {}) if transfer is not None else {}
        for engine in per_engine_labelvalues:
            for sample in initial_series(self.counters, extra):
                self._series(engine, sample)

    def _series(self, engine: int, sample: Sample) -> Any:
        bound = self._bound.get((engine, sample))
        if bound is None:
            name, labelvalues = sample
            engine_labels = [str(value) for value in self.per_engine_labelvalues[engine]]
            bound = self._families[name].labels(*engine_labels, *labelvalues)
            self._bound[(engine, sample)] = bound
        return bound

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for sample, value in stats_from_payload(transfer_stats_data).samples().items():
            if sample[0] not in self._families:
                raise ValueError(f"kvoffload metrics: unknown counter {sample[0]!r} in the stats payload")
            self._series(engine_idx, sample).inc(value)
