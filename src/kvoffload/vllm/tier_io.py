"""Tier I/O on the worker side of :class:`~kvoffload.vllm.connector.KVOffloadConnector` (no vLLM import).

The CPU tier's bytes live in the worker: the block mover's per-layer CPU pools, where chunk ``c``
is rows ``c * blocks_per_chunk ...`` of every layer. A tier stores a chunk as one value, so
:class:`LayerChunks` gathers a chunk's rows of every layer into one buffer for a cascade, and a
promotion reads into a buffer that is scattered into the rows only once its checksum matched
(:class:`ScatteringBackend`): a corrupt, truncated or foreign value never reaches the CPU tier.

:class:`WorkerTiers` runs the tier jobs that arrive in the connector metadata on a
:class:`~kvoffload.tiers.driver.TierDriver` and hands their outcomes back for the worker's report:
the jobs of metadata step ``s`` report in step ``s + 1``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from kvoffload.tiers.driver import TierBackend, TierDriver
from kvoffload.tiers.protocol import OK, TierConfigError, TierJob, TierOutcome
from kvoffload.vllm.settings import ConfigError
from kvoffload.vllm.tier_settings import TierSettings

if TYPE_CHECKING:
    # The tiers' records need the ``tiers`` extra (xxhash): imported only where a tier is opened,
    # so an engine without tiers runs without it.
    from kvoffload.tiers.record import Namespace


class LayerChunks:
    """The mover's CPU pools as the driver's ``CpuChunks``: one gathered buffer per chunk."""

    def __init__(self, cpu_layers: Sequence[torch.Tensor], blocks_per_chunk: int) -> None:
        self.blocks_per_chunk = blocks_per_chunk
        # Each layer as (blocks, bytes per block) of uint8, so a chunk is a slice of rows.
        self.layers = [layer.reshape(layer.shape[0], -1).view(torch.uint8) for layer in cpu_layers]
        self.chunk_bytes = sum(layer.shape[1] for layer in self.layers) * blocks_per_chunk

    def _rows(self, chunk: int) -> list[torch.Tensor]:
        first = chunk * self.blocks_per_chunk
        return [layer[first : first + self.blocks_per_chunk].reshape(-1) for layer in self.layers]

    def chunk_view(self, block_id: int) -> memoryview:
        """A copy of chunk ``block_id``'s bytes (every layer's rows, in layer order)."""
        out = bytearray(self.chunk_bytes)
        flat = torch.frombuffer(out, dtype=torch.uint8)
        offset = 0
        for rows in self._rows(block_id):
            flat[offset : offset + rows.numel()].copy_(rows)
            offset += rows.numel()
        return memoryview(out)

    def scatter(self, block_id: int, data: memoryview) -> None:
        """Write ``data`` (a gathered chunk) into chunk ``block_id``'s rows."""
        flat = torch.frombuffer(data, dtype=torch.uint8)
        offset = 0
        for rows in self._rows(block_id):
            rows.copy_(flat[offset : offset + rows.numel()])
            offset += rows.numel()


class ScatteringBackend:
    """A tier backend whose verified promotions land in the CPU pools' rows."""

    def __init__(self, inner: TierBackend, chunks: LayerChunks) -> None:
        self.inner = inner
        self.chunks = chunks

    def write(self, job: TierJob, payloads: Sequence[memoryview], corrupt: Sequence[bool]) -> tuple[str, ...]:
        return self.inner.write(job, payloads, corrupt)

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]:
        results, foreign = self.inner.read(job, outs)
        for block, out, result in zip(job.cpu_block_ids, outs, results, strict=True):
            if result == OK:
                self.chunks.scatter(block, out)
        return results, foreign

    def probe(self, job: TierJob) -> tuple[str, ...]:
        return self.inner.probe(job)  # type: ignore[attr-defined]


def writer_id(engine_id: str) -> int:
    """A 32-bit id of this engine for the tiers' records (cross-engine hits are counted by it)."""
    return zlib.crc32(engine_id.encode())


def open_backends(
    settings: TierSettings, chunk_bytes: int, file_slots: int, namespace: Namespace, writer: int
) -> dict[str, TierBackend]:
    """The I/O side of each configured tier (a file tier's file is created or reopened here, and
    locked); ConfigError naming the setting when one cannot be opened."""
    backends: dict[str, TierBackend] = {}
    if settings.file is not None:
        from kvoffload.tiers.file_tier import FileTier

        try:
            backends["file"] = FileTier(settings.file.path, file_slots, chunk_bytes, writer=writer, namespace=namespace)
        except (TierConfigError, OSError) as error:
            raise ConfigError(f"kv_connector_extra_config['file_tier']: {error}") from None
    if settings.redis is not None:
        from kvoffload.tiers.redis_tier import RedisTier, RedisTierConfig

        redis = settings.redis
        try:
            config = RedisTierConfig(
                url=redis.url, model=namespace.model, layout=namespace.layout, rank=namespace.rank,
                password=redis.password(), socket_timeout_s=redis.socket_timeout_s, ttl_s=redis.ttl_s,
                cluster=redis.cluster,
            )
        except TierConfigError as error:
            raise ConfigError(f"kv_connector_extra_config['redis_tier']: {error}") from None
        backends["redis"] = RedisTier(config, writer=writer)
    return backends


class WorkerTiers:
    """Runs the metadata's tier jobs; outcomes are due one metadata step after submission."""

    def __init__(self, backends: Mapping[str, TierBackend], chunks: LayerChunks, threads: int = 4) -> None:
        self.backends = dict(backends)
        self.driver = TierDriver(
            {name: ScatteringBackend(backend, chunks) for name, backend in self.backends.items()},
            chunks, threads, delay_steps=1,
        )
        self._outcomes: list[TierOutcome] = []
        # Promotions in flight, so that their collected outcomes can name the CPU blocks they wrote.
        self._promotions: dict[int, TierJob] = {}

    def run(self, jobs: Iterable[TierJob], step: int) -> list[tuple[TierJob, TierOutcome]]:
        """Collect the outcomes due at metadata step ``step``, then start ``jobs``; returns the
        collected promotions: their verified chunks are in the CPU rows now (the load verifier
        must learn them before a load reads those rows)."""
        outcomes = self.driver.poll(step)
        self._outcomes += outcomes
        landed = [
            (self._promotions.pop(outcome.job_id), outcome)
            for outcome in outcomes
            if outcome.job_id in self._promotions
        ]
        jobs = list(jobs)
        self._promotions.update((job.job_id, job) for job in jobs if job.kind == "promote")
        self.driver.submit(jobs, step)
        return landed

    def take_outcomes(self) -> tuple[TierOutcome, ...]:
        outcomes, self._outcomes = tuple(self._outcomes), []
        return outcomes

    def close(self) -> None:
        self.driver.close()
        for backend in self.backends.values():
            backend.close()  # type: ignore[attr-defined]
