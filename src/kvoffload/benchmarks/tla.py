"""Embedded TLA+ checker throughput: distinct states per second on the project's model, on the
largest conformance spec (two-phase commit with four resource managers), and on the largest
models of the public corpus (packages/tlacheck/tests/corpus) next to TLC's recorded runtime.

Times the whole check (parse, compile, BFS, invariants, liveness). The figures are wall-clock
seconds, CPU seconds of this process and of its worker processes (``--workers``); compare runs on
the same machine only. Where TLC can run (a jar and java; ``--tlc off`` skips it), each row also
holds TLC's run of the same model with as many workers (``-workers 1`` next to the embedded
checker's one process, ``-workers N`` next to ``--workers N``; at most ``--tlc-seconds`` each) and
the ratio of wall times, embedded / TLC. TLC takes its module folders, jars and JVM options from
``$TLACHECK_TLA_LIBRARY``, ``$TLACHECK_TLC_CLASSPATH`` and ``$TLACHECK_TLC_JVM_OPTIONS``.
Parsed modules come from the tree cache after their first parse
(``tree_cache`` in the JSON; ``TLACHECK_CACHE=off`` parses every module in every run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tlacheck import check_model, tlc
from tlacheck.parse import tree_cache_dir

_REPO = Path(__file__).resolve().parents[3]
# tlacheck's conformance specs and public corpus, beside its tests.
_CHECKER_TESTS = Path("packages/tlacheck/tests")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tla-dir", type=Path, default=None,
                        help="directory holding KVOffload.tla/.cfg (default: ./tla, else the repository's tla/)")
    parser.add_argument("--specs-dir", type=Path, default=None,
                        help="conformance specs (default: ./packages/tlacheck/tests/specs, else the repository's)")
    parser.add_argument("--max-states", type=int, default=None, help="stop each model after this many states")
    parser.add_argument("--corpus-dir", type=Path, default=None,
                        help="public corpus with corpus.json (default: ./packages/tlacheck/tests/corpus, else the "
                             "repository's)")
    parser.add_argument("--corpus-models", type=int, default=3,
                        help="how many of the corpus's largest models (by TLC's distinct-state count) to run")
    parser.add_argument("--workers", type=int, default=2,
                        help="also check tla/KVOffload.cfg with this many worker processes (1: skip that row)")
    parser.add_argument("--tlc", choices=("auto", "off"), default="auto",
                        help="auto: run TLC beside the embedded checker when a jar and java are found (default)")
    parser.add_argument("--jar", type=Path, default=None, help="tla2tools.jar (else $TLA2TOOLS_JAR, else the cache)")
    parser.add_argument("--tlc-seconds", type=float, default=60.0,
                        help="give up a TLC run after this many seconds (default 60)")


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.exists():
            return c
    return candidates[0]


def _tlc_row(spec: Path, cfg: Path, workers: int, embedded_seconds: float, jar: Path | None,
             limit: float) -> dict[str, Any]:
    """TLC on the same model with ``workers`` workers, and the embedded / TLC ratio of wall times."""
    try:
        result = tlc.run_tlc(spec, cfg, jar=jar, workers=workers, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"workers": workers, "skipped": f"over {limit:g} s"}
    row: dict[str, Any] = {
        "workers": workers, "result": result.result, "distinct_states": result.distinct_states,
        "seconds": round(result.seconds, 3),
        "distinct_states_per_s": round(result.distinct_states / result.seconds, 1) if result.seconds > 0 else None,
    }
    row["embedded_over_tlc"] = round(embedded_seconds / result.seconds, 2) if result.seconds > 0 else None
    return row


def _measure(name: str, spec: Path, cfg: Path, max_states: int | None, workers: int = 1,
             tlc_jar: Path | bool | None = False, tlc_limit: float = 60.0) -> dict[str, Any]:
    if not spec.exists() or not cfg.exists():
        return {"model": name, "skipped": f"{spec if not spec.exists() else cfg} not found"}
    here = Path.cwd()
    # Like TLC, from the folder of the .cfg: specs EXTEND modules that sit beside them.
    os.chdir(cfg.parent)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        children = os.times()
        result = check_model(Path(os.path.relpath(spec.resolve(), cfg.parent.resolve())), Path(cfg.name),
                             max_states=max_states, workers=workers)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        after = os.times()
        # Worker processes (workers > 1) are reaped by the check, so their CPU time shows here.
        children_cpu = after.children_user + after.children_system - children.children_user - children.children_system
    finally:
        os.chdir(here)
    row = {
        "model": name,
        "workers": workers,
        "result": result.result,
        "violated": result.violated,
        "distinct_states": result.distinct_states,
        "states_generated": result.states_generated,
        "depth": result.depth,
        "seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "worker_cpu_seconds": round(children_cpu, 3),
        "distinct_states_per_s": round(result.distinct_states / wall, 1) if wall > 0 else None,
        "distinct_states_per_cpu_s": round(result.distinct_states / cpu, 1) if cpu > 0 else None,
    }
    if tlc_jar is not False and max_states is None:
        row["tlc"] = _tlc_row(spec, cfg, workers, wall, tlc_jar or None, tlc_limit)
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    tla_dir = args.tla_dir or _first_existing(Path("tla"), _REPO / "tla")
    specs = args.specs_dir or _first_existing(_CHECKER_TESTS / "specs", _REPO / _CHECKER_TESTS / "specs")
    jar: Path | bool | None = False
    if args.tlc == "auto" and tlc.tlc_available(args.jar):
        jar = tlc.find_jar(args.jar)
    limit = args.tlc_seconds

    def measure(name: str, spec: Path, cfg: Path, workers: int = 1) -> dict[str, Any]:
        return _measure(name, spec, cfg, args.max_states, workers, jar, limit)

    results = [
        measure("tla/KVOffload.cfg", tla_dir / "KVOffload.tla", tla_dir / "KVOffload.cfg"),
        *([measure("tla/KVOffload.cfg", tla_dir / "KVOffload.tla", tla_dir / "KVOffload.cfg", args.workers)]
          if args.workers > 1 else []),
        measure("TwoPhaseBench.cfg (conformance)", specs / "TwoPhase.tla", specs / "TwoPhaseBench.cfg"),
    ]
    corpus = args.corpus_dir or _first_existing(_CHECKER_TESTS / "corpus", _REPO / _CHECKER_TESTS / "corpus")
    results += _corpus(corpus, args.corpus_models, args.max_states, jar, limit)
    cache = tree_cache_dir()
    return {"benchmark": "tla", "engine": "embedded", "tlc": str(jar) if jar else "off",
            "tree_cache": str(cache) if cache is not None else "off", "results": results}


def _corpus(corpus: Path, count: int, max_states: int | None, jar: Path | bool | None = False,
            limit: float = 60.0) -> list[dict[str, Any]]:
    """The ``count`` largest corpus models, each with TLC's recorded answer and runtime."""
    index = corpus / "corpus.json"
    if count <= 0 or not index.exists():
        return [] if count <= 0 else [{"model": str(index), "skipped": "corpus not found"}]
    models = sorted(json.loads(index.read_text()), key=lambda m: -m["distinct_states"])[:count]
    out = []
    for m in models:
        row = _measure(m["config"], corpus / m["spec"], corpus / m["config"], max_states, 1, jar, limit)
        h, mi, s = (int(x) for x in m["runtime"].split(":"))
        row.update(tlc_result=m["result"], tlc_distinct_states=m["distinct_states"], tlc_seconds=h * 3600 + mi * 60 + s,
                   matches_tlc=row.get("result") == m["result"] and row.get("distinct_states") == m["distinct_states"])
        out.append(row)
    return out
