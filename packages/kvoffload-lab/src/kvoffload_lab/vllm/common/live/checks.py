"""``kvoffload vllm check --checker engine``: a vLLM connector's live runs, judged.

:func:`run_engine_checks` takes one connector of the registry (:mod:`kvoffload_lab.vllm.live.registry`):
for each run mode
(``inproc``: the engine core in the driver's process; ``mp``: engine core and worker in processes
of their own, as ``vllm serve`` runs them) one driver process (:mod:`.driver`) runs every workload
(:mod:`.workloads`) of every seed with each of the connector's managers, each in a fresh engine.
The run without offloading (the baseline) of every workload of either run mode runs in process,
first: in the in-process driver, or in a driver of its own when only ``mp`` runs. The connector's
judge gives each run's verdict against its baseline; its ``results`` and ``summary`` make the
:class:`~kvoffload_lab.vllm.common.findings.CheckerVerdict` list and the report (:mod:`.report`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.common.engine import build_tiny_model
from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.live.driver import BASELINE
from kvoffload_lab.vllm.common.live.interface import LiveConnector
from kvoffload_lab.vllm.common.live.report import engine_report
from kvoffload_lab.vllm.common.live.verdicts import LiveVerdict
from kvoffload_lab.vllm.common.live.workloads import Workload, build

RUN_MODES: tuple[str, ...] = ("inproc", "mp")


def _plan(connector: LiveConnector, mode: str, model_dir: Path, out: Path,
          runs: list[tuple[Workload, str]]) -> dict[str, Any]:
    return {"mode": mode, "model_dir": str(model_dir), "out": str(out),
            "runs": [{"workload": w.to_json(), "connector": connector.name, "manager": m} for w, m in runs]}


def _drive(python: str, plan: dict[str, Any], folder: Path, timeout: float) -> list[dict[str, Any]]:
    plan_path, out_path = folder / f"plan-{plan['mode']}.json", folder / f"outcomes-{plan['mode']}.json"
    plan_path.write_text(json.dumps(plan))
    log = folder / f"driver-{plan['mode']}.log"
    with log.open("w") as sink:
        done = subprocess.run([python, "-m", "kvoffload_lab.vllm.live", str(plan_path), str(out_path)],
                              stdout=sink, stderr=subprocess.STDOUT, timeout=timeout)
    outcomes = json.loads(out_path.read_text()) if out_path.is_file() else []
    if done.returncode != 0 or len(outcomes) != len(plan["runs"]):
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise RuntimeError(f"the {plan['mode']} driver exited {done.returncode} after {len(outcomes)} of "
                           f"{len(plan['runs'])} runs: {' | '.join(tail)}")
    return outcomes


def _refuse_unknown(connector: LiveConnector, managers: Sequence[str], run_modes: Sequence[str]) -> None:
    for manager in managers:
        if manager not in connector.managers:
            raise ValueError(f"unknown manager {manager!r} of the {connector.name} connector; "
                             f"known: {', '.join(connector.managers)}")
    for run_mode in run_modes:
        if run_mode not in RUN_MODES:
            raise ValueError(f"unknown run mode {run_mode!r}; known: {', '.join(RUN_MODES)}")


class _Runs:
    """The drivers of one check: their outcomes judged as they come, the baselines kept for that."""

    def __init__(self, connector: LiveConnector, model_dir: Path, root: Path, python: str, timeout: float,
                 tlc_jar: str | None) -> None:
        self.connector, self.model_dir, self.root = connector, model_dir, root
        self.python, self.timeout, self.tlc_jar = python, timeout, tlc_jar
        self.seconds: dict[str, float] = {}
        self.verdicts: list[LiveVerdict] = []
        self.baseline_of: dict[tuple[str, int], dict[str, Any]] = {}

    def drive(self, mode: str, runs: list[tuple[Workload, str]], timed_as: str) -> None:
        started = time.perf_counter()
        plan = _plan(self.connector, mode, self.model_dir, self.root / "runs", runs)
        outcomes = _drive(self.python, plan, self.root, self.timeout)
        self.seconds[timed_as] = time.perf_counter() - started
        for (workload, manager), outcome in zip(runs, outcomes, strict=True):
            if manager == BASELINE:
                self.baseline_of[(workload.name, workload.seed)] = outcome
                continue
            baseline = self.baseline_of[(workload.name, workload.seed)]
            self.verdicts.append(self.connector.judge(outcome, baseline, workload, self.tlc_jar))


def run_engine_checks(
    connector: LiveConnector,
    managers: Sequence[str] | None = None,
    seeds: Sequence[int] = (0,),
    run_modes: Sequence[str] = RUN_MODES,
    kinds: Sequence[str] | None = None,
    mp_kinds: Sequence[str] | None = None,
    tlc_jar: str | None = None,
    out: Path | None = None,
    python: str = sys.executable,
    timeout: float = 3000,
) -> tuple[list[CheckerVerdict], dict[str, Any]]:
    """``connector`` in live engines: each of ``managers`` (default all of the connector's) x run mode
    (``run_modes``) over the workloads ``kinds`` (default all the connector runs; ``mp_kinds`` with
    multiprocessing, default the same) of ``seeds``, each run compared with the run without
    offloading. Returns the connector's results and the JSON-able report (:func:`.report.format_report`
    prints it). ``python`` must run an installed vLLM whose engine starts here; every run's files are
    kept under ``out`` (a temporary folder when None). An unknown manager, run mode or kind raises
    ``ValueError`` before any file is written; a driver that fails raises ``RuntimeError``."""
    managers = tuple(connector.managers if managers is None else managers)
    _refuse_unknown(connector, managers, run_modes)
    inproc_kinds = tuple(connector.kinds if kinds is None else kinds)
    chosen = {mode: inproc_kinds if mode == "inproc" or mp_kinds is None else tuple(mp_kinds)
              for mode in RUN_MODES if mode in run_modes}
    loads = {mode: [build(kind, seed) for seed in seeds for kind in chosen[mode]] for mode in chosen}
    baselines = [(w, BASELINE) for w in {(w.name, w.seed): w for ws in loads.values() for w in ws}.values()]
    root = out or Path(tempfile.mkdtemp(prefix=f"kvoffload-live-{connector.name}-"))
    root.mkdir(parents=True, exist_ok=True)
    runs = _Runs(connector, build_tiny_model(root / "model"), root, python, timeout, tlc_jar)
    if "inproc" not in loads:
        runs.drive("inproc", baselines, "baseline")
    for mode, workloads in loads.items():
        mine = [(w, m) for w in workloads for m in managers]
        runs.drive(mode, baselines + mine if mode == "inproc" else mine, mode)
    results = connector.results(runs.verdicts, managers, chosen)
    return results, engine_report(connector, runs.verdicts, runs.seconds, root)
