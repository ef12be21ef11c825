"""Embedded TLA+ checker throughput: distinct states per second on the project's models (every
``.cfg`` of tla/), on the largest conformance spec (two-phase commit with four resource managers),
and on the largest models of the public corpus (packages/tlacheck/tests/corpus, or ``--corpus-dir``;
``--corpus-models all`` for every one) next to TLC's recorded runtime.

Times the whole check (parse, compile, BFS, invariants, liveness). The figures are wall-clock
seconds, CPU seconds of this process and of its worker processes (``--workers``); compare runs on
the same machine only. Where TLC can run (a jar and java; ``--tlc off`` skips it), each row also
holds TLC's run of the same model with as many workers (``-workers 1`` next to the embedded
checker's one process, ``-workers N`` next to ``--workers N``; at most ``--tlc-seconds`` each) and
the ratio of wall times, embedded / TLC. TLC takes its module folders, jars and JVM options from
``$TLACHECK_TLA_LIBRARY``, ``$TLACHECK_TLC_CLASSPATH`` and ``$TLACHECK_TLC_JVM_OPTIONS``; for a
corpus model also the JVM options its manifest records and the embedded checker's module library.
TLC runs a corpus model first: one it does not check within ``--tlc-seconds`` is not run by the
embedded checker (the row says so), so ``--corpus-models all`` benches the models TLC checks in
under a minute here.
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

_REPO = Path(__file__).resolve().parents[5]
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
    parser.add_argument("--corpus-models", type=_count_or_all, default=3,
                        help="how many of the corpus's largest models (by TLC's distinct-state count) to run, "
                             "or 'all'; with TLC, a model TLC (-workers 1) takes over --tlc-seconds for is "
                             "not run by the embedded checker")
    parser.add_argument("--corpus-model", action="append", default=None, metavar="CONFIG",
                        help="only this corpus model (its config as corpus.json names it, "
                             "specifications/GameOfLife/GameOfLife.cfg); repeatable")
    parser.add_argument("--workers", type=int, default=2,
                        help="also check tla/KVOffload.cfg with this many worker processes (1: skip that row)")
    parser.add_argument("--tlc", choices=("auto", "off"), default="auto",
                        help="auto: run TLC beside the embedded checker when a jar and java are found (default)")
    parser.add_argument("--jar", type=Path, default=None, help="tla2tools.jar (else $TLA2TOOLS_JAR, else the cache)")
    parser.add_argument("--tlc-seconds", type=float, default=60.0,
                        help="give up a TLC run after this many seconds (default 60)")


def _count_or_all(text: str) -> int:
    if text == "all":
        return _ALL
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of models or 'all', got {text!r}") from None


_ALL = 1 << 30
# The embedded checker's own proof and community modules (bcastByz extends FunctionTheorems,
# which the tlapm snapshot lacks): TLC gets them after $TLACHECK_TLA_LIBRARY's for corpus models.
_EMBEDDED_LIBRARY = Path(tlc.__file__).parent / "library"
# The JVM options the tlaplus/Examples manifest records for a corpus model (their ASSUMEs check them).
_CORPUS_JVM_OPTIONS = {
    "specifications/FiniteMonotonic/MCCRDT.cfg": ("-Dtlc2.tool.impl.Tool.cdot=true",),
    "specifications/FiniteMonotonic/MCReplicatedLog.cfg": ("-Dtlc2.tool.impl.Tool.cdot=true",),
}


def _first_existing(*candidates: Path) -> Path:
    for c in candidates:
        if c.exists():
            return c
    return candidates[0]


def _tlc_row(spec: Path, cfg: Path, workers: int, jar: Path | None, limit: float,
             options: tlc.TlcOptions | None = None) -> dict[str, Any]:
    """TLC on the same model with ``workers`` workers (the ratio is added by :func:`_ratio`)."""
    try:
        result = tlc.run_tlc(spec, cfg, jar=jar, workers=workers, timeout=limit, options=options)
    except subprocess.TimeoutExpired:
        return {"workers": workers, "skipped": f"over {limit:g} s"}
    return {
        "workers": workers, "result": result.result, "distinct_states": result.distinct_states,
        "depth": result.depth, "seconds": round(result.seconds, 3),
        "distinct_states_per_s": round(result.distinct_states / result.seconds, 1) if result.seconds > 0 else None,
    }


def _ratio(row: dict[str, Any], tlc_row: dict[str, Any]) -> dict[str, Any]:
    """``row`` holding TLC's run ``tlc_row`` and the ratio of wall times, embedded / TLC."""
    seconds = tlc_row.get("seconds")
    if "seconds" in row and seconds:
        tlc_row["embedded_over_tlc"] = round(row["seconds"] / seconds, 2)
    row["tlc"] = tlc_row
    return row


def _measure(name: str, spec: Path, cfg: Path, max_states: int | None, workers: int = 1,
             tlc_jar: Path | bool | None = False, tlc_limit: float = 60.0,
             tlc_run: dict[str, Any] | None = None, options: tlc.TlcOptions | None = None) -> dict[str, Any]:
    """The embedded checker on one model, and beside it TLC with as many workers (``tlc_run``:
    that run, already made)."""
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
    if tlc_run is not None:
        return _ratio(row, tlc_run)
    if tlc_jar is not False and max_states is None:
        return _ratio(row, _tlc_row(spec, cfg, workers, tlc_jar or None, tlc_limit, options))
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
    ]
    for cfg in sorted(tla_dir.glob("*.cfg")):
        if cfg.name != "KVOffload.cfg":
            # The module a model checks is named like it up to its first "_" (as `make tla` finds it).
            spec = tla_dir / (cfg.stem.split("_", 1)[0] + ".tla")
            results += [measure(f"tla/{cfg.name}", spec, cfg, w) for w in sorted({1, args.workers})]
    results.append(measure("TwoPhaseBench.cfg (conformance)", specs / "TwoPhase.tla", specs / "TwoPhaseBench.cfg"))
    corpus = args.corpus_dir or _first_existing(_CHECKER_TESTS / "corpus", _REPO / _CHECKER_TESTS / "corpus")
    results += _corpus(corpus, args.corpus_models, args.max_states, jar, limit, args.workers, args.corpus_model)
    cache = tree_cache_dir()
    return {"benchmark": "tla", "engine": "embedded", "tlc": str(jar) if jar else "off",
            "tree_cache": str(cache) if cache is not None else "off", "results": results}


def _corpus(corpus: Path, count: int, max_states: int | None, jar: Path | bool | None = False,
            limit: float = 60.0, workers: int = 1, only: list[str] | None = None) -> list[dict[str, Any]]:
    """The ``count`` largest corpus models, each with TLC's recorded answer and runtime; with TLC,
    each model TLC checks within ``limit`` seconds, with one process / worker and with ``workers``."""
    index = corpus / "corpus.json"
    if count <= 0 or not index.exists():
        return [] if count <= 0 else [{"model": str(index), "skipped": "corpus not found"}]
    listed = [m for m in json.loads(index.read_text()) if only is None or m["config"] in only]
    models = sorted(listed, key=lambda m: -m["distinct_states"])[:count]
    out = []
    for m in models:
        spec, cfg = corpus / m["spec"], corpus / m["config"]
        if jar is False or max_states is not None or not cfg.exists():
            rows = [_measure(m["config"], spec, cfg, max_states)]
        else:
            rows = _corpus_beside_tlc(m["config"], spec, cfg, jar or None, limit, workers)
        h, mi, s = (int(x) for x in m["runtime"].split(":"))
        for row in rows:
            row.update(tlc_result=m["result"], tlc_distinct_states=m["distinct_states"],
                       tlc_seconds=h * 3600 + mi * 60 + s)
            if "result" in row:
                row["matches_tlc"] = row["result"] == m["result"] and row["distinct_states"] == m["distinct_states"]
        out += rows
    return out


def _corpus_beside_tlc(name: str, spec: Path, cfg: Path, jar: Path | None, limit: float,
                       workers: int) -> list[dict[str, Any]]:
    """TLC first (``-workers 1``): a model it does not check within ``limit`` seconds is not run by
    the embedded checker (braf takes it half an hour); then both engines, one process / worker and
    ``workers``."""
    options = tlc.TlcOptions.from_env(_CORPUS_JVM_OPTIONS.get(name, ()), (_EMBEDDED_LIBRARY,))
    first = _tlc_row(spec, cfg, 1, jar, limit, options)
    if "skipped" in first:
        return [{"model": name, "skipped": f"TLC -workers 1 took over {limit:g} s", "tlc": first}]
    rows = [_measure(name, spec, cfg, None, 1, tlc_run=first)]
    if workers > 1:
        rows.append(_measure(name, spec, cfg, None, workers, jar, limit, options=options))
    return rows
