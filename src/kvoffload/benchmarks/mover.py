"""BlockMover throughput vs a contiguous copy and a naive per-block loop (scattered block ids).

For each block size (bytes per block summed over layers) the same number of bytes is moved four
ways, in the same run: through the mover (store GPU->CPU and load CPU->GPU, random scattered ids
on both sides), as one contiguous ``copy_`` of that many bytes (the ceiling), and as a naive loop
of one ``copy_`` per block per layer (the floor). ``gather_*`` figures repeat the mover runs with
scattered GPU ids but consecutive CPU ids, the common case when the CPU pool hands out fresh
blocks. Every figure is the median of ``--repeats`` timed runs after one warm-up run; the runs of
all variants are interleaved in a seeded shuffled order, so a change of machine load hits them
alike. Each timed run starts once the process is idle (``--no-settle`` turns this off): torch's
OpenMP worker spins ~4 ms after every multi-threaded op, and without the wait the run that
follows the contiguous reference shares the cores with that spin. ``*_cpu_ms`` are the medians
of the process CPU time (every thread) of the same runs, less sensitive to machine load.

On CPU, when the numba kernel is in use (extra ``fast-cpu``; see
:mod:`kvoffload.offload.mover_cpu_kernel`), the ``torch_*`` figures repeat the four mover runs
with the kernel switched off, in the same interleaved rounds, so the kernel's gain is a ratio
measured under the same load; ``--no-kernel`` switches it off for every figure.

On CUDA, host memory is pinned (for the reference too), every timing ends with a synchronize,
``contiguous_gbps`` is the device->host copy and ``contiguous_h2d_gbps`` the host->device copy;
``load_ratio`` is taken against the latter.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvoffload.commands.errors import CommandError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions: this module is imported to build `kvoffload --help`,
# which must stay fast.

DEFAULT_BLOCK_SIZES = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kvoffload bench mover``."""
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="where the 'GPU' side lives")
    parser.add_argument(
        "--total-mib",
        type=int,
        default=None,
        help="MiB moved per measurement and direction (default: cpu 64, cuda 256)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure (the median is reported)")
    parser.add_argument("--layers", type=int, default=2, help="layers the block bytes are split over")
    parser.add_argument(
        "--block-sizes",
        type=lambda s: [int(x) for x in s.split(",")],
        default=list(DEFAULT_BLOCK_SIZES),
        help="comma-separated bytes per block over all layers",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random block ids")
    parser.add_argument(
        "--ids",
        choices=("list", "array"),
        default="list",
        help="how jobs give their block ids: Python lists (converted per job) or int64 numpy arrays (zero-copy)",
    )
    parser.add_argument(
        "--no-settle",
        action="store_true",
        help="time each run at once, without first waiting for the previous run's threads to go idle",
    )
    parser.add_argument(
        "--no-huge-pages",
        action="store_true",
        help="CPU: allocate every buffer (engine side, CPU tier, reference) with torch.empty, "
        "not on transparent huge pages",
    )
    parser.add_argument(
        "--no-kernel",
        action="store_true",
        help="CPU: copy with torch only, not the numba kernel (extra fast-cpu) even if installed",
    )


def _device(name: str) -> torch.device:
    import torch


    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise CommandError(
                f"--device cuda, but torch {torch.__version__} sees no CUDA device "
                f"(torch.version.cuda={torch.version.cuda})"
            )
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


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
class _Timing:
    """Median wall seconds and median process CPU seconds (all threads) of one variant."""

    seconds: float
    cpu_seconds: float


def _median_seconds(
    variants: dict[str, Callable[[], object]], repeats: int, sync: Callable[[], None], settle: bool = True
) -> dict[str, _Timing]:
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
    return {name: _Timing(statistics.median(times[name]), statistics.median(cpu[name])) for name in variants}


def _filled(rows: int, elems: int, device: torch.device, huge_pages: bool) -> torch.Tensor:
    """The engine side's layer: random float16 values, on huge pages when on the CPU (as a CPU
    engine allocating its KV cache with :func:`kvoffload.offload.host_memory.empty` would)."""
    import torch

    from kvoffload.offload import host_memory

    values = torch.randn(rows, elems, dtype=torch.float16, device=device)
    return values if device.type == "cuda" else host_memory.empty(values.shape, values.dtype, huge_pages).copy_(values)


def _gbps(nbytes: int, seconds: float) -> float:
    return round(nbytes / seconds / 1e9, 3)


def _measure(
    device: torch.device,
    block_bytes: int,
    total: int,
    layers: int,
    repeats: int,
    seed: int,
    kernel: bool,
    settle: bool = True,
    huge_pages: bool = True,
    id_arrays: bool = False,
) -> dict[str, Any]:
    import torch

    from kvoffload.offload import host_memory, mover_cpu_kernel
    from kvoffload.offload.mover import BlockMover

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if block_bytes % (2 * layers):
        raise CommandError(f"block size {block_bytes} is not a multiple of 2 x {layers} layers (float16 rows)")
    blocks = max(1, total // block_bytes)
    pool = 2 * blocks  # ids are drawn from a pool twice as large, so they are truly scattered
    nbytes = blocks * block_bytes
    elems = block_bytes // layers // 2
    gpu = [_filled(pool, elems, device, huge_pages) for _ in range(layers)]
    cpu = None if cuda else [host_memory.empty((pool, elems), torch.float16, huge_pages) for _ in range(layers)]
    mover = BlockMover(gpu, pool, cpu_layers=cpu)
    gen = torch.Generator().manual_seed(seed)
    gpu_ids = torch.randperm(pool, generator=gen)[:blocks].tolist()
    cpu_ids = torch.randperm(pool, generator=gen)[:blocks].tolist()
    run_ids = list(range(blocks))
    naive_pairs = list(zip(gpu_ids, cpu_ids, strict=True))
    if id_arrays:
        import numpy as np

        gpu_ids, cpu_ids, run_ids = (np.array(ids, dtype=np.int64) for ids in (gpu_ids, cpu_ids, run_ids))
    next_id = iter(range(1 << 62))

    # On CUDA the same buffers through the copy engines too (the default mover uses the kernel on
    # a CUDA view of the pinned tier where it can: see BlockMover's cuda_copy).
    dma_mover = BlockMover(gpu, cpu_layers=mover.cpu_layers, cuda_copy="dma") if cuda else None

    def job(
        kind: str, src: list[int], dst: list[int], use_kernel: bool = kernel, by: BlockMover = mover
    ) -> Callable[[], None]:
        def go() -> None:
            jid = next(next_id)
            # The mover reads the flag at submit; restored at once so other variants are unaffected.
            saved, mover_cpu_kernel.AVAILABLE = mover_cpu_kernel.AVAILABLE, use_kernel
            try:
                (by.store if kind == "store" else by.load)(jid, src, dst)
            finally:
                mover_cpu_kernel.AVAILABLE = saved
            by.wait([jid])
            (result,) = by.poll()
            if not result.ok:
                raise RuntimeError(f"mover {kind} failed: {result.error}")

        return go

    # Written before it is read: a never-written CPU tensor reads the kernel's shared zero page,
    # which is cache-resident and made the reference up to ~10x too fast (measured 43-51 GB/s).
    random_bytes = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen)
    if cuda:
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        other = random_bytes.to(device)
    else:  # allocated like the mover's buffers (huge pages or not): the ratio compares copies
        host = host_memory.empty((nbytes,), torch.uint8, huge_pages)
        other = host_memory.empty((nbytes,), torch.uint8, huge_pages).copy_(random_bytes)
    cpu_rows, gpu_rows = mover.cpu_layers, gpu

    def naive() -> None:
        for c, g in zip(cpu_rows, gpu_rows, strict=True):
            for gi, ci in naive_pairs:
                c[ci].copy_(g[gi], non_blocking=cuda)

    variants: dict[str, Callable[[], object]] = {
        "store": job("store", gpu_ids, cpu_ids),
        "load": job("load", cpu_ids, gpu_ids),
        "gather_store": job("store", gpu_ids, run_ids),
        "gather_load": job("load", run_ids, gpu_ids),
        "d2h": lambda: host.copy_(other, non_blocking=cuda),
        "naive": naive,
    }
    if dma_mover is not None:
        variants["h2d"] = lambda: other.copy_(host, non_blocking=cuda)
        variants["dma_store"] = job("store", gpu_ids, cpu_ids, by=dma_mover)
        variants["dma_load"] = job("load", cpu_ids, gpu_ids, by=dma_mover)
    if kernel:
        variants["torch_store"] = job("store", gpu_ids, cpu_ids, False)
        variants["torch_load"] = job("load", cpu_ids, gpu_ids, False)
        variants["torch_gather_store"] = job("store", gpu_ids, run_ids, False)
        variants["torch_gather_load"] = job("load", run_ids, gpu_ids, False)
    timings = _median_seconds(variants, repeats, sync, settle)
    t = {name: timing.seconds for name, timing in timings.items()}
    store_s, load_s, naive_s, d2h_s = t["store"], t["load"], t["naive"], t["d2h"]
    gather_store_s, gather_load_s = t["gather_store"], t["gather_load"]
    h2d_s = t.get("h2d", d2h_s)
    mover.close()
    if dma_mover is not None:
        dma_mover.close()
    out: dict[str, Any] = {
        "block_bytes": block_bytes,
        "blocks": blocks,
        "store_gbps": _gbps(nbytes, store_s),
        "load_gbps": _gbps(nbytes, load_s),
        "contiguous_gbps": _gbps(nbytes, d2h_s),
        "naive_gbps": _gbps(nbytes, naive_s),
        "store_ratio": round(d2h_s / store_s, 3),
        "load_ratio": round(h2d_s / load_s, 3),
        "naive_ratio": round(d2h_s / naive_s, 3),
        "gather_store_gbps": _gbps(nbytes, gather_store_s),
        "gather_load_gbps": _gbps(nbytes, gather_load_s),
        "gather_store_ratio": round(d2h_s / gather_store_s, 3),
        "gather_load_ratio": round(h2d_s / gather_load_s, 3),
        # Process CPU time (every thread): less sensitive to machine load than wall time.
        "store_cpu_ms": round(timings["store"].cpu_seconds * 1e3, 3),
        "load_cpu_ms": round(timings["load"].cpu_seconds * 1e3, 3),
        "contiguous_cpu_ms": round(timings["d2h"].cpu_seconds * 1e3, 3),
    }
    if cuda:
        out["contiguous_h2d_gbps"] = _gbps(nbytes, h2d_s)
        out["cuda_copy"] = mover.cuda_copy
        out["dma_store_gbps"] = _gbps(nbytes, t["dma_store"])
        out["dma_load_gbps"] = _gbps(nbytes, t["dma_load"])
        out["dma_store_ratio"] = round(d2h_s / t["dma_store"], 3)
        out["dma_load_ratio"] = round(h2d_s / t["dma_load"], 3)
    if kernel:
        for name in ("store", "load", "gather_store", "gather_load"):
            ref = d2h_s if name.endswith("store") else h2d_s
            out[f"torch_{name}_ratio"] = round(ref / t[f"torch_{name}"], 3)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every block size and return the figures as a JSON-ready dict."""
    import torch

    from kvoffload.offload import host_memory

    for option, value in (("--total-mib", args.total_mib or 1), ("--repeats", args.repeats), ("--layers", args.layers)):
        if value < 1:
            raise CommandError(f"{option} must be >= 1, got {value}")
    bad = [size for size in args.block_sizes if size < args.layers or size % args.layers]
    if bad:
        raise CommandError(
            f"--block-sizes {bad[0]}: a block must split into {args.layers} layers of whole bytes (>= {args.layers})"
        )
    if args.ids == "array" and importlib.util.find_spec("numpy") is None:
        raise CommandError("--ids array needs numpy, which is not installed (pip install numpy, or --ids list)")
    device = _device(args.device)
    cuda = device.type == "cuda"
    total = (args.total_mib if args.total_mib is not None else (256 if cuda else 64)) << 20
    name = f"cuda:{device.index} {torch.cuda.get_device_name(device)}" if cuda else "cpu"
    kernel = False
    if not cuda and not args.no_kernel:
        from kvoffload.offload import mover_cpu_kernel

        kernel = mover_cpu_kernel.AVAILABLE and mover_cpu_kernel.ready()
    huge_pages = not cuda and not args.no_huge_pages and host_memory.huge_pages_available()
    results = [
        _measure(
            device, bb, total, args.layers, args.repeats, args.seed + i, kernel, not args.no_settle, huge_pages,
            args.ids == "array",
        )
        for i, bb in enumerate(args.block_sizes)
    ]
    return {
        "device": name,
        "torch": torch.__version__,
        "cpu_kernel": "numba" if kernel else "torch",
        "threads": torch.get_num_threads(),
        "total_mib": total >> 20,
        "layers": args.layers,
        "ids": args.ids,
        "repeats": args.repeats,
        "settle": not args.no_settle,
        "huge_pages": huge_pages,
        "thp_mode": host_memory.thp_mode(),
        "results": results,
    }
