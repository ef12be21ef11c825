"""The I/O driver of the tiers: runs the manager's tier jobs on a small thread pool.

The sans-IO core (kvoffload.tiers.manager) hands out :class:`TierJob` records; ``submit`` starts
each on the pool against its tier's backend (FileTier, RedisTier, or anything with the same
``write``/``read``), reading or writing the job's CPU blocks through a :class:`CpuChunks` view;
``poll(step)`` returns the outcomes of the jobs due by that engine step (``delay_steps`` after
submission, waiting for their I/O if needed), in job order, so a seeded run repeats exactly.

At construction the driver refuses (TierConfigError) a tier whose chunk size is not the CPU
block's and a local tier index with more slots than its file. ``stats()`` gives, per tier, the
outcomes of its chunks and its availability (outages, faulted jobs), for export as metrics.

Fault injection (seeded, decided at submission so threads cannot reorder it): an I/O error fails
a whole job, a corrupted chunk is written with one byte flipped after its checksum was taken.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from kvoffload.tiers.index import LocalTierIndex, TierIndex
from kvoffload.tiers.protocol import FAULT, KEY_RESULTS, TierConfigError, TierJob, TierOutcome


class CpuChunks(Protocol):
    """Byte access to the CPU tier's blocks (one chunk each)."""

    chunk_bytes: int

    def chunk_view(self, block_id: int) -> memoryview:
        """A writable view of CPU block ``block_id``'s ``chunk_bytes`` bytes."""
        ...


class TierBackend(Protocol):
    """The I/O side of one tier (a shared tier also answers ``probe``: see SharedTierBackend)."""

    def write(self, job: TierJob, payloads: Sequence[memoryview], corrupt: Sequence[bool]) -> tuple[str, ...]: ...

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]: ...


class SharedTierBackend(TierBackend, Protocol):
    def probe(self, job: TierJob) -> tuple[str, ...]:
        """Per key: ``ok`` if the tier holds it, ``miss`` if not (``fault`` when unreachable)."""
        ...


@dataclass(frozen=True)
class TierFaults:
    """Per-job I/O error and per-chunk corruption rates."""

    io_error_rate: float = 0.0
    corrupt_rate: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("io_error_rate", "corrupt_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"TierFaults.{name} must be in [0, 1], got {getattr(self, name)}")


def _check_sizes(backends: Mapping[str, TierBackend], cpu: CpuChunks, indexes: Sequence[TierIndex]) -> None:
    """A tier that places chunks itself must take whole CPU blocks and hold every slot of its index."""
    for name, backend in backends.items():
        chunk_bytes = getattr(backend, "chunk_bytes", None)
        if chunk_bytes is not None and chunk_bytes != cpu.chunk_bytes:
            raise TierConfigError(
                f"tier {name!r}: chunk_bytes={chunk_bytes}, the CPU blocks' {cpu.chunk_bytes}; they must be equal"
            )
    for index in indexes:
        if not isinstance(index, LocalTierIndex):
            continue
        file_slots = getattr(backends.get(index.name), "num_slots", None)
        if file_slots is not None and index.num_slots > file_slots:
            raise TierConfigError(
                f"tier {index.name!r}: its index {index.name!r} has {index.num_slots} slots, its file {file_slots}"
            )


class TierDriver:
    """Runs tier jobs; outcomes come back through ``poll`` / ``drain``."""

    def __init__(
        self,
        backends: Mapping[str, TierBackend],
        cpu: CpuChunks,
        threads: int = 4,
        delay_steps: int = 1,
        faults: TierFaults | None = None,
        indexes: Sequence[TierIndex] = (),
    ) -> None:
        if delay_steps < 0:
            raise ValueError(f"delay_steps must be >= 0, got {delay_steps}")
        _check_sizes(backends, cpu, indexes)
        self.backends = dict(backends)
        self.cpu = cpu
        self.delay_steps = delay_steps
        self.faults = faults or TierFaults()
        self._rng = random.Random(self.faults.seed)
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kvoffload-tier")
        self._pending: dict[int, tuple[Future[TierOutcome], int, str]] = {}
        self._outcomes: dict[str, dict[str, int]] = {name: dict.fromkeys(sorted(KEY_RESULTS), 0) for name in backends}
        self.injected_io_errors = 0
        self.injected_corruptions = 0

    def submit(self, jobs: Iterable[TierJob], step: int) -> None:
        """Start ``jobs`` (handed out during engine step ``step``); each is due at the first poll
        of step ``step + delay_steps`` or later."""
        faults = self.faults
        for job in jobs:
            if job.tier not in self.backends:
                raise ValueError(f"tier job {job.job_id} names tier {job.tier!r}; known: {sorted(self.backends)}")
            io_error = faults.io_error_rate > 0 and self._rng.random() < faults.io_error_rate
            corrupt = tuple(
                job.kind == "cascade" and faults.corrupt_rate > 0 and self._rng.random() < faults.corrupt_rate
                for _ in job.keys
            )
            self.injected_io_errors += io_error
            self.injected_corruptions += sum(corrupt)
            future = self._pool.submit(self._run, job, io_error, corrupt)
            self._pending[job.job_id] = (future, step + self.delay_steps, job.tier)

    def _run(self, job: TierJob, io_error: bool, corrupt: Sequence[bool]) -> TierOutcome:
        if io_error:
            return TierOutcome(job.job_id, (FAULT,) * len(job.keys))
        backend = self.backends[job.tier]
        if job.kind == "probe":
            return TierOutcome(job.job_id, backend.probe(job))  # type: ignore[attr-defined]
        views = [self.cpu.chunk_view(block) for block in job.cpu_block_ids]
        if job.kind == "cascade":
            return TierOutcome(job.job_id, backend.write(job, views, corrupt))
        results, foreign = backend.read(job, views)
        return TierOutcome(job.job_id, results, foreign)

    def poll(self, step: int) -> list[TierOutcome]:
        """Outcomes of the jobs due by ``step``, in job order."""
        due = sorted(job_id for job_id, (_, at, _) in self._pending.items() if at <= step)
        return [self._collect(job_id) for job_id in due]

    def drain(self) -> list[TierOutcome]:
        """Outcomes of every job still in flight, in job order."""
        return [self._collect(job_id) for job_id in sorted(self._pending)]

    def _collect(self, job_id: int) -> TierOutcome:
        future, _, tier = self._pending.pop(job_id)
        outcome = future.result()
        counts = self._outcomes[tier]
        for result in outcome.results:
            counts[result] += 1
        return outcome

    def stats(self) -> dict[str, dict[str, int]]:
        """Per tier: how many chunks had each job outcome (``ok``, ``miss``, ``corrupt``,
        ``fault``; jobs collected by ``poll``/``drain``) and, for tiers that track it, ``available``
        (1/0), ``outages`` and ``faulted_jobs`` (see kvoffload.tiers.health)."""
        report = {}
        for name, backend in self.backends.items():
            counts = dict(self._outcomes[name])
            health = getattr(backend, "stats", None)
            if health is not None:
                counts.update(health())
            report[name] = counts
        return report

    def in_flight(self) -> set[int]:
        return set(self._pending)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
