"""``kvoffload bench mover --device cuda``: every CUDA copy path against one contiguous DMA.

For one block size (a :class:`~kvoffload.benchmarks.mover_workload.Workload`: scattered ids on both
sides) each path of :mod:`kvoffload.dataplane.cuda_paths` that can run here stores and loads the
same bytes through a :class:`~kvoffload.dataplane.mover.BlockMover` of its own (all sharing one
pinned CPU tier), interleaved with the contiguous DMA of that many bytes each way (the ceiling).
Then, per path and direction:

- ``submit_cpu_ms``: CPU time per job spent in ``store``/``load`` (ids checked, plan made, work
  enqueued), from back-to-back jobs;
- ``slowdown`` and ``gbps_beside_compute``: a compute-bound matmul loop (a decode step's size) on
  its own stream, alone and while the path copies without pause (:mod:`kvoffload.dataplane.copy_timing`).

``chosen`` is what ``cuda_copy="auto"`` picks from these measurements (the rule of
:mod:`kvoffload.dataplane.copy_calibration`), ``auto_calibrated`` what a mover's own start-up
calibration picked and how long it took, and ``goals`` each goal of issue 27 with ``met``.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kvoffload.benchmarks.mover_workload import Workload, gbps, median_seconds, mover_job
from kvoffload.dataplane.copy_calibration import MAX_SLOWDOWN, Direction, Measurement, choose

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvoffload.dataplane.copy_timing import ComputeLoop
    from kvoffload.dataplane.mover import BlockMover

__all__ = ["goal_ratio", "goals", "measure"]

DIRECTIONS: tuple[Direction, Direction] = ("store", "load")


def goal_ratio(block_bytes: int) -> float:
    """Issue 27's bandwidth goal as a fraction of one contiguous DMA: 0.9 from 64 KiB up, 0.8 from
    16 KiB, 0.6 below."""
    if block_bytes >= 64 << 10:
        return 0.9
    if block_bytes >= 16 << 10:
        return 0.8
    return 0.6


def goals(
    block_bytes: int, chosen: dict[str, dict[str, Any]], paths: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each direction's chosen path against the ratio goal and the 5% slowdown goal."""
    out = []
    for direction, choice in chosen.items():
        figures = paths[choice["path"]][direction]
        slowdown = figures.get("slowdown")
        out.append(
            {
                "direction": direction,
                "path": choice["path"],
                "ratio": figures["ratio"],
                "ratio_goal": goal_ratio(block_bytes),
                "ratio_met": figures["ratio"] >= goal_ratio(block_bytes),
                "slowdown": slowdown,
                "slowdown_goal": MAX_SLOWDOWN,
                "slowdown_met": slowdown is not None and slowdown <= MAX_SLOWDOWN,
            }
        )
    return out


def _movers(w: Workload) -> tuple[dict[str, BlockMover], dict[str, str]]:
    """One mover per path that can run here, all on one pinned CPU tier; the others with why."""
    from kvoffload.dataplane.cuda_paths import PATHS
    from kvoffload.dataplane.mover import BlockMover

    first = BlockMover(w.gpu, w.pool, copy_table=[])  # an empty table: no start-up calibration
    unavailable = dict(first.cuda_copy_unavailable)
    movers = {
        path: BlockMover(w.gpu, cpu_layers=first.cpu_layers, cuda_copy=path)  # type: ignore[arg-type]
        for path in PATHS
        if path not in unavailable
    }
    first.close()
    return movers, unavailable


def _submitter(m: BlockMover, direction: Direction, w: Workload) -> tuple[Callable[[], None], Callable[[], None]]:
    """(submit one job, wait for every job submitted and check each one succeeded)."""
    ids = iter(range(1 << 62))
    src, dst = (w.gpu_ids, w.cpu_ids) if direction == "store" else (w.cpu_ids, w.gpu_ids)
    submitted: list[int] = []

    def submit() -> None:
        jid = next(ids)
        (m.store if direction == "store" else m.load)(jid, src, dst)
        submitted.append(jid)

    def drain() -> None:
        m.wait(submitted)
        submitted.clear()
        failed = [r for r in m.poll() if not r.ok]
        if failed:
            raise RuntimeError(f"{direction} job {failed[0].job_id} failed: {failed[0].error}")

    return submit, drain


def _bandwidth(w: Workload, movers: dict[str, BlockMover], repeats: int, settle: bool) -> dict[str, float]:
    """Median seconds of every path and direction and of the contiguous DMA each way."""
    import torch

    next_id = iter(range(1 << 62))
    variants: dict[str, Callable[[], object]] = {
        "d2h": lambda: w.host.copy_(w.other, non_blocking=True),
        "h2d": lambda: w.other.copy_(w.host, non_blocking=True),
    }
    for path, m in movers.items():
        variants[f"{path}_store"] = mover_job(m, "store", w.gpu_ids, w.cpu_ids, next_id)
        variants[f"{path}_load"] = mover_job(m, "load", w.cpu_ids, w.gpu_ids, next_id)
    timings = median_seconds(variants, repeats, torch.cuda.synchronize, settle)
    return {name: t.seconds for name, t in timings.items()}


def _path_figures(
    w: Workload, m: BlockMover, seconds: dict[str, float], loop: ComputeLoop, repeats: int
) -> dict[str, Any]:
    from kvoffload.dataplane.copy_timing import copy_rate, interference

    path = m.cuda_copy["store"] if m.cuda_copy else "?"
    out: dict[str, Any] = {}
    for direction, ref in (("store", "d2h"), ("load", "h2d")):
        submit, drain = _submitter(m, direction, w)  # type: ignore[arg-type]
        s = seconds[f"{path}_{direction}"]
        rate = copy_rate(submit, drain, w.nbytes, repeats)
        beside = interference(submit, drain, w.nbytes, loop, s)
        out[direction] = {
            "gbps": gbps(w.nbytes, s),
            "ratio": round(seconds[ref] / s, 3),
            "submit_cpu_ms": round(rate.submit_cpu_s * 1e3, 3),
            "slowdown": round(beside.slowdown, 4),
            "gbps_beside_compute": round(beside.gbps, 3),
        }
    return out


def _auto_calibrated(w: Workload, cpu_layers: list[Any]) -> dict[str, Any]:
    """What a mover's own start-up calibration picks here, and how long construction took."""
    from kvoffload.dataplane.mover import BlockMover

    t0 = time.perf_counter()
    m = BlockMover(w.gpu, cpu_layers=cpu_layers)
    seconds = time.perf_counter() - t0
    out = {"seconds": round(seconds, 3), "picked": m.cuda_copy, "reasons": m.cuda_copy_reasons}
    m.close()
    return out


def measure(w: Workload, repeats: int, settle: bool, loop: ComputeLoop) -> dict[str, Any]:
    """Every figure of one block size (see the module docstring)."""
    movers, unavailable = _movers(w)
    seconds = _bandwidth(w, movers, repeats, settle)
    paths = {name: _path_figures(w, m, seconds, loop, repeats) for name, m in movers.items()}
    for name, m in movers.items():
        paths[name]["detail"] = m.cuda_copy_details["store"]
    measurements = [
        Measurement(name, d, w.block_bytes, figures[d]["gbps"], figures[d]["slowdown"])
        for name, figures in paths.items()
        for d in DIRECTIONS
    ]
    chosen = {}
    for d in DIRECTIONS:
        choice = choose(measurements, d, w.block_bytes, list(movers))
        chosen[d] = {"path": choice.path, "reason": choice.reason}
    any_mover = next(iter(movers.values()))
    auto = _auto_calibrated(w, any_mover.cpu_layers)
    for m in movers.values():
        m.close()
    return {
        "block_bytes": w.block_bytes,
        "blocks": w.blocks,
        "contiguous_d2h_gbps": gbps(w.nbytes, seconds["d2h"]),
        "contiguous_h2d_gbps": gbps(w.nbytes, seconds["h2d"]),
        "paths": paths,
        "unavailable": unavailable,
        "measurements": [asdict(m) for m in measurements],
        "chosen": chosen,
        "auto_calibrated": auto,
        "goals": goals(w.block_bytes, chosen, paths),
    }
