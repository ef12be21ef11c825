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
:mod:`kvoffload.dataplane.mover_cpu_kernel`), the ``torch_*`` figures repeat the four mover runs
with the kernel switched off, in the same interleaved rounds, so the kernel's gain is a ratio
measured under the same load; ``--no-kernel`` switches it off for every figure.

On CUDA (``--device cuda``) every copy path of :mod:`kvoffload.dataplane.cuda_paths` is measured
against one contiguous DMA of the same bytes each way, with an interference run against a matmul
loop, and the path ``cuda_copy="auto"`` picks (see :mod:`kvoffload.benchmarks.mover_cuda`);
``--table PATH`` also writes those measurements as a copy table for ``BlockMover(copy_table=)``.
``--device cuda`` on a machine where torch sees no CUDA device prints one line saying so and
exits with status 2, like any other bad input.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvoffload.benchmarks.errors import BenchmarkError
from kvoffload.benchmarks.mover_workload import Timing, Workload, gbps, median_seconds, mover_job

if TYPE_CHECKING:
    import torch

    from kvoffload.dataplane.copy_timing import ComputeLoop
    from kvoffload.dataplane.mover import BlockMover

# torch is imported inside the functions: this module is imported to build `kvoffload --help`,
# which must stay fast.

DEFAULT_BLOCK_SIZES = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``kvoffload bench mover``."""
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where the 'GPU' side lives (cuda without a CUDA device: one line, exit status 2)",
    )
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
        "--compute-ms",
        type=float,
        default=20.0,
        help="CUDA: length of the compute loop the interference run times, alone (milliseconds)",
    )
    parser.add_argument(
        "--compute-tokens", type=int, default=256, help="CUDA: rows of the compute loop's matmul (tokens per step)"
    )
    parser.add_argument("--compute-dim", type=int, default=8192, help="CUDA: width of the compute loop's matmul")
    parser.add_argument(
        "--table",
        type=Path,
        default=None,
        help="CUDA: also write the measurements as a copy table for BlockMover(copy_table=PATH)",
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
            raise BenchmarkError(
                f"--device cuda, but torch {torch.__version__} sees no CUDA device "
                f"(torch.version.cuda={torch.version.cuda})"
            )
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _filled(rows: int, elems: int, device: torch.device, huge_pages: bool) -> torch.Tensor:
    """The engine side's layer: random float16 values, on huge pages when on the CPU (as a CPU
    engine allocating its KV cache with :func:`kvoffload.dataplane.host_memory.empty` would)."""
    import torch

    from kvoffload.dataplane import host_memory

    values = torch.randn(rows, elems, dtype=torch.float16, device=device)
    return values if device.type == "cuda" else host_memory.empty(values.shape, values.dtype, huge_pages).copy_(values)


def _workload(
    device: torch.device, block_bytes: int, total: int, layers: int, seed: int, huge_pages: bool, id_arrays: bool
) -> Workload:
    """Random engine-side layers, scattered ids on both sides, and the contiguous reference's two
    buffers of the same bytes (pinned on CUDA, allocated like the mover's on CPU)."""
    import torch

    from kvoffload.dataplane import host_memory

    if block_bytes % (2 * layers):
        raise BenchmarkError(f"block size {block_bytes} is not a multiple of 2 x {layers} layers (float16 rows)")
    cuda = device.type == "cuda"
    blocks = max(1, total // block_bytes)
    pool = 2 * blocks  # ids are drawn from a pool twice as large, so they are truly scattered
    elems = block_bytes // layers // 2
    gpu = [_filled(pool, elems, device, huge_pages) for _ in range(layers)]
    cpu = None if cuda else [host_memory.empty((pool, elems), torch.float16, huge_pages) for _ in range(layers)]
    gen = torch.Generator().manual_seed(seed)
    gpu_ids = torch.randperm(pool, generator=gen)[:blocks].tolist()
    cpu_ids = torch.randperm(pool, generator=gen)[:blocks].tolist()
    run_ids = list(range(blocks))
    naive_pairs = list(zip(gpu_ids, cpu_ids, strict=True))
    if id_arrays:
        import numpy as np

        gpu_ids, cpu_ids, run_ids = (np.array(ids, dtype=np.int64) for ids in (gpu_ids, cpu_ids, run_ids))
    # Written before it is read: a never-written CPU tensor reads the kernel's shared zero page,
    # which is cache-resident and made the reference up to ~10x too fast (measured 43-51 GB/s).
    random_bytes = torch.randint(0, 256, (blocks * block_bytes,), dtype=torch.uint8, generator=gen)
    if cuda:
        host = torch.empty(random_bytes.numel(), dtype=torch.uint8, pin_memory=True)
        other = random_bytes.to(device)
    else:
        host = host_memory.empty(random_bytes.shape, torch.uint8, huge_pages)
        other = host_memory.empty(random_bytes.shape, torch.uint8, huge_pages).copy_(random_bytes)
    return Workload(device, block_bytes, blocks, gpu, cpu, gpu_ids, cpu_ids, run_ids, naive_pairs, host, other)


def _cpu_variants(w: Workload, kernel: bool, movers: dict[bool, BlockMover]) -> dict[str, Callable[[], object]]:
    """The timed runs on CPU: the mover (with the numba kernel when ``kernel``, and then without
    it under ``torch_*``), the contiguous reference and the naive per-block loop."""
    next_id = iter(range(1 << 62))
    cpu_rows = movers[kernel].cpu_layers

    def naive() -> None:
        for c, g in zip(cpu_rows, w.gpu, strict=True):
            for gi, ci in w.naive_pairs:
                c[ci].copy_(g[gi])

    variants: dict[str, Callable[[], object]] = {"d2h": lambda: w.host.copy_(w.other), "naive": naive}
    for prefix, use_kernel in (("", kernel), ("torch_", False)) if kernel else (("", False),):
        m = movers[use_kernel]
        variants[f"{prefix}store"] = mover_job(m, "store", w.gpu_ids, w.cpu_ids, next_id)
        variants[f"{prefix}load"] = mover_job(m, "load", w.cpu_ids, w.gpu_ids, next_id)
        variants[f"{prefix}gather_store"] = mover_job(m, "store", w.gpu_ids, w.run_ids, next_id)
        variants[f"{prefix}gather_load"] = mover_job(m, "load", w.run_ids, w.gpu_ids, next_id)
    return variants


def _cpu_figures(w: Workload, timings: dict[str, Timing], kernel: bool) -> dict[str, Any]:
    t = {name: timing.seconds for name, timing in timings.items()}
    ref = t["d2h"]
    out: dict[str, Any] = {
        "block_bytes": w.block_bytes,
        "blocks": w.blocks,
        "store_gbps": gbps(w.nbytes, t["store"]),
        "load_gbps": gbps(w.nbytes, t["load"]),
        "contiguous_gbps": gbps(w.nbytes, ref),
        "naive_gbps": gbps(w.nbytes, t["naive"]),
        "store_ratio": round(ref / t["store"], 3),
        "load_ratio": round(ref / t["load"], 3),
        "naive_ratio": round(ref / t["naive"], 3),
        "gather_store_gbps": gbps(w.nbytes, t["gather_store"]),
        "gather_load_gbps": gbps(w.nbytes, t["gather_load"]),
        "gather_store_ratio": round(ref / t["gather_store"], 3),
        "gather_load_ratio": round(ref / t["gather_load"], 3),
        # Process CPU time (every thread): less sensitive to machine load than wall time.
        "store_cpu_ms": round(timings["store"].cpu_seconds * 1e3, 3),
        "load_cpu_ms": round(timings["load"].cpu_seconds * 1e3, 3),
        "contiguous_cpu_ms": round(timings["d2h"].cpu_seconds * 1e3, 3),
    }
    if kernel:
        for name in ("store", "load", "gather_store", "gather_load"):
            out[f"torch_{name}_ratio"] = round(ref / t[f"torch_{name}"], 3)
    return out


def _measure_cpu(w: Workload, repeats: int, kernel: bool, settle: bool) -> dict[str, Any]:
    """Every CPU figure of one block size: the movers share one CPU tier, the kernel is a
    constructor argument of each (``cpu_kernel``), never a module switch."""
    from kvoffload.dataplane.mover import BlockMover

    first = BlockMover(w.gpu, w.pool, cpu_layers=w.cpu, cpu_kernel=kernel)
    movers = {kernel: first}
    if kernel:
        movers[False] = BlockMover(w.gpu, cpu_layers=first.cpu_layers, cpu_kernel=False)
    try:
        timings = median_seconds(_cpu_variants(w, kernel, movers), repeats, lambda: None, settle)
    finally:
        for m in movers.values():
            m.close()
    return _cpu_figures(w, timings, kernel)


def _compute_loop(device: torch.device, args: argparse.Namespace) -> ComputeLoop:
    """The interference run's matmul loop on its own stream, sized to ``--compute-ms``."""
    import torch

    from kvoffload.dataplane.copy_timing import ComputeLoop

    for option, value in (
        ("--compute-ms", args.compute_ms),
        ("--compute-tokens", args.compute_tokens),
        ("--compute-dim", args.compute_dim),
    ):
        if value <= 0:
            raise BenchmarkError(f"{option} must be > 0, got {value}")
    loop = ComputeLoop(device, args.compute_tokens, args.compute_dim, torch.cuda.Stream(device=device))
    loop.size_to(args.compute_ms / 1e3)
    return loop


def _write_table(path: Path, results: list[dict[str, Any]], device: str) -> None:
    from kvoffload.dataplane.copy_calibration import Measurement, write_table

    measurements = [Measurement(**m) for r in results for m in r["measurements"]]
    try:
        write_table(path, measurements, device)
    except OSError as exc:
        raise BenchmarkError(f"--table {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every block size and return the figures as a JSON-ready dict."""
    import torch

    from kvoffload.dataplane import host_memory

    for option, value in (("--total-mib", args.total_mib or 1), ("--repeats", args.repeats), ("--layers", args.layers)):
        if value < 1:
            raise BenchmarkError(f"{option} must be >= 1, got {value}")
    bad = [size for size in args.block_sizes if size < args.layers or size % args.layers]
    if bad:
        raise BenchmarkError(
            f"--block-sizes {bad[0]}: a block must split into {args.layers} layers of whole bytes (>= {args.layers})"
        )
    if args.ids == "array" and importlib.util.find_spec("numpy") is None:
        raise BenchmarkError("--ids array needs numpy, which is not installed (pip install numpy, or --ids list)")
    device = _device(args.device)
    cuda = device.type == "cuda"
    total = (args.total_mib if args.total_mib is not None else (256 if cuda else 64)) << 20
    name = f"cuda:{device.index} {torch.cuda.get_device_name(device)}" if cuda else "cpu"
    kernel = False
    if not cuda and not args.no_kernel:
        from kvoffload.dataplane import mover_cpu_kernel

        kernel = mover_cpu_kernel.AVAILABLE and mover_cpu_kernel.ready()
    huge_pages = not cuda and not args.no_huge_pages and host_memory.huge_pages_available()
    loop = _compute_loop(device, args) if cuda else None
    results = []
    for i, bb in enumerate(args.block_sizes):
        w = _workload(device, bb, total, args.layers, args.seed + i, huge_pages, args.ids == "array")
        if loop is not None:
            from kvoffload.benchmarks import mover_cuda

            results.append(mover_cuda.measure(w, args.repeats, not args.no_settle, loop))
        else:
            results.append(_measure_cpu(w, args.repeats, kernel, not args.no_settle))
    extra: dict[str, Any] = {}
    if loop is not None:
        extra = {
            "cuda": torch.version.cuda,
            "compute_loop": {"tokens": args.compute_tokens, "dim": args.compute_dim, "steps": loop.steps},
        }
        if args.table is not None:
            _write_table(args.table, results, name)
            extra["table"] = str(args.table)
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
        **extra,
    }
