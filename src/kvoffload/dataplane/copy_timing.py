"""Timing a CUDA copy path: its bandwidth, the CPU time it spends submitting, and what it takes
from a compute loop running beside it. Used by the mover's start-up calibration and by
``kvoffload bench mover --device cuda``.

A path is timed through two callables: ``submit()`` enqueues one job of ``nbytes`` bytes on the
copy stream, and ``drain()`` waits for every job submitted so far. The compute loop is a chain of
matmuls (sized like a decode step) on its own stream, never the stream copies are submitted from,
so the copies do not wait for it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["ComputeLoop", "CopyRate", "Interference", "copy_rate", "interference"]


@dataclass(frozen=True)
class CopyRate:
    """GB/s of back-to-back jobs, and CPU seconds per job spent in ``submit``."""

    gbps: float
    submit_cpu_s: float


@dataclass(frozen=True)
class Interference:
    """The compute loop's time alone and beside the copies, and the copies' GB/s meanwhile."""

    alone_s: float
    beside_s: float
    gbps: float

    @property
    def slowdown(self) -> float:
        """0.05 means the loop took 5% longer beside the copies."""
        return self.beside_s / self.alone_s - 1.0


class ComputeLoop:
    """``steps`` matmuls of ``[tokens, dim] @ [dim, dim]`` (bfloat16) on ``stream``."""

    def __init__(self, device: torch.device, tokens: int, dim: int, stream: torch.cuda.Stream) -> None:
        self.stream = stream
        with torch.cuda.stream(stream):
            self._x = torch.randn(tokens, dim, device=device, dtype=torch.bfloat16)
            self._w = torch.randn(dim, dim, device=device, dtype=torch.bfloat16) / dim**0.5
            self._out = torch.empty_like(self._x)
        self.steps = 1

    def enqueue(self) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        """Enqueue the loop; its start and end events (timing enabled)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            start.record()
            for _ in range(self.steps):
                torch.matmul(self._x, self._w, out=self._out)
            end.record()
        return start, end

    def alone_seconds(self) -> float:
        """One run of the loop with nothing else queued (the best of three)."""
        best = float("inf")
        for _ in range(3):
            torch.cuda.synchronize()
            start, end = self.enqueue()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        return best

    def size_to(self, seconds: float) -> None:
        """Set ``steps`` so that one run takes about ``seconds``."""
        self.steps = 1
        one = self.alone_seconds()
        self.steps = max(1, round(seconds / max(one, 1e-6)))


def copy_rate(submit: Callable[[], None], drain: Callable[[], None], nbytes: int, jobs: int) -> CopyRate:
    """``jobs`` jobs back to back after one warm-up job: wall-clock GB/s and submit CPU time."""
    submit()
    drain()
    torch.cuda.synchronize()
    cpu = 0.0
    t0 = time.perf_counter()
    for _ in range(jobs):
        c0 = time.process_time()
        submit()
        cpu += time.process_time() - c0
    drain()
    seconds = time.perf_counter() - t0
    return CopyRate(nbytes * jobs / seconds / 1e9, cpu / jobs)


def interference(
    submit: Callable[[], None], drain: Callable[[], None], nbytes: int, loop: ComputeLoop, job_seconds: float
) -> Interference:
    """The loop alone, then beside copies submitted without pause from one job before it starts
    until it ends (so they run at the rate the path sustains, submit cost included).

    ``job_seconds`` (one job's time alone) caps the jobs at what covers 1.5x the loop's time:
    a path that submits faster than it copies would otherwise queue far more work than the loop
    lasts, and the drain would wait for all of it."""
    alone = loop.alone_seconds()
    max_jobs = math.ceil(1.5 * alone / max(job_seconds, 1e-9)) + 1
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    submit()
    jobs = 1
    start, end = loop.enqueue()
    while not end.query() and jobs < max_jobs:
        submit()
        jobs += 1
    drain()
    seconds = time.perf_counter() - t0
    return Interference(alone, start.elapsed_time(end) / 1e3, nbytes * jobs / seconds / 1e9)
