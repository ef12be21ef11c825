"""The worker side of a live check: torch copies between the engine's KV tensors and the CPU tier.

vLLM's own ``CPUOffloadingWorker`` refuses the CPU platform, so this one does its job with plain
torch indexing. Each KV layer vLLM hands over is an int8 ``(num_blocks, page_bytes)`` tensor; the
CPU tier is one ``(num_chunks, chunk_bytes)`` byte tensor, each chunk holding, layer after layer,
``blocks_per_chunk`` pages: a private tensor for the LRU and ARC managers, the tiering spec's
shared region in /dev/shm for tiering, where vLLM's secondary tiers read and write the same bytes.

A job is copied at the first ``get_finished`` after its submission (or when ``wait`` names it):
the latest moment an asynchronous copy may run, so a GPU block rewritten under an unfinished store
or a CPU chunk reused under an unfinished load shows as wrong bytes.

``DataIntegrity``: when a store completes, the digest of each CPU block it wrote is kept; when a
load completes, each GPU block it wrote must hold exactly the bytes a store wrote to the CPU block
it was loaded from. With a secondary tier, promotions rewrite CPU blocks behind the worker's back
(another process, with multiprocessing), so there the loaded bytes must be bytes some store wrote.
Either way it is recorded as a finding, not raised, so the run goes on and the token comparison
shows what the wrong KV did.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from vllm.v1.kv_offload.base import OffloadingWorker, TransferResult

from kvoffload.vllm.layout import mover_block_ids
from kvoffload_lab.vllm.common.live.logs import FindingLog


@dataclass
class _Job:
    job_id: int
    kind: str  # "store" or "load"
    gpu_blocks: list[int]
    cpu_blocks: list[int]  # chunk * blocks_per_chunk + sub-block
    submitted_at_poll: int
    copied: bool = False


class LiveWorker(OffloadingWorker):
    """Runs vLLM's store and load jobs with torch copies and checks every load's bytes."""

    def __init__(
        self,
        gpu_layers: Sequence[torch.Tensor],
        storage: torch.Tensor,
        blocks_per_chunk: int,
        findings: FindingLog,
        promotions: bool,
    ) -> None:
        self.gpu_layers = [layer.view(torch.uint8) for layer in gpu_layers]
        self.blocks_per_chunk = blocks_per_chunk
        self.findings = findings
        self.promotions = promotions
        num_chunks, chunk_bytes = storage.shape
        self.cpu_layers: list[torch.Tensor] = []
        offset = 0
        for layer in self.gpu_layers:
            page = layer.shape[1]
            span = blocks_per_chunk * page
            self.cpu_layers.append(storage[:, offset : offset + span].view(num_chunks, blocks_per_chunk, page))
            offset += span
        if offset > chunk_bytes:
            raise ValueError(f"a CPU chunk of {chunk_bytes} bytes cannot hold {offset} bytes of KV")
        self._polls = 0
        self._jobs: dict[int, _Job] = {}
        self._stored: dict[int, bytes] = {}
        self._ever_stored: set[bytes] = set()
        self.checked_blocks = 0

    # ------------------------------------------------------------------ OffloadingWorker
    def submit_store(self, job_id: int, src_spec: Any, dst_spec: Any) -> bool:
        self._jobs[job_id] = _Job(job_id, "store", *self._pairs(src_spec, dst_spec), self._polls)
        return True

    def submit_load(self, job_id: int, src_spec: Any, dst_spec: Any) -> bool:
        self._jobs[job_id] = _Job(job_id, "load", *self._pairs(dst_spec, src_spec), self._polls)
        return True

    def get_finished(self) -> list[TransferResult]:
        done = []
        for job in list(self._jobs.values()):
            if job.copied or job.submitted_at_poll < self._polls:
                started = time.perf_counter()
                self._copy(job)
                size = len(job.gpu_blocks) * sum(layer.shape[1] for layer in self.gpu_layers)
                done.append(TransferResult(job.job_id, True, size, time.perf_counter() - started))
                del self._jobs[job.job_id]
        self._polls += 1
        return done

    def wait(self, job_ids: set[int]) -> None:
        for job_id in job_ids:
            job = self._jobs.get(job_id)
            if job is not None:
                self._copy(job)

    def shutdown(self) -> None:
        self._jobs.clear()

    # ------------------------------------------------------------------ internals
    def _pairs(self, gpu_spec: Any, cpu_spec: Any) -> tuple[list[int], list[int]]:
        gpu_ids = [int(b) for b in gpu_spec.block_ids]
        chunks = [int(c) for c in cpu_spec.block_ids]
        first = int(gpu_spec.block_indices[0]) if getattr(gpu_spec, "block_indices", None) is not None else 0
        return gpu_ids, mover_block_ids(chunks, self.blocks_per_chunk, first, len(gpu_ids))

    def _cpu_index(self, blocks: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.tensor(blocks, dtype=torch.long)
        return ids // self.blocks_per_chunk, ids % self.blocks_per_chunk

    def _copy(self, job: _Job) -> None:
        if job.copied:
            return
        job.copied = True
        gpu = torch.tensor(job.gpu_blocks, dtype=torch.long)
        chunk, sub = self._cpu_index(job.cpu_blocks)
        for gpu_layer, cpu_layer in zip(self.gpu_layers, self.cpu_layers, strict=True):
            if job.kind == "store":
                cpu_layer[chunk, sub] = gpu_layer[gpu]
            else:
                gpu_layer[gpu] = cpu_layer[chunk, sub]
        if job.kind == "store":
            for block in job.cpu_blocks:
                digest = self._cpu_digest(block)
                self._stored[block] = digest
                self._ever_stored.add(digest)
        else:
            self._check_load(job)

    def _check_load(self, job: _Job) -> None:
        for gpu_block, cpu_block in zip(job.gpu_blocks, job.cpu_blocks, strict=True):
            loaded = self._gpu_digest(gpu_block)
            where = f"load job {job.job_id}: GPU block {gpu_block} from CPU chunk {cpu_block // self.blocks_per_chunk}"
            if self.blocks_per_chunk > 1:
                where += f" (block {cpu_block % self.blocks_per_chunk} of it)"
            if self.promotions:
                if loaded not in self._ever_stored:
                    self.findings.add("DataIntegrity", f"{where} holds bytes no store wrote")
                    return
            elif cpu_block not in self._stored:
                self.findings.add("DataIntegrity", f"{where}, which holds no completed store")
                return
            elif loaded != self._stored[cpu_block]:
                self.findings.add("DataIntegrity", f"{where}: the loaded bytes differ from the stored ones")
                return
            self.checked_blocks += 1

    def _gpu_digest(self, block: int) -> bytes:
        digest = hashlib.blake2b(digest_size=16)
        for layer in self.gpu_layers:
            digest.update(layer[block].numpy().tobytes())
        return digest.digest()

    def _cpu_digest(self, block: int) -> bytes:
        chunk, sub = divmod(block, self.blocks_per_chunk)
        digest = hashlib.blake2b(digest_size=16)
        for layer in self.cpu_layers:
            digest.update(layer[chunk, sub].numpy().tobytes())
        return digest.digest()
