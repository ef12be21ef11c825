"""What the mover benchmarks share (:mod:`kvoffload.benchmarks.mover` on every device and
:mod:`kvoffload.benchmarks.mover_cuda`'s copy paths): one block size's buffers and scattered ids
(:class:`Workload`), the interleaved median timings and a mover job as a timed callable.

torch is named for types only: this module is imported to build `kvoffload --help`, which must stay
fast.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from kvoffload.dataplane.mover import BlockMover


def _settle(window_s: float = 0.005, idle_s: float = 0.0005, limit_s: float = 0.2) -> None:
    """Sleep until this process has used (almost) no CPU for one ``window_s``, at most ``limit_s``.

    After each parallel region, torch's OpenMP worker thread spins before it sleeps (libgomp's
    default wait policy): measured ~4.3 ms of CPU after every 64 MiB ``copy_`` here. A variant
    timed right after the contiguous reference then shares the cores with that spinning thread,
    which charges the reference's leftover to the next variant (the mover's copy of 64 MiB of
    4 KiB blocks measured 15 ms alone, 26 ms right after a ``copy_``). Each timed run therefore
    starts once the process is idle, so no variant pays for the one before it.
    """
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        cpu = time.process_time()
        time.sleep(window_s)
        if time.process_time() - cpu < idle_s:
            return


@dataclass(frozen=True)
class Timing:
    """Median wall seconds and median process CPU seconds (all threads) of one variant."""

    seconds: float
    cpu_seconds: float


def median_seconds(
    variants: dict[str, Callable[[], object]], repeats: int, sync: Callable[[], None], settle: bool = True
) -> dict[str, Timing]:
    """Median timings of each variant. Repeats are interleaved (every variant once per round, in a
    seeded shuffled order), so a change of machine load during the run shifts all variants alike
    and the ratios stay fair. With ``settle`` each timed run starts once the previous one's
    threads went idle (see :func:`_settle`)."""
    for fn in variants.values():
        fn()  # warm-up: first-touch page faults, allocator caches, lazy CUDA init
    sync()
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    rng = random.Random(0)
    order = list(variants.items())
    for _ in range(repeats):
        rng.shuffle(order)
        for name, fn in order:
            sync()
            if settle:
                _settle()
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {name: Timing(statistics.median(times[name]), statistics.median(cpu[name])) for name in variants}


def gbps(nbytes: int, seconds: float) -> float:
    """``nbytes`` moved in ``seconds``, in GB/s (three decimals)."""
    return round(nbytes / seconds / 1e9, 3)


@dataclass
class Workload:
    """One block size's buffers and scattered block ids, shared by every variant."""

    device: torch.device
    block_bytes: int
    blocks: int
    gpu: list[torch.Tensor]
    cpu: list[torch.Tensor] | None
    gpu_ids: Any
    cpu_ids: Any
    run_ids: Any
    naive_pairs: list[tuple[int, int]]
    host: torch.Tensor
    other: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.blocks * self.block_bytes

    @property
    def pool(self) -> int:
        return int(self.gpu[0].shape[0])


def mover_job(mover: BlockMover, kind: str, src: Any, dst: Any, next_id: Iterator[int]) -> Callable[[], None]:
    """One store or load job through ``mover``, waited for; RuntimeError when it failed."""

    def go() -> None:
        jid = next(next_id)
        (mover.store if kind == "store" else mover.load)(jid, src, dst)
        mover.wait([jid])
        (result,) = mover.poll()
        if not result.ok:
            raise RuntimeError(f"mover {kind} failed: {result.error}")

    return go
