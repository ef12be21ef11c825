"""The KV data path of the simulator, without bytes: block contents are the block hashes.

A GPU block "holds" the chained hash of the tokens whose KV it contains, a CPU block holds the
contents of the GPU blocks stored into it. A store copies at its *completion* (the latest moment a
real copy may read) and a load writes at its completion, so a GPU block rewritten under an
in-flight store, or a CPU block reused under an in-flight load, shows up as wrong content when the
block is loaded back: the DataIntegrity check of the simulator. The torch worker
(kvoffload.dataplane.worker) implements the same protocol with real tensors.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable
from typing import Protocol

from kvoffload.offload.types import ConnectorMetadata, JobId, TransferJob, WorkerOutput

GARBAGE = -1


class KVBackend(Protocol):
    """What the engine needs of a data path: write computed blocks, run transfer metadata,
    tell which GPU blocks in-flight stores read, and verify loaded blocks."""

    def write_block(self, block: int, content: int | None) -> None: ...

    def block_matches(self, block: int, content: int) -> bool: ...

    def execute(self, metadata: ConnectorMetadata) -> WorkerOutput: ...

    def blocks_read_by_stores(self) -> dict[int, set[JobId]]: ...

    def in_flight(self) -> set[JobId]: ...


class ModelWorker:
    """Completes each job ``delay_steps`` engine steps after submission (0: in the same step),
    or when flushed; fails a job with probability ``fault_rate`` (decided at submission)."""

    def __init__(self, blocks_per_chunk: int, delay_steps: int = 1, fault_rate: float = 0.0, seed: int = 0) -> None:
        if delay_steps < 0:
            raise ValueError(f"delay_steps must be >= 0, got {delay_steps}")
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be in [0, 1], got {fault_rate}")
        self.blocks_per_chunk = blocks_per_chunk
        self.delay_steps = delay_steps
        self.fault_rate = fault_rate
        self._rng = random.Random(seed)
        self.gpu: dict[int, int | None] = {}
        self.cpu: dict[int, tuple[int | None, ...]] = {}
        self._pending: OrderedDict[JobId, tuple[TransferJob, int, bool]] = OrderedDict()
        self._step = 0

    def write_block(self, block: int, content: int | None) -> None:
        self.gpu[block] = content

    def block_matches(self, block: int, content: int) -> bool:
        return self.gpu.get(block) == content

    def blocks_read_by_stores(self) -> dict[int, set[JobId]]:
        readers: dict[int, set[JobId]] = {}
        for job, _, _ in self._pending.values():
            if job.kind == "store":
                for block in job.gpu_block_ids:
                    readers.setdefault(block, set()).add(job.job_id)
        return readers

    def in_flight(self) -> set[JobId]:
        return set(self._pending)

    def execute(self, metadata: ConnectorMetadata) -> WorkerOutput:
        self._step += 1
        done: dict[JobId, bool] = {}
        for job_id in metadata.flush:
            if job_id in self._pending:
                done[job_id] = self._finish(job_id)
        for job in (*metadata.stores, *metadata.loads):
            if job.job_id in self._pending:
                raise ValueError(f"job {job.job_id} submitted twice while in flight")
            fails = self.fault_rate > 0 and self._rng.random() < self.fault_rate
            self._pending[job.job_id] = (job, self._step + self.delay_steps, fails)
        for job_id in [j for j, (_, due, _) in self._pending.items() if due <= self._step]:
            done[job_id] = self._finish(job_id)
        return WorkerOutput(done)

    def complete(self, job_ids: Iterable[JobId], ok: bool = True) -> WorkerOutput:
        """Finish the given jobs now (for tests that choose the completion order)."""
        done = {}
        for job_id in job_ids:
            job, due, _ = self._pending[job_id]
            self._pending[job_id] = (job, due, not ok)
            done[job_id] = self._finish(job_id)
        return WorkerOutput(done)

    def _finish(self, job_id: JobId) -> bool:
        job, _, fails = self._pending.pop(job_id)
        blocks_per_chunk = self.blocks_per_chunk
        if job.kind == "store":
            if not fails:
                for index, cpu_block in enumerate(job.cpu_block_ids):
                    gpu_blocks = job.gpu_block_ids[index * blocks_per_chunk : (index + 1) * blocks_per_chunk]
                    self.cpu[cpu_block] = tuple(self.gpu.get(b) for b in gpu_blocks)
            return not fails
        for index, cpu_block in enumerate(job.cpu_block_ids):
            contents = self.cpu.get(cpu_block, (GARBAGE,) * blocks_per_chunk)
            chunk_gpu_blocks = job.gpu_block_ids[index * blocks_per_chunk : (index + 1) * blocks_per_chunk]
            for offset, gpu_block in enumerate(chunk_gpu_blocks):
                self.gpu[gpu_block] = GARBAGE if fails else contents[offset]
        return not fails
