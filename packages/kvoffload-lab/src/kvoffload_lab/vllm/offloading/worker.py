"""vLLM's offloading worker, modelled on CPU tensors that hold a pattern per block.

It runs the connector metadata in the order of vLLM's ``OffloadingConnectorWorker``:
``handle_preemptions`` (this step's stores listed in ``jobs_to_flush`` are submitted with the stores
deferred from the previous step, then every job in ``jobs_to_flush`` is waited for),
``start_kv_transfers`` (loads are submitted), the forward pass (the engine writes GPU blocks), then
``prepare_store_kv`` (this step's other stores are deferred to the next step) and ``get_finished``
(jobs whose delay has passed complete). A job copies its blocks when it completes, the latest moment
a real asynchronous copy may read them, so a GPU block rewritten under an unfinished store, or a
CPU block reused under an unfinished load, shows up as wrong bytes when the block is loaded back.
Each job is reported complete once (``{job_id: 1}``, one worker), loads also by request id in
``finished_recving``, as vLLM's worker reports them; vLLM has no failed-transfer path.

Only one GPU block per offloaded chunk is modelled (``blocks_per_chunk == 1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

WORDS = 4
# Written into a GPU block whose tokens are not all computed (no block hash yet).
PARTIAL = -2
# vLLM reserves GPU block 0 as its null block, so the engine's block b is vLLM's block b + 1.
VLLM_BLOCK_OFFSET = 1
_MIX = (0x9E3779B97F4A7C15 >> 1, 0x2545F4914F6CDD1D >> 1, 0x5851F42D4C957F2D >> 1)


def pattern(content: int | None) -> torch.Tensor:
    """The bytes a block holds when its KV is that of the prefix whose chained hash is ``content``."""
    if content is None:
        return torch.full((WORDS,), PARTIAL, dtype=torch.int64)
    value = content & ((1 << 62) - 1)
    return torch.tensor([value, *(value ^ mix for mix in _MIX)], dtype=torch.int64)


@dataclass
class _Job:
    job_id: int
    request_id: str
    kind: str  # "store" or "load"
    gpu_blocks: list[int]
    cpu_blocks: list[int]
    due: int


@dataclass
class WorkerStep:
    """One step's worker results; ``finish()`` runs after the forward pass (``get_finished``)."""

    worker: PatternWorker
    completed: dict[int, int] = field(default_factory=dict)
    finished_recving: set[str] = field(default_factory=set)

    def finish(self) -> WorkerStep:
        for job in [j for j in self.worker.pending.values() if j.due <= self.worker.step]:
            self.worker.complete(job.job_id, self)
        return self


class PatternWorker:
    """Implements kvoffload's ``KVBackend`` for the engine, executing vLLM's connector metadata."""

    def __init__(self, num_gpu_blocks: int, num_cpu_chunks: int, delay_steps: int = 1) -> None:
        if delay_steps < 0:
            raise ValueError(f"delay_steps must be >= 0, got {delay_steps}")
        self.delay_steps = delay_steps
        self.gpu = torch.zeros((num_gpu_blocks + VLLM_BLOCK_OFFSET, WORDS), dtype=torch.int64)
        self.cpu = torch.zeros((num_cpu_chunks, WORDS), dtype=torch.int64)
        self.step = 0
        self.pending: dict[int, _Job] = {}
        self.deferred: list[_Job] = []
        self.submitted_stores = 0
        self.submitted_loads = 0
        self.completed_jobs = 0
        # Tiering: the bytes last stored for each key (named by ``key_of_block``), so a key that a
        # secondary tier promotes back into a primary CPU block gets its bytes there. vLLM's
        # in-memory ``example`` tier keeps only the keys, not the data, so this models its copy.
        self.key_of_block: dict[int, bytes] | None = None
        self.archive: dict[bytes, torch.Tensor] = {}

    def restore(self, key: bytes, cpu_block: int) -> None:
        """A secondary tier put ``key`` into ``cpu_block`` of the primary tier."""
        if key in self.archive:
            self.cpu[cpu_block] = self.archive[key]

    # ------------------------------------------------------------------ KVBackend
    def write_block(self, block: int, content: int | None) -> None:
        self.gpu[block + VLLM_BLOCK_OFFSET] = pattern(content)

    def block_matches(self, block: int, content: int) -> bool:
        return bool(torch.equal(self.gpu[block + VLLM_BLOCK_OFFSET], pattern(content)))

    def blocks_read_by_stores(self) -> dict[int, set[int]]:
        # This step's stores (deferred) cover the blocks this step's forward pass writes: they
        # read from the next step on, once submitted.
        readers: dict[int, set[int]] = {}
        for job in self.pending.values():
            if job.kind == "store":
                for block in job.gpu_blocks:
                    readers.setdefault(block - VLLM_BLOCK_OFFSET, set()).add(job.job_id)
        return readers

    def in_flight(self) -> set[int]:
        return set(self.pending) | {job.job_id for job in self.deferred}

    def execute(self, metadata: Any) -> WorkerStep:
        """Everything before the forward pass; the returned step finishes after it."""
        self.step += 1
        result = WorkerStep(self)
        flush = set(metadata.jobs_to_flush or ())
        stores = dict(metadata.store_jobs)
        for job_id in sorted(flush):
            entry = stores.pop(job_id, None)
            if entry is not None:
                self.deferred.append(self._job(job_id, entry, "store"))
        for job in self.deferred:
            self._submit(job)
        self.deferred = []
        for job_id in sorted(flush):
            if job_id in self.pending:
                self.complete(job_id, result)
        for job_id, entry in metadata.load_jobs.items():
            self._submit(self._job(job_id, entry, "load"))
        self.deferred = [self._job(job_id, entry, "store") for job_id, entry in stores.items()]
        return result

    # ------------------------------------------------------------------ internals
    def _job(self, job_id: int, entry: Any, kind: str) -> _Job:
        gpu_spec, cpu_spec = (entry.src_spec, entry.dst_spec) if kind == "store" else (entry.dst_spec, entry.src_spec)
        gpu_blocks = [int(b) for b in gpu_spec.block_ids]
        cpu_blocks = [int(b) for b in cpu_spec.block_ids]
        if len(gpu_blocks) != len(cpu_blocks):
            raise ValueError(
                f"{kind} job {job_id} of {entry.req_id!r} pairs {len(gpu_blocks)} GPU block(s) with "
                f"{len(cpu_blocks)} CPU chunk(s); one GPU block per chunk is modelled"
            )
        return _Job(job_id, entry.req_id, kind, gpu_blocks, cpu_blocks, 0)

    def _submit(self, job: _Job) -> None:
        if job.job_id in self.pending:
            raise ValueError(f"job {job.job_id} submitted twice while in flight")
        job.due = self.step + self.delay_steps
        self.pending[job.job_id] = job
        if job.kind == "store":
            self.submitted_stores += 1
        else:
            self.submitted_loads += 1

    def complete(self, job_id: int, result: WorkerStep) -> None:
        job = self.pending.pop(job_id)
        gpu = torch.tensor(job.gpu_blocks, dtype=torch.long)
        cpu = torch.tensor(job.cpu_blocks, dtype=torch.long)
        if job.kind == "store":
            self.cpu[cpu] = self.gpu[gpu]
            if self.key_of_block is not None:
                for block in job.cpu_blocks:
                    key = self.key_of_block.get(block)
                    if key is not None:
                        self.archive[key] = self.cpu[block].clone()
        else:
            self.gpu[gpu] = self.cpu[cpu]
            result.finished_recving.add(job.request_id)
        result.completed[job_id] = 1
        self.completed_jobs += 1
