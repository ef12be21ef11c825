"""Embedded TLA+ checker throughput: distinct states per second on the project's model and on the
largest conformance spec (two-phase commit with four resource managers).

Times the whole check (parse, compile, BFS, invariants, liveness) in one process. The figures
are wall-clock and CPU seconds of this process; compare runs on the same machine only.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from kvoffload.tla import check_model

_REPO = Path(__file__).resolve().parents[3]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tla-dir", type=Path, default=None,
                        help="directory holding KVOffload.tla/.cfg (default: ./tla, else the repository's tla/)")
    parser.add_argument("--specs-dir", type=Path, default=None,
                        help="conformance specs (default: ./tests/tlaplus/specs, else the repository's)")
    parser.add_argument("--max-states", type=int, default=None, help="stop each model after this many states")


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.exists():
            return c
    return candidates[0]


def _measure(name: str, spec: Path, cfg: Path, max_states: int | None) -> dict[str, Any]:
    if not spec.exists() or not cfg.exists():
        return {"model": name, "skipped": f"{spec if not spec.exists() else cfg} not found"}
    wall, cpu = time.perf_counter(), time.process_time()
    result = check_model(spec, cfg, max_states=max_states)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "model": name,
        "result": result.result,
        "violated": result.violated,
        "distinct_states": result.distinct_states,
        "states_generated": result.states_generated,
        "depth": result.depth,
        "seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "distinct_states_per_s": round(result.distinct_states / wall, 1) if wall > 0 else None,
        "distinct_states_per_cpu_s": round(result.distinct_states / cpu, 1) if cpu > 0 else None,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    tla_dir = args.tla_dir or _first_existing(Path("tla"), _REPO / "tla")
    specs = args.specs_dir or _first_existing(Path("tests/tlaplus/specs"), _REPO / "tests/tlaplus/specs")
    results = [
        _measure("tla/KVOffload.cfg", tla_dir / "KVOffload.tla", tla_dir / "KVOffload.cfg", args.max_states),
        _measure("TwoPhaseBench.cfg (conformance)", specs / "TwoPhase.tla", specs / "TwoPhaseBench.cfg",
                 args.max_states),
    ]
    return {"benchmark": "tla", "engine": "embedded", "results": results}
