"""Negative control for MLA: KVOffloadConnector whose mover treats each latent page as K/V halves
and loads only the first ("K") half; the second half of every loaded block keeps what the engine
left in it."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvoffload.dataplane.mover import BlockMover
from kvoffload.vllm.connector import KVOffloadConnector


class KHalfMover(BlockMover):
    """Loads the first half of each block's page only (the load waits, then puts the second half back)."""

    def load(self, job_id: int, cpu_block_ids: Sequence[int], gpu_block_ids: Sequence[int]) -> None:
        blocks = list(gpu_block_ids)
        kept = [(layer, layer[blocks, layer.shape[1] // 2 :].clone()) for layer in self.gpu_layers]
        super().load(job_id, cpu_block_ids, gpu_block_ids)
        self.wait([job_id])
        for layer, second_half in kept:
            layer[blocks, layer.shape[1] // 2 :] = second_half


class KHalfConnector(KVOffloadConnector):
    def make_mover(self, layers: list[torch.Tensor], num_cpu_blocks: int) -> BlockMover:
        return KHalfMover(layers, num_cpu_blocks, cpu_kernel=self.cpu_kernel)
