"""kvoffload's BlockMover behind vLLM's ``OffloadingWorker`` interface.

vLLM hands the worker its KV caches as canonical per-layer tensors ``(num_blocks, page_bytes)``;
they are the mover's "GPU" layers (CPU tensors on vLLM's CPU platform, CUDA tensors on a GPU,
where the mover allocates pinned CPU memory and copies on its own streams). One offloaded chunk
(a CPU block of the manager) holds ``blocks_per_chunk`` engine blocks, so chunk ``c`` is mover
blocks ``c * blocks_per_chunk ...``. A load may start inside its first chunk (the GPU prefix
cache already holds the chunk's first blocks); vLLM says so through the GPU spec's
``block_indices``, and the worker skips those sub-blocks.

With a :class:`~kvoffload.dataplane.integrity.LoadVerifier` (``verify_loads``) every completed load
is checked against the digests of what the stores wrote; vLLM hands this worker no keys, so the
check is by bytes alone.

vLLM's OffloadingConnector does not support failed transfers (it asserts success), so a failed
copy raises :class:`TransferFailed` naming the job, instead of letting vLLM serve its KV.
"""

from __future__ import annotations

from collections.abc import Callable

from vllm.v1.kv_offload.base import GPULoadStoreSpec, LoadStoreSpec, OffloadingWorker, TransferResult
from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec

from kvoffload.dataplane.integrity import LoadVerifier
from kvoffload.dataplane.mover import BlockMover
from kvoffload.vllm.layout import mover_block_ids


class TransferFailed(RuntimeError):
    """A copy failed; vLLM's OffloadingConnector cannot recover from that, so the step stops."""


class MoverWorker(OffloadingWorker):
    """Runs vLLM's store and load jobs on a :class:`BlockMover`."""

    def __init__(
        self,
        mover: BlockMover,
        blocks_per_chunk: int,
        verifier: LoadVerifier | None = None,
        release: Callable[[], None] | None = None,
    ) -> None:
        self.mover = mover
        # Called at shutdown, after the mover closed (the shared CPU pool's file name, with tiers).
        self.release = release
        self.blocks_per_chunk = blocks_per_chunk
        self.verifier = verifier
        # (direction, GPU blocks, CPU blocks) of the jobs whose completion the verifier must see.
        self._verified_jobs: dict[int, tuple[str, list[int], list[int]]] = {}

    def _pairs(self, gpu: GPULoadStoreSpec, cpu: LoadStoreSpec, job_id: int) -> tuple[list[int], list[int]]:
        """(GPU blocks, mover CPU blocks) of a job. With several KV cache groups vLLM lists each
        group's GPU blocks in turn (``group_sizes``) and each group's chunks in turn, a chunk
        holding one group's blocks; groups share the KV tensors, so a block's rows are all of its
        KV whichever group holds it."""
        if not isinstance(cpu, CPULoadStoreSpec):
            raise TypeError(f"job {job_id}: expected a CPULoadStoreSpec, got {type(cpu).__name__}")
        all_gpu = gpu.block_ids.tolist()
        all_chunks = cpu.block_ids.tolist()
        bpc = self.blocks_per_chunk
        gpu_ids: list[int] = []
        cpu_ids: list[int] = []
        gpu_at = chunk_at = 0
        for size, first_index in zip(gpu.group_sizes, gpu.block_indices, strict=True):
            if size == 0:
                continue
            chunks = -(-(first_index % bpc + size) // bpc)
            gpu_ids += all_gpu[gpu_at : gpu_at + size]
            cpu_ids += mover_block_ids(all_chunks[chunk_at : chunk_at + chunks], bpc, first_index, size)
            gpu_at += size
            chunk_at += chunks
        if gpu_at != len(all_gpu) or chunk_at != len(all_chunks):
            raise ValueError(
                f"job {job_id}: groups of {list(gpu.group_sizes)} GPU blocks do not match {len(all_gpu)} GPU blocks "
                f"in {len(all_chunks)} chunks"
            )
        return gpu_ids, cpu_ids

    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec) -> bool:
        gpu_ids, cpu_ids = self._pairs(src_spec, dst_spec, job_id)
        self.mover.store(job_id, gpu_ids, cpu_ids)
        if self.verifier is not None:
            self._verified_jobs[job_id] = ("store", gpu_ids, cpu_ids)
        return True

    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec) -> bool:
        gpu_ids, cpu_ids = self._pairs(dst_spec, src_spec, job_id)
        self.mover.load(job_id, cpu_ids, gpu_ids)
        if self.verifier is not None:
            self._verified_jobs[job_id] = ("load", gpu_ids, cpu_ids)
        return True

    def get_finished(self) -> list[TransferResult]:
        results = []
        for result in self.mover.poll():
            if not result.ok:
                raise TransferFailed(f"{result.direction} job {result.job_id} failed: {result.error}")
            if self.verifier is not None:
                self._verify(self.verifier, result.job_id)
            results.append(TransferResult(result.job_id, True, result.bytes, result.seconds))
        return results

    def _verify(self, verifier: LoadVerifier, job_id: int) -> None:
        # vLLM's worker sees block ids only, never keys: the check is by bytes alone.
        kind, gpu_ids, cpu_ids = self._verified_jobs.pop(job_id)
        if kind == "store":
            verifier.stored(cpu_ids, [None] * len(cpu_ids))
        else:
            verifier.loaded(f"load job {job_id}", None, cpu_ids, gpu_ids, [None] * len(cpu_ids))

    def wait(self, job_ids: set[int]) -> None:
        # vLLM may name jobs whose results were already returned: only in-flight ones can be awaited.
        in_flight = self.mover.in_flight()
        self.mover.wait([job for job in job_ids if job in in_flight])

    def shutdown(self) -> None:
        self.mover.close()
        if self.release is not None:
            self.release()
