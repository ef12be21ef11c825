"""Torch block copies in the shape of the connector's DMA backend, completing late.

vLLM's ``DmaCopyBackend`` launches one copy per transfer on a CUDA stream and appends
``(event_idx, event)`` to the worker's list; the worker polls ``event.query()`` in order and calls
``synchronize()`` to flush. :class:`LateCopyBackend` appends a :class:`LateEvent` instead: its copy
runs only when the event completes, ``delay`` polls later (or at ``synchronize``), so the bytes a
store reads are the GPU block's bytes at completion, as a real DMA may read them. A store whose GPU
block changed between launch and completion broke the GPU block fence: that is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


class LateEvent:
    """Completes on the ``delay``-th ``query`` (or at ``synchronize``) and runs its copy then."""

    def __init__(self, run: Callable[[], None], delay: int) -> None:
        self._run: Callable[[], None] | None = run
        self._polls_left = delay

    @property
    def done(self) -> bool:
        return self._run is None

    def _complete(self) -> None:
        if self._run is not None:
            run, self._run = self._run, None
            run()

    def query(self) -> bool:
        self._polls_left -= 1
        if self._polls_left <= 0:
            self._complete()
        return self.done

    def synchronize(self) -> None:
        self._complete()

    def record(self, stream: Any = None) -> None:
        """Ordering after compute is implicit: the copy runs after this step's forward."""


@dataclass(frozen=True)
class FenceBreak:
    """A store read GPU block ``gpu_block`` after it changed (store event ``event_idx``)."""

    event_idx: int
    gpu_block: int
    cpu_block: int

    def __str__(self) -> str:
        return (f"store event {self.event_idx} copied GPU block {self.gpu_block} to CPU block {self.cpu_block} "
                "after its bytes changed: the block was rewritten (reused, or not yet fully computed) "
                "while the store still read it")


@dataclass
class LateCopyBackend:
    """Copies rows of ``gpu`` and ``cpu`` regions (name -> ``(num_blocks, bytes)`` int8 tensors)."""

    gpu: dict[str, torch.Tensor]
    cpu: dict[str, torch.Tensor]
    delay: int = 1
    fence_breaks: list[FenceBreak] = field(default_factory=list)
    launched: int = 0

    def launch_copy(self, src_blocks: list[int], dst_blocks: list[int], is_store: bool, event_idx: int,
                    events_list: list[tuple[int, Any]], wait_event: Any = None) -> None:
        """vLLM's ``launch_copy``: one transfer of ``src_blocks`` to ``dst_blocks``, as one event."""
        if not src_blocks:
            return
        src, dst = list(src_blocks), list(dst_blocks)
        source, target = (self.gpu, self.cpu) if is_store else (self.cpu, self.gpu)
        at_launch = {name: region[src].clone() for name, region in self.gpu.items()} if is_store else {}

        def run() -> None:
            for name, region in source.items():
                if is_store:
                    changed = (region[src] != at_launch[name]).any(dim=1).tolist()
                    self.fence_breaks += [FenceBreak(event_idx, g, c)
                                          for g, c, bad in zip(src, dst, changed, strict=True) if bad]
                target[name][dst] = region[src]

        self.launched += 1
        events_list.append((event_idx, LateEvent(run, self.delay)))

    def shutdown(self) -> None:
        """Nothing runs in the background."""
