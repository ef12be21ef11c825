"""The negative controls: KVOffloadSpec and KVOffloadConnector with a mover that loads every block from the
wrong CPU block."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvoffload.dataplane.mover import BlockMover
from kvoffload.vllm.connector import KVOffloadConnector
from kvoffload.vllm.spec import KVOffloadSpec


class WrongBlockMover(BlockMover):
    """Loads block ``i`` of a job from the CPU block meant for block ``i + 1`` (rotated)."""

    def load(self, job_id: int, cpu_block_ids: Sequence[int], gpu_block_ids: Sequence[int]) -> None:
        cpu = list(cpu_block_ids)
        super().load(job_id, cpu[1:] + cpu[:1], gpu_block_ids)


class WrongBlockSpec(KVOffloadSpec):
    """KVOffloadSpec whose worker writes wrong blocks into the engine's KV cache."""

    def make_mover(self, layers: Sequence[torch.Tensor], num_cpu_blocks: int) -> BlockMover:
        return WrongBlockMover(layers, num_cpu_blocks, cpu_kernel=self.cpu_kernel)



class WrongBlockConnector(KVOffloadConnector):
    """KVOffloadConnector whose worker loads every block from the wrong CPU block (as above)."""

    def make_mover(self, layers: list[torch.Tensor], num_cpu_blocks: int) -> BlockMover:
        return WrongBlockMover(layers, num_cpu_blocks, cpu_kernel=self.cpu_kernel)
