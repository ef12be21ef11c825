"""Which CUDA copy path a mover uses per direction: measurements, the rule, and the table file.

A :class:`Measurement` is one path's bandwidth in one direction at one block size, with the
slowdown it caused a compute loop running beside it (``None`` when that was not measured).
:func:`choose` applies the rule of ``BlockMover(cuda_copy="auto")``:

1. Use the measurements of the table block size nearest the mover's (by ratio; on a tie the
   smaller size), among the paths that can run here.
2. Of those whose slowdown is known and at most ``max_slowdown`` (5%), take the highest bandwidth;
   ties go to the lower slowdown, then to :data:`PREFERENCE` order.
3. If none is within the limit, take the lowest slowdown (unknown counts as worst); ties go to
   the higher bandwidth, then to :data:`PREFERENCE` order. The choice's ``reason`` says so.
4. With no measurement at all for the direction, the first available path in :data:`PREFERENCE`.

The measurements come from :func:`calibrate` (a bounded loop over a measuring callable, run by
the mover at start-up) or from a table that ``kvoffload bench mover --device cuda --table PATH``
writes (:func:`write_table` / :func:`read_table`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Direction = Literal["store", "load"]

# Every CUDA copy path, in the order that breaks ties and that is used without measurements:
# copy-engine paths first, since they take no SMs from the model (vLLM's measurement end to end).
PREFERENCE: tuple[str, ...] = ("batched", "merged", "gather", "vector", "naive")
MAX_SLOWDOWN = 0.05
TABLE_VERSION = 1

__all__ = [
    "MAX_SLOWDOWN",
    "PREFERENCE",
    "Choice",
    "Measurement",
    "calibrate",
    "choose",
    "read_table",
    "write_table",
]


@dataclass(frozen=True)
class Measurement:
    """One path in one direction at one block size: GB/s, and the compute loop's slowdown while
    the path copied (0.03 = 3% slower; None: not measured)."""

    path: str
    direction: Direction
    block_bytes: int
    gbps: float
    slowdown: float | None = None


@dataclass(frozen=True)
class Choice:
    """The path :func:`choose` picked and why (one line, for logs and the bench JSON)."""

    path: str
    reason: str


def _rank(path: str) -> int:
    return PREFERENCE.index(path) if path in PREFERENCE else len(PREFERENCE)


def _nearest_size(sizes: Iterable[int], block_bytes: int) -> int:
    return min(sizes, key=lambda s: (abs(math.log(s / block_bytes)), s))


def choose(
    measurements: Iterable[Measurement],
    direction: Direction,
    block_bytes: int,
    available: Sequence[str],
    max_slowdown: float = MAX_SLOWDOWN,
) -> Choice:
    """The path for ``direction`` at ``block_bytes`` by the module's rule; ValueError when
    ``available`` is empty."""
    if not available:
        raise ValueError("no CUDA copy path is available to choose from")
    usable = [m for m in measurements if m.direction == direction and m.path in available and m.block_bytes > 0]
    if not usable:
        path = min(available, key=_rank)
        return Choice(path, f"{direction}: no measurement of an available path; first by preference")
    size = _nearest_size({m.block_bytes for m in usable}, block_bytes)
    at_size = [m for m in usable if m.block_bytes == size]
    within = [m for m in at_size if m.slowdown is not None and m.slowdown <= max_slowdown]
    limit = f"{max_slowdown:.0%}"
    if within:
        best = min(within, key=lambda m: (-m.gbps, m.slowdown, _rank(m.path)))
        return Choice(
            best.path,
            f"{direction} at {size} B: highest bandwidth ({best.gbps} GB/s) with slowdown "
            f"{best.slowdown:.1%} <= {limit}",
        )
    inf = float("inf")
    best = min(at_size, key=lambda m: (inf if m.slowdown is None else m.slowdown, -m.gbps, _rank(m.path)))
    shown = "unknown" if best.slowdown is None else f"{best.slowdown:.1%}"
    return Choice(best.path, f"{direction} at {size} B: no path within {limit} slowdown; least slowdown ({shown})")


def calibrate(
    measure: Callable[[str, Direction], Measurement],
    paths: Sequence[str],
    budget_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> list[Measurement]:
    """Measure each path in both directions with ``measure`` until ``budget_s`` seconds are spent.

    Directions alternate path by path (store then load of one path, then the next path), so a
    budget that runs out leaves whole paths unmeasured, not one direction; the chooser then treats
    them as missing. A measurement that raises is skipped (the path is missing, not chosen)."""
    deadline = clock() + budget_s
    out: list[Measurement] = []
    for path in sorted(paths, key=_rank):
        for direction in ("store", "load"):
            if clock() >= deadline:
                return out
            try:
                out.append(measure(path, direction))
            except Exception:  # a path that fails to run must not be chosen; the rest still can
                continue
    return out


def write_table(path: Path, measurements: Iterable[Measurement], device: str) -> None:
    """Write the measurements as the JSON table :func:`read_table` reads."""
    doc = {"version": TABLE_VERSION, "device": device, "measurements": [asdict(m) for m in measurements]}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def _entry(where: str, raw: object) -> Measurement:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object, got {type(raw).__name__}")
    for key, kinds in (("path", str), ("direction", str), ("block_bytes", int), ("gbps", (int, float))):
        if not isinstance(raw.get(key), kinds) or isinstance(raw.get(key), bool):
            raise ValueError(f"{where}.{key}: expected {getattr(kinds, '__name__', 'a number')}, got {raw.get(key)!r}")
    if raw["direction"] not in ("store", "load"):
        raise ValueError(f"{where}.direction: expected 'store' or 'load', got {raw['direction']!r}")
    slowdown = raw.get("slowdown")
    if slowdown is not None and (not isinstance(slowdown, (int, float)) or isinstance(slowdown, bool)):
        raise ValueError(f"{where}.slowdown: expected a number or null, got {slowdown!r}")
    return Measurement(raw["path"], raw["direction"], raw["block_bytes"], float(raw["gbps"]), slowdown)


def read_table(path: Path) -> list[Measurement]:
    """The measurements of a table written by :func:`write_table`; ValueError naming the file and
    the entry at fault when it is not one."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"copy table {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version") != TABLE_VERSION:
        raise ValueError(f"copy table {path}: not a version {TABLE_VERSION} table (key 'version')")
    entries = doc.get("measurements")
    if not isinstance(entries, list):
        raise ValueError(f"copy table {path}: key 'measurements' must be a list")
    return [_entry(f"copy table {path}: measurements[{i}]", raw) for i, raw in enumerate(entries)]
