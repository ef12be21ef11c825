"""``kvoffload simulate --tiers cpu,file,redis [--engines N]``: the simulator with secondary tiers.

Each engine instance has its own CPU tier (a :class:`TieringManager` around the CPU manager), its
own file tier (one preallocated file in a temporary directory) and shares one Redis tier with the
other instances (a private ``redis-server`` unless ``--redis-url`` is given). The workload's
requests go to the engines in turn, so a user's next turn often lands on another engine, which
can only hit its prefix through the shared tier: the cross-engine hit tokens.

Every step checks the protocol's invariants and the tiering invariants; every loaded block is
compared with what the model wrote for its prefix; ``--faults RATE`` adds, on top of the
simulator's transfer failures, aborts and resets: tier I/O errors and corrupted chunks at RATE
and Redis restarts (at RATE / 10 per step, with a private server).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.tiers.driver import TierBackend, TierDriver, TierFaults
from kvoffload.tiers.index import LocalTierIndex, SharedTierIndex, TierIndex
from kvoffload.tiers.invariants import check_tier_invariants
from kvoffload.tiers.manager import TieringManager, TierStats
from kvoffload_lab.sim.engine import Engine, EngineConfig, StepReport
from kvoffload_lab.sim.request import SimRequest
from kvoffload_lab.sim.runner import SimulationOptions, summarise
from kvoffload_lab.sim.tiered.bytes_worker import ByteModelWorker
from kvoffload_lab.sim.workload import MultiTurnWorkload

SECONDARY_TIERS: tuple[str, ...] = ("file", "redis")


@dataclass(frozen=True)
class TierSimOptions:
    """The tier options of ``kvoffload simulate`` (the rest is in ``base``)."""

    base: SimulationOptions
    tiers: tuple[str, ...] = ("cpu", "file", "redis")
    engines: int = 1
    file_slots: int = 2048
    chunk_bytes: int = 4096
    redis_url: str | None = None
    tier_dir: str | None = None
    threads: int = 4

    def __post_init__(self) -> None:
        if not self.tiers or self.tiers[0] != "cpu":
            raise ValueError(f"--tiers must start with cpu (the primary tier), got {','.join(self.tiers)}")
        unknown = [t for t in self.tiers[1:] if t not in SECONDARY_TIERS]
        if unknown or len(set(self.tiers)) != len(self.tiers):
            raise ValueError(
                f"--tiers {','.join(self.tiers)}: each of {', '.join(SECONDARY_TIERS)} may follow cpu once"
            )
        if self.engines < 1 or self.file_slots < 1 or self.threads < 1:
            raise ValueError("--engines, --file-slots and --tier-threads must be >= 1")
        if self.engines > 1 and "redis" not in self.tiers:
            raise ValueError("--engines N > 1 needs the shared redis tier in --tiers")


class TieredEngine(Engine):
    """An :class:`Engine` whose manager is a :class:`TieringManager`, with a tier I/O driver.

    Per step: apply the tier outcomes due now -> the engine's step -> tiering invariants ->
    submit the tier jobs handed out during the step."""

    def __init__(self, config: EngineConfig, backend: ByteModelWorker, manager: TieringManager,
                 driver: TierDriver) -> None:
        super().__init__(config, OffloadingScheduler(config.offload_config(), manager=manager), backend)  # type: ignore[arg-type]
        self.manager = manager
        self.driver = driver
        self._handed_out_at: dict[int, int] = {}
        self.promotion_steps: list[int] = []

    def step(self) -> StepReport:
        now = self.stats.steps + 1
        for outcome in self.driver.poll(now):
            self._apply_tier_outcome(outcome, now)
        report = super().step()
        self._record(check_tier_invariants(self.scheduler, self.manager))
        jobs = self.manager.take_tier_jobs()
        for job in jobs:
            if job.kind == "promote":
                self._handed_out_at[job.job_id] = self.stats.steps
        self.driver.submit(jobs, self.stats.steps)
        return report

    def _apply_tier_outcome(self, outcome: Any, now: int) -> None:
        self.manager.complete_tier_job(outcome)
        started = self._handed_out_at.pop(outcome.job_id, None)
        if started is not None:
            self.promotion_steps.append(now - started)

    def finish_tier_jobs(self) -> None:
        """Apply every outstanding tier outcome (after the engine drained)."""
        while self.driver.in_flight():
            for outcome in self.driver.drain():
                self._apply_tier_outcome(outcome, self.stats.steps)

    @property
    def idle(self) -> bool:
        return super().idle and not self.driver.in_flight()

    def leaks(self) -> list[str]:
        return super().leaks() + [
            f"tier job {job_id} ({job.kind} to {job.tier}) still in flight"
            for job_id, job in sorted(self.manager.tier_jobs_in_flight.items())
        ]


class EngineRouter:
    """Looks like one engine to the workload; sends each new request to the next engine."""

    def __init__(self, engines: Sequence[Engine]) -> None:
        self.engines = list(engines)
        self.on_finished: list[Any] = []
        for engine in self.engines:
            engine.on_finished = self.on_finished
        self._count = 0

    @property
    def max_model_tokens(self) -> int:
        return min(engine.max_model_tokens for engine in self.engines)

    def add_request(self, prompt: Sequence[int], max_tokens: int) -> SimRequest:
        index = self._count % len(self.engines)
        request_id = f"e{index}-req-{self._count}"
        self._count += 1
        return self.engines[index].add_request(prompt, max_tokens, request_id)


def _build_engine(options: TierSimOptions, index: int, directory: str, redis_url: str | None) -> TieredEngine:
    base = options.base
    config = replace(base.engine_config(), seed=base.seed + 101 * index)
    indexes: list[TierIndex] = []
    backends: dict[str, TierBackend] = {}
    for name in options.tiers[1:]:
        if name == "file":
            from kvoffload.tiers.file_tier import FileTier

            indexes.append(LocalTierIndex("file", options.file_slots))
            path = os.path.join(directory, f"engine{index}.tier")
            backends["file"] = FileTier(path, options.file_slots, options.chunk_bytes, writer=index)
        else:
            from kvoffload.tiers.redis_tier import RedisTier, RedisTierConfig

            indexes.append(SharedTierIndex("redis"))
            backends["redis"] = RedisTier(
                RedisTierConfig(
                    url=redis_url or "", model="sim", layout=f"b{base.gpu_block_size}x{base.blocks_per_chunk}"
                ),
                writer=index,
            )
    manager = TieringManager(CPUOffloadingManager(base.num_cpu_blocks, base.policy), indexes)
    worker = ByteModelWorker(
        base.blocks_per_chunk, base.num_cpu_blocks, options.chunk_bytes, base.delay, base.faults, config.seed + 1
    )
    faults = TierFaults(io_error_rate=base.faults, corrupt_rate=base.faults, seed=config.seed + 7)
    driver = TierDriver(backends, worker, options.threads, max(base.delay, 1), faults, indexes)
    return TieredEngine(config, worker, manager, driver)


def simulate_tiered(options: TierSimOptions) -> dict[str, Any]:
    """Run the workload over ``options.engines`` tiered engines; the summary of ``simulate --json``."""
    base = options.base
    server = None
    redis_url = options.redis_url
    if "redis" in options.tiers and redis_url is None:
        from kvoffload_lab.redis_server import RedisServer

        server = RedisServer().start()
        redis_url = server.url
    directory = options.tier_dir or tempfile.mkdtemp(prefix="kvoffload-tiers-")
    engines: list[TieredEngine] = []
    try:
        engines += [_build_engine(options, index, directory, redis_url) for index in range(options.engines)]
    except BaseException:
        _close(engines, server, None if options.tier_dir else directory)
        raise
    router = EngineRouter(engines)
    workload = MultiTurnWorkload(base.workload_config())
    workload.attach(router)  # type: ignore[arg-type]
    rng = random.Random(base.seed + 13)
    restarts = 0
    try:
        for _ in range(base.max_steps):
            workload.tick(router)  # type: ignore[arg-type]
            if workload.done and all(engine.idle for engine in engines):
                break
            for engine in engines:
                engine.step()
            if server is not None and base.faults and rng.random() < base.faults / 10:
                server.restart()
                restarts += 1
        else:
            raise RuntimeError(f"simulation did not finish within {base.max_steps} steps")
        for engine in engines:
            engine.finish_tier_jobs()
        return _summary(options, engines, restarts)
    finally:
        _close(engines, server, None if options.tier_dir else directory)


def _close(engines: Sequence[TieredEngine], server: Any, temporary_directory: str | None) -> None:
    """Stop the I/O threads, remove the tier files, stop a private server and the temp dir."""
    for engine in engines:
        engine.driver.close()
        for backend in engine.driver.backends.values():
            backend.close(**({"remove": True} if hasattr(backend, "path") else {}))  # type: ignore[attr-defined]
    if server is not None:
        server.stop()
    if temporary_directory is not None:
        shutil.rmtree(temporary_directory, ignore_errors=True)


def _summary(options: TierSimOptions, engines: Sequence[TieredEngine], restarts: int) -> dict[str, Any]:
    summaries = [summarise(engine) for engine in engines]
    result: dict[str, Any] = {}
    for key, value in summaries[0].items():
        if isinstance(value, bool) or not isinstance(value, int):
            result[key] = value if key != "violation_messages" else [m for s in summaries for m in s[key]][:20]
        else:
            result[key] = sum(summary[key] for summary in summaries)
    leak_lines = [line for engine in engines for line in engine.leaks()]
    result["leaks"] = len(leak_lines)
    result["leak_messages"] = leak_lines[:20]
    chunk_tokens = options.base.gpu_block_size * options.base.blocks_per_chunk
    tiers: dict[str, dict[str, int]] = {}
    for name in options.tiers[1:]:
        total = TierStats()
        for engine in engines:
            stats = engine.manager.tier_stats[name]
            for field in fields(TierStats):
                setattr(total, field.name, getattr(total, field.name) + getattr(stats, field.name))
        tiers[name] = {**asdict(total), "hit_tokens": total.promoted_keys * chunk_tokens}
    promotion_steps = [steps for engine in engines for steps in engine.promotion_steps]
    result.update(
        tiers=tiers,
        engines=len(engines),
        tier_names=list(options.tiers),
        cross_engine_hit_tokens=sum(t.get("foreign_keys", 0) for t in tiers.values()) * chunk_tokens,
        checksum_failures=sum(t["checksum_failures"] for t in tiers.values()),
        tier_faults=sum(t["faults"] for t in tiers.values()),
        injected_tier_io_errors=sum(engine.driver.injected_io_errors for engine in engines),
        injected_tier_corruptions=sum(engine.driver.injected_corruptions for engine in engines),
        redis_restarts=restarts,
        deferred_tier_lookups=sum(engine.manager.deferred_lookups for engine in engines),
        promotion_steps_max=max(promotion_steps, default=0),
        promotion_steps_mean=round(sum(promotion_steps) / len(promotion_steps), 3) if promotion_steps else 0.0,
        backend="model+bytes",
    )
    return result


def print_summary(result: dict[str, Any]) -> None:
    """The tiered run as two tables: the checks and hits, then one row per secondary tier."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    tier_names = ",".join(result["tier_names"])
    overview = Table(title=f"kvoffload simulate --tiers {tier_names} ({result['engines']} engine(s))")
    overview.add_column("")
    overview.add_column("value", justify="right")
    for label, key in (
        ("requests finished / aborted", None), ("engine steps", "steps"), ("admitted tokens", "admitted_tokens"),
        ("served by the GPU prefix cache", "gpu_hit_tokens"), ("served by offload (CPU + tiers)", "offload_hit_tokens"),
        ("cross-engine hit tokens", "cross_engine_hit_tokens"), ("promotion wait, max steps", "promotion_steps_max"),
        ("invariant violations", "violations"), ("leaks after drain", "leaks"),
        ("loaded blocks checked / integrity failures", None), ("redis restarts", "redis_restarts"),
    ):
        if label.startswith("requests"):
            value = f"{result['finished']} / {result['aborted']}"
        elif label.startswith("loaded"):
            value = f"{result['integrity_checked_blocks']} / {result['integrity_failures']}"
        else:
            value = str(result[key])
        overview.add_row(label, value)
    console.print(overview)
    columns = {
        "hit_tokens": "hit tokens", "promotions": "promotions", "failed_promotions": "failed",
        "cascaded_keys": "cascaded", "misses": "misses", "checksum_failures": "bad sums", "faults": "faults",
    }
    tiers = Table(title="secondary tiers (chunks, except hit tokens)")
    tiers.add_column("tier")
    for header in columns.values():
        tiers.add_column(header, justify="right")
    for name, stats in result["tiers"].items():
        tiers.add_row(name, *(str(stats[column]) for column in columns))
    console.print(tiers)
    ok = result["violations"] == 0 and result["leaks"] == 0 and result["integrity_failures"] == 0
    console.print("[green]OK: no violation, no leak, every loaded block intact[/green]" if ok else "[red]FAILED[/red]")
    for message in [*result["violation_messages"], *result["leak_messages"]]:
        console.print(f"[red]{message}[/red]", highlight=False)
