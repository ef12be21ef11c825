"""The worker side of the connector: turns the scheduler's metadata into copies and reports them.

Per engine step, in vLLM's order: wait for the jobs the scheduler asked to flush (their GPU blocks
are about to be handed to new work), then submit the step's stores, then its loads; finally poll
the mover and report every finished job once, ``True`` for done and ``False`` for failed. The
scheduler's CPU blocks hold whole chunks; the mover's CPU blocks hold one GPU block each, so
CPU block ``c`` of the scheduler is mover blocks ``c * blocks_per_chunk ...``.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvoffload.dataplane.mover import BlockMover
from kvoffload.offload.types import ConnectorMetadata, JobId, TransferJob, WorkerOutput


class OffloadingWorker:
    """Runs :class:`ConnectorMetadata` on a :class:`BlockMover`."""

    def __init__(self, mover: BlockMover, blocks_per_chunk: int, null_block: int | None = None) -> None:
        if blocks_per_chunk < 1:
            raise ValueError(f"blocks_per_chunk must be >= 1, got {blocks_per_chunk}")
        self.mover = mover
        self.blocks_per_chunk = blocks_per_chunk
        # The engine's placeholder GPU block (OffloadConfig.null_block): stores and loads skip it.
        self.null_block = null_block
        self._stores: dict[JobId, TransferJob] = {}
        self._loads: dict[JobId, TransferJob] = {}
        self.bytes_moved = 0
        self.failed_jobs = 0
        # Per direction ("store", "load"): bytes and copy seconds of the jobs that succeeded, for
        # the connector's metrics (vLLM's vllm:kv_offload_{load,store}_{bytes,time}).
        self.moved_bytes: dict[str, int] = {"store": 0, "load": 0}
        self.moved_seconds: dict[str, float] = {"store": 0.0, "load": 0.0}

    def execute(self, metadata: ConnectorMetadata) -> WorkerOutput:
        """Flush, submit stores, submit loads, then report whatever finished."""
        flush = [job_id for job_id in metadata.flush if job_id in self._stores or job_id in self._loads]
        if flush:
            self.mover.wait(flush)
        for job in metadata.stores:
            self._submit(job)
        for job in metadata.loads:
            self._submit(job)
        return self.poll()

    def poll(self) -> WorkerOutput:
        """Jobs finished since the last call: ``{job_id: ok}``."""
        done: dict[JobId, bool] = {}
        for result in self.mover.poll():
            self._stores.pop(result.job_id, None)
            self._loads.pop(result.job_id, None)
            done[result.job_id] = result.ok
            if result.ok:
                self.bytes_moved += result.bytes
                self.moved_bytes[result.direction] += result.bytes
                self.moved_seconds[result.direction] += result.seconds
            else:
                self.failed_jobs += 1
        return WorkerOutput(done)

    def in_flight(self) -> set[JobId]:
        return set(self._stores) | set(self._loads)

    def blocks_read_by_stores(self) -> dict[int, set[JobId]]:
        """GPU block -> in-flight store jobs reading it (what the GPU block fence protects)."""
        readers: dict[int, set[JobId]] = {}
        for job in self._stores.values():
            for block in job.gpu_block_ids:
                if block != self.null_block:
                    readers.setdefault(block, set()).add(job.job_id)
        return readers

    def _submit(self, job: TransferJob) -> None:
        blocks_per_chunk = self.blocks_per_chunk
        if len(job.gpu_block_ids) != len(job.cpu_block_ids) * blocks_per_chunk:
            raise ValueError(
                f"{job.kind} job {job.job_id} of request {job.request_id!r}: {len(job.gpu_block_ids)} GPU blocks "
                f"for {len(job.cpu_block_ids)} chunks of {blocks_per_chunk} blocks"
            )
        mover_blocks = chunk_blocks(job.cpu_block_ids, blocks_per_chunk)
        gpu_blocks: Sequence[int] = job.gpu_block_ids
        null = self.null_block
        if null is not None and null in gpu_blocks:
            # A group holds no block for those tokens (out of a sliding window): the chunk is
            # stored without that group's part, or a load has nothing to write there.
            pairs = [(cpu, gpu) for cpu, gpu in zip(mover_blocks, gpu_blocks, strict=True) if gpu != null]
            mover_blocks, gpu_blocks = [cpu for cpu, _ in pairs], [gpu for _, gpu in pairs]
        if job.kind == "store":
            self.mover.store(job.job_id, gpu_blocks, mover_blocks)
            self._stores[job.job_id] = job
        else:
            self.mover.load(job.job_id, mover_blocks, gpu_blocks)
            self._loads[job.job_id] = job


def chunk_blocks(chunks: Sequence[int], blocks_per_chunk: int) -> list[int]:
    """The mover's CPU blocks of the scheduler's CPU ``chunks``, in order."""
    return [chunk * blocks_per_chunk + offset for chunk in chunks for offset in range(blocks_per_chunk)]
