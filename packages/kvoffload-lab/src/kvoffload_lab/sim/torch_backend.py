"""The simulator's data path on real tensors: the worker and the mover move actual KV bytes.

The simulated model writes into every GPU block a byte pattern derived from the block's chained
token-prefix hash; when a block is loaded back from CPU memory, its bytes are compared with the
pattern its hash must produce (DataIntegrity). A partially filled block gets a fixed filler.
"""

from __future__ import annotations

import random

import torch

from kvoffload.dataplane.mover import BlockMover
from kvoffload.dataplane.worker import OffloadingWorker
from kvoffload.offload.types import ConnectorMetadata, JobId, TransferJob, WorkerOutput
from kvoffload_lab.sim.engine import EngineConfig

PARTIAL_FILL = 0xA5
_MASK64 = (1 << 64) - 1


def _splitmix64(value: int) -> int:
    """A 64-bit mix in which every input bit changes about half of the output bits."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def block_pattern(content: int, nbytes: int, layer: int) -> torch.Tensor:
    """``nbytes`` uint8 values that depend on every bit of ``content`` and on the layer."""
    mixed = _splitmix64(_splitmix64(content & _MASK64) ^ layer)
    low, high = mixed & 0xFFFFFFFF, mixed >> 32
    positions = torch.arange(nbytes, dtype=torch.int64)
    values = (positions * 0x5851F42D + low) ^ ((positions * 0x2545F491 + high) >> 11)
    return (values & 0xFF).to(torch.uint8)


class TorchBackend:
    """A :class:`~kvoffload_lab.sim.kv_model.KVBackend` over per-layer KV tensors and a mover.

    The CPU mover copies synchronously, so to keep transfers in flight across steps (as on a GPU,
    where copies run on their own streams) a job is handed to the worker only ``delay_steps``
    steps after the scheduler issued it, or at once when the scheduler flushes it. A store then
    reads its GPU blocks as late as a real asynchronous copy may, so a block rewritten under an
    unflushed store is caught as corrupt bytes when it is loaded back.
    """

    def __init__(self, worker: OffloadingWorker, gpu_layers: list[torch.Tensor], delay_steps: int = 0) -> None:
        if delay_steps < 0:
            raise ValueError(f"delay_steps must be >= 0, got {delay_steps}")
        self.worker = worker
        self.gpu_layers = gpu_layers
        self.delay_steps = delay_steps
        self._bytes = [layer[0].numel() * layer.element_size() for layer in gpu_layers]
        self._held: dict[JobId, tuple[TransferJob, int]] = {}
        self._step = 0

    @classmethod
    def for_engine(
        cls,
        config: EngineConfig,
        num_layers: int = 2,
        kv_heads: int = 2,
        head_dim: int = 8,
        dtype: torch.dtype = torch.float16,
        device: str = "cpu",
    ) -> TorchBackend:
        """Tensors sized for ``config``: K and V of ``num_layers`` layers, one chunk per CPU block."""
        shape = (config.num_gpu_blocks, 2, config.gpu_block_size, kv_heads, head_dim)
        layers = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        rng = random.Random(config.seed + 2)
        rate = config.fault_rate

        def inject(job_id: int, direction: str) -> bool:
            return rate > 0 and rng.random() < rate

        mover = BlockMover(layers, config.num_cpu_blocks * config.blocks_per_chunk, fault_injector=inject)
        return cls(OffloadingWorker(mover, config.blocks_per_chunk), layers, config.job_delay_steps)

    def _rows(self, block: int) -> list[torch.Tensor]:
        return [layer[block].view(-1).view(torch.uint8) for layer in self.gpu_layers]

    def write_block(self, block: int, content: int | None) -> None:
        for index, row in enumerate(self._rows(block)):
            if content is None:
                row.fill_(PARTIAL_FILL)
            else:
                row.copy_(block_pattern(content, self._bytes[index], index).to(row.device))

    def block_matches(self, block: int, content: int) -> bool:
        return all(
            torch.equal(row.cpu(), block_pattern(content, self._bytes[index], index))
            for index, row in enumerate(self._rows(block))
        )

    def execute(self, metadata: ConnectorMetadata) -> WorkerOutput:
        self._step += 1
        for job in (*metadata.stores, *metadata.loads):
            self._held[job.job_id] = (job, self._step + self.delay_steps)
        flushed = set(metadata.flush)
        due = [job for job, at in self._held.values() if job.job_id in flushed or at <= self._step]
        for job in due:
            del self._held[job.job_id]
        # Held jobs that are flushed run first, then whatever is due, stores before loads (the
        # worker's own order); on the CPU every submitted job completes at once.
        due.sort(key=lambda job: (job.job_id not in flushed, job.kind == "load"))
        return self.worker.execute(
            ConnectorMetadata(
                metadata.step,
                flush=tuple(metadata.flush),
                stores=tuple(job for job in due if job.kind == "store" and job.job_id in flushed)
                + tuple(job for job in due if job.kind == "store" and job.job_id not in flushed),
                loads=tuple(job for job in due if job.kind == "load"),
            )
        )

    def blocks_read_by_stores(self) -> dict[int, set[JobId]]:
        readers = self.worker.blocks_read_by_stores()
        for job, _ in self._held.values():
            if job.kind == "store":
                for block in job.gpu_block_ids:
                    readers.setdefault(block, set()).add(job.job_id)
        return readers

    def in_flight(self) -> set[JobId]:
        return self.worker.in_flight() | set(self._held)
