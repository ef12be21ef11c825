"""Which CUDA copy path a :class:`~kvoffload.dataplane.mover.BlockMover` uses per direction.

:func:`available_paths` builds every path that can run on this machine (and says why each other
one cannot); :func:`select` turns ``cuda_copy`` into one path per direction: a named path for both
directions, or for ``"auto"`` the choice of :func:`~kvoffload.dataplane.copy_calibration.choose`
from a table (a file the bench wrote, or measurements) or else from :func:`calibrate_paths`, a
start-up calibration on scratch buffers shaped like the mover's layers (the mover's own blocks
are never written), bounded by a time budget.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kvoffload.dataplane import copy_calibration, cuda_host
from kvoffload.dataplane.copy_backends import CopyBackend, DriverCtypes, driver_backends, probe_batch
from kvoffload.dataplane.copy_calibration import Choice, Direction, Measurement
from kvoffload.dataplane.copy_timing import ComputeLoop, copy_rate, interference
from kvoffload.dataplane.cuda_paths import PATHS, CopyPath, LayerRows, make_path

__all__ = ["CopyTable", "Selection", "available_paths", "calibrate_paths", "select"]

CopyTable = Path | str | Sequence[Measurement]

# Start-up calibration: a compute loop of this many tokens x this width (a decode step's matmul)
# timed over about this long, and scratch jobs of this many bytes (at least 8 blocks).
_CAL_TOKENS = 256
_CAL_DIM = 4096
_CAL_LOOP_S = 0.004
_CAL_JOB_BYTES = 4 << 20


@dataclass
class Selection:
    """The path per direction, why, and the paths that cannot run here with the reason."""

    paths: dict[Direction, CopyPath]
    reasons: dict[Direction, str]
    unavailable: dict[str, str] = field(default_factory=dict)
    measurements: list[Measurement] = field(default_factory=list)


@functools.cache
def _backends(device: torch.device) -> tuple[CopyBackend | None, CopyBackend | None, list[str]]:
    """(backend for single copies, backend whose batched copy passed the probe, reasons).

    Single copies go through ctypes when it loads: one call per block makes the binding's own
    per-call cost count, and ctypes adds the least. The batched call takes the first backend that
    passes the probe, cuda.bindings first. Made once per device and process: every mover (and
    every calibration's scratch paths) shares them."""
    loaded, reasons = driver_backends(device.index or 0)
    batch = None
    for backend in loaded:
        why = probe_batch(backend, device)
        if why is None:
            batch = backend
            break
        reasons.append(why)
    single = next((b for b in loaded if isinstance(b, DriverCtypes)), loaded[0] if loaded else None)
    return single, batch, reasons


def available_paths(rows: LayerRows) -> tuple[dict[str, CopyPath], dict[str, str]]:
    """Every path that can run over ``rows`` on its CUDA device, and why each other one cannot."""
    single, batch, reasons = _backends(rows.device)
    paths: dict[str, CopyPath] = {}
    unavailable: dict[str, str] = {}
    for name in PATHS:
        if name == "batched" and batch is None:
            unavailable[name] = "; ".join(reasons) or "no driver backend loaded"
            continue
        try:
            paths[name] = make_path(name, rows, batch if name == "batched" else single)
        except ValueError as exc:
            unavailable[name] = str(exc)
    return paths, unavailable


def _scratch_rows(rows: LayerRows, blocks: int) -> LayerRows:
    gpu = [torch.randint(0, 100, (blocks, g.shape[1]), device=rows.device).to(g.dtype) for g in rows.gpu]
    cpu = [torch.empty((blocks, g.shape[1]), dtype=g.dtype, pin_memory=True) for g in rows.gpu]
    views = [cuda_host.device_view(c, rows.device) for c in cpu]
    return LayerRows(gpu, cpu, None if any(v is None for v in views) else views, rows.device)  # type: ignore[arg-type]


def calibrate_paths(rows: LayerRows, names: Sequence[str], budget_s: float) -> list[Measurement]:
    """Bandwidth and compute slowdown of each named path, store and load, on scratch buffers
    shaped like ``rows`` (random scattered ids), within about ``budget_s`` seconds."""
    block_bytes = sum(rows.row_bytes())
    blocks = max(8, _CAL_JOB_BYTES // max(block_bytes, 1))
    scratch = _scratch_rows(rows, 2 * blocks)
    scratch_paths, _ = available_paths(scratch)
    gen = torch.Generator().manual_seed(0)
    gpu_ids = torch.randperm(2 * blocks, generator=gen)[:blocks]
    cpu_ids = torch.randperm(2 * blocks, generator=gen)[:blocks]
    copy_stream = torch.cuda.Stream(device=rows.device)
    loop = ComputeLoop(rows.device, _CAL_TOKENS, _CAL_DIM, torch.cuda.Stream(device=rows.device))
    loop.size_to(_CAL_LOOP_S)

    def measure(name: str, direction: Direction) -> Measurement:
        path = scratch_paths[name]
        keep: list[object] = []

        def submit() -> None:
            with torch.cuda.stream(copy_stream):
                path.copy(direction == "store", gpu_ids, cpu_ids, copy_stream.cuda_stream, keep)

        def drain() -> None:
            copy_stream.synchronize()
            keep.clear()

        rate = copy_rate(submit, drain, blocks * block_bytes, 2)
        beside = interference(submit, drain, blocks * block_bytes, loop, blocks * block_bytes / (rate.gbps * 1e9))
        return Measurement(name, direction, block_bytes, round(rate.gbps, 3), round(beside.slowdown, 4))

    usable = [n for n in names if n in scratch_paths]
    return copy_calibration.calibrate(measure, usable, budget_s)


def _measurements(table: CopyTable) -> list[Measurement]:
    if isinstance(table, (str, Path)):
        return copy_calibration.read_table(Path(table))
    return list(table)


def select(cuda_copy: str, rows: LayerRows, table: CopyTable | None, calibration_s: float) -> Selection:
    """One path per direction for ``cuda_copy`` (a path name, or ``"auto"``); ValueError naming
    the path and the reason when a named path cannot run here."""
    paths, unavailable = available_paths(rows)
    if cuda_copy != "auto":
        if cuda_copy not in paths:
            raise ValueError(f"cuda_copy={cuda_copy!r} cannot run here: {unavailable[cuda_copy]}")
        reason = f"cuda_copy={cuda_copy!r}"
        return Selection(
            {"store": paths[cuda_copy], "load": paths[cuda_copy]}, {"store": reason, "load": reason}, unavailable
        )
    if table is not None:
        measurements = _measurements(table)
    else:
        try:
            measurements = calibrate_paths(rows, list(paths), calibration_s)
        except RuntimeError:  # no room for scratch buffers, no pinned memory: choose without data
            measurements = []
    block_bytes = sum(rows.row_bytes())
    choices: dict[Direction, Choice] = {
        d: copy_calibration.choose(measurements, d, block_bytes, list(paths)) for d in ("store", "load")
    }
    return Selection(
        {d: paths[c.path] for d, c in choices.items()},
        {d: c.reason for d, c in choices.items()},
        unavailable,
        measurements,
    )
