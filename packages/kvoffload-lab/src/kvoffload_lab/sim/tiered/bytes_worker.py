"""The simulator's model worker with a real byte arena for the CPU tier, so secondary tiers move
actual bytes: every stored CPU block is encoded into ``chunk_bytes`` bytes (the GPU blocks'
content hashes, then a fill derived from them), every load decodes them back. A corrupted or
misplaced chunk decodes to garbage, which the engine's DataIntegrity check then reports.
"""

from __future__ import annotations

import mmap
import struct

from kvoffload.offload.types import JobId
from kvoffload_lab.sim.kv_model import GARBAGE, ModelWorker

_VALUE = struct.Struct("<q")
_NONE = -2
_MASK63 = (1 << 63) - 1


def _fill_word(values: tuple[int, ...]) -> bytes:
    return _VALUE.pack(hash(values) & _MASK63)


class ByteModelWorker(ModelWorker):
    """A :class:`ModelWorker` whose CPU blocks live in a byte arena (``chunk_view``)."""

    def __init__(
        self, blocks_per_chunk: int, num_cpu_blocks: int, chunk_bytes: int, delay_steps: int = 1,
        fault_rate: float = 0.0, seed: int = 0,
    ) -> None:
        if chunk_bytes < 8 * blocks_per_chunk + 8 or chunk_bytes % 8:
            raise ValueError(
                f"chunk_bytes must be a multiple of 8 and >= {8 * blocks_per_chunk + 8}, got {chunk_bytes}"
            )
        super().__init__(blocks_per_chunk, delay_steps, fault_rate, seed)
        self.chunk_bytes = chunk_bytes
        # Page-aligned, like pinned CPU tensors, so the file tier moves chunks without a copy.
        self._view = memoryview(mmap.mmap(-1, num_cpu_blocks * chunk_bytes))

    def chunk_view(self, block_id: int) -> memoryview:
        return self._view[block_id * self.chunk_bytes : (block_id + 1) * self.chunk_bytes]

    def encode(self, contents: tuple[int | None, ...]) -> bytes:
        values = tuple(_NONE if value is None else value for value in contents)
        head = b"".join(_VALUE.pack(value) for value in values)
        fill = self.chunk_bytes - len(head)
        return head + _fill_word(values) * (fill // 8)

    def decode(self, block_id: int) -> tuple[int | None, ...]:
        data = bytes(self.chunk_view(block_id))
        values = tuple(_VALUE.unpack_from(data, 8 * i)[0] for i in range(self.blocks_per_chunk))
        if data != self.encode(tuple(None if value == _NONE else value for value in values)):
            return (GARBAGE,) * self.blocks_per_chunk
        return tuple(None if value == _NONE else value for value in values)

    def _finish(self, job_id: JobId) -> bool:
        job = self._pending[job_id][0]
        if job.kind == "load":
            for block in job.cpu_block_ids:
                self.cpu[block] = self.decode(block)
        ok = super()._finish(job_id)
        if job.kind == "store" and ok:
            for block in job.cpu_block_ids:
                self.chunk_view(block)[:] = self.encode(self.cpu[block])
        return ok
