"""kvoffload's ``BlockMover`` with copies that complete late, as a DMA engine's may.

A job submitted to :class:`LateMover` runs ``delay`` polls later (or when it is waited on, as the
worker's flush does): a store reads its GPU blocks as they are then. A store whose GPU block
changed between submission and copy broke the GPU block fence (the engine rewrote a block a store
still read), which is recorded in :attr:`LateMover.fence_breaks`. :attr:`LateMover.fail_next`
makes the next job submitted fail before any byte moves, through the mover's own fault injector.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from kvoffload.dataplane.mover import BlockMover, TransferResult


@dataclass
class _Pending:
    direction: str
    sources: list[int]
    targets: list[int]
    polls_left: int
    # A store's GPU rows at submission: its copy must read the same bytes.
    at_submit: list[torch.Tensor]


class LateMover(BlockMover):
    """A CPU ``BlockMover`` (torch copies) whose jobs run ``delay`` polls after submission."""

    def __init__(self, gpu_layers: Sequence[torch.Tensor], num_cpu_blocks: int, delay: int) -> None:
        super().__init__(gpu_layers, num_cpu_blocks, cpu_kernel=False, fault_injector=self._injected)
        self.delay = delay
        self.fail_next = False
        self.fence_breaks: list[str] = []
        self._late: dict[int, _Pending] = {}
        self._fail_ids: set[int] = set()

    def pending(self) -> list[tuple[int, str, list[int], list[int], int]]:
        """The copies not run yet, by job: direction, sources, targets and polls left."""
        return sorted((job_id, job.direction, job.sources, job.targets, job.polls_left)
                      for job_id, job in self._late.items())

    def _injected(self, job_id: int, direction: str) -> bool:
        return job_id in self._fail_ids

    def _hold(self, job_id: int, direction: str, sources: Sequence[int], targets: Sequence[int]) -> None:
        if self.fail_next:
            self._fail_ids.add(job_id)
            self.fail_next = False
        rows = [layer[list(sources)].clone() for layer in self.gpu_layers] if direction == "store" else []
        self._late[job_id] = _Pending(direction, list(sources), list(targets), self.delay, rows)

    def store(self, job_id: int, gpu_block_ids: Sequence[int], cpu_block_ids: Sequence[int]) -> None:
        self._hold(job_id, "store", gpu_block_ids, cpu_block_ids)

    def load(self, job_id: int, cpu_block_ids: Sequence[int], gpu_block_ids: Sequence[int]) -> None:
        self._hold(job_id, "load", cpu_block_ids, gpu_block_ids)

    def _run(self, job_id: int) -> None:
        job = self._late.pop(job_id)
        if job.direction == "store":
            for layer, before in zip(self.gpu_layers, job.at_submit, strict=True):
                changed = (layer[job.sources] != before).any(dim=1).tolist()
                self.fence_breaks += [
                    f"store job {job_id} copied GPU block {gpu} to CPU block {cpu} after the block was rewritten "
                    "(reused, or not fully computed) while the store still read it"
                    for gpu, cpu, bad in zip(job.sources, job.targets, changed, strict=True) if bad
                ]
            super().store(job_id, job.sources, job.targets)
        else:
            super().load(job_id, job.sources, job.targets)
        super().wait([job_id])

    def poll(self) -> list[TransferResult]:
        for job_id, job in list(self._late.items()):
            job.polls_left -= 1
            if job.polls_left <= 0:
                self._run(job_id)
        return super().poll()

    def wait(self, job_ids: Iterable[int]) -> None:
        for job_id in job_ids:
            if job_id in self._late:
                self._run(job_id)

    def in_flight(self) -> set[int]:
        return set(self._late) | super().in_flight()

    def finish_copies(self) -> None:
        """Every copy still pending runs, as DMA completes with no step to poll it (the results
        are still reported only by the next poll)."""
        for job_id in list(self._late):
            self._run(job_id)
