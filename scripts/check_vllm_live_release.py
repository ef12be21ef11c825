"""``make check-vllm-live``: vLLM's own connector in live engines of two releases, asserted.

``python scripts/check_vllm_live_release.py VERSION OUT_DIR [kvoffload vllm check options]`` runs
``kvoffload vllm check --checker engine --json`` with this interpreter (the venv of that vLLM
release) and asserts what it must show in that release:

- 0.26.0, before the fix of #49635: LRU and ARC break ``NoManagerCallAfterSignal`` and tiering
  crashes with ``KeyError`` in ``tiering/manager.py``, in process and with multiprocessing; every
  such trace is rejected by the mirror, the embedded TLA+ checker and TLC at the call after the
  signal;
- 0.32.0: every invariant holds and every trace passes all three;
- both: the double reset is shown (``AssertionError`` in the connector's ``reset_cache``) by
  every manager in process and by at least one with multiprocessing (there it is
  timing-dependent), and no engine leaves its offload region in /dev/shm.

Exit 0 when the release gave what it must, 1 otherwise (each mismatch on its own line).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# (manager, checker) -> (invariant, text its error must contain); every other pair must succeed.
CAUGHT_0_26 = {
    **{(m, c): ("NoManagerCallAfterSignal", "prepare_store") for m in ("lru", "arc") for c in ("engine", "engine-mp")},
    **{("tiering", c): ("Crash", "tiering/manager.py") for c in ("engine", "engine-mp")},
}
DOUBLE_RESET = {(m, "double-reset"): ("Crash", "AssertionError") for m in ("lru", "arc", "tiering")}
# With multiprocessing the engine core may step between the two resets: each manager's run may
# show the finding or not, and at least one of them must.
DOUBLE_RESET_MP = "double-reset-mp"
EXPECTED: dict[str, dict[tuple[str, str], tuple[str, str]]] = {
    "0.26.0": {**CAUGHT_0_26, **DOUBLE_RESET},
    "0.32.0": dict(DOUBLE_RESET),
}
TRACE_ENGINES = ("mirror", "embedded", "tlc")


def _trace_problems(version: str, run: dict[str, Any], caught: bool) -> list[str]:
    where = f"vLLM {version} {run['manager']} {run['mode']} {run['workload']}-{run['seed']}"
    verdicts = run["traces"]
    engines = [v.split(":", 1)[0] for v in verdicts]
    if engines != list(TRACE_ENGINES):
        return [f"{where}: trace checked by {engines}, expected {list(TRACE_ENGINES)}"]
    if not caught:
        return [f"{where}: trace rejected: {v}" for v in verdicts if not v.endswith(": ok")]
    if run["invariant"] == "NoManagerCallAfterSignal" or "KeyError" in (run["error"] or ""):
        return [f"{where}: trace not rejected for the call after the signal: {v}" for v in verdicts
                if "NoManagerCallAfterSignal" not in v]
    return []


def check(version: str, report: dict[str, Any]) -> list[str]:
    """How ``report`` (``kvoffload vllm check --json``) differs from what ``version`` must give."""
    expected = EXPECTED[version]
    problems = []
    shown_mp = [r for r in report["results"] if r["checker"] == DOUBLE_RESET_MP]
    if not any(r["invariant"] == "Crash" and "AssertionError" in (r["error"] or "") for r in shown_mp):
        problems.append(f"vLLM {version}: no multiprocess run showed the double reset")
    for result in report["results"]:
        key = (result["manager"], result["checker"])
        if result["checker"] == DOUBLE_RESET_MP:
            shown = f"{result['result']} {result['invariant']}: {(result['error'] or '')[:160]}"
            print(f"vLLM {version} {key[0]:>8} x {key[1]:<16} {result['seconds']:>6.1f} s  {shown}")
            if result["result"] != "success" and result["invariant"] != "Crash":
                problems.append(f"vLLM {version} {key}: expected the double reset or nothing, got {shown}")
            continue
        invariant, text = expected.get(key, (None, ""))
        shown = f"{result['result']} {result['invariant']}: {(result['error'] or '')[:160]}"
        print(f"vLLM {version} {key[0]:>8} x {key[1]:<16} {result['seconds']:>6.1f} s  {shown}")
        if invariant is None and result["result"] != "success":
            problems.append(f"vLLM {version} {key}: expected success, got {shown}")
        elif invariant is not None and (result["invariant"] != invariant or text not in (result["error"] or "")):
            problems.append(f"vLLM {version} {key}: expected {invariant} ({text!r}), got {shown}")
        for run in result.get("details", {}).get("runs", []):
            problems += _trace_problems(version, run, version == "0.26.0")
    missing = set(expected) - {(r["manager"], r["checker"]) for r in report["results"]}
    problems += [f"vLLM {version} {key}: no result" for key in sorted(missing)]
    return problems


def shm_files() -> set[str]:
    """The offload regions of the live check's engines in /dev/shm (tiering maps one per engine)."""
    return {path.name for path in Path("/dev/shm").glob("vllm_offload_kvoffload-live-*")}


def engine_report(version: str, options: list[str]) -> tuple[dict[str, Any] | None, list[str]]:
    """Run ``kvoffload vllm check --checker engine --json OPTIONS`` with this interpreter, whose vLLM
    must be ``version``: its report (None when there is none; then the problem, or nothing when the
    interpreter has another vLLM, said on stderr) and the files it left in /dev/shm."""
    import vllm

    if vllm.__version__ != version:
        print(f"live release check: this interpreter has vLLM {vllm.__version__}, not {version}", file=sys.stderr)
        return None, []
    shm_before = shm_files()
    done = subprocess.run([sys.executable, "-m", "kvoffload_lab.cli", "vllm", "check", "--checker", "engine", "--json",
                           *options], capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode not in (0, 1) or not lines:
        return None, [f"vLLM {version}: kvoffload vllm check exited {done.returncode}: {done.stderr.strip()[-600:]}"]
    left = sorted(shm_files() - shm_before)
    problems = [f"vLLM {version}: {len(left)} file(s) left in /dev/shm: {', '.join(left[:5])}"] if left else []
    return json.loads(lines[-1]), problems


def start(
    argv: list[str] | None, releases: Any, description: str | None, options: list[str]
) -> tuple[str, dict[str, Any], list[str]] | int:
    """A release script's command line (``VERSION OUT_DIR [kvoffload vllm check options]``) run to
    the engine check's report: ``(version, report, problems)``, or the exit status when there is no
    report (2: usage or another vLLM, said on stderr; 1: the check failed, said as FAIL lines)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", choices=list(releases), metavar="VERSION", help=f"one of {', '.join(releases)}")
    parser.add_argument("out", metavar="OUT_DIR", help="where the check writes its runs")
    args, passed_on = parser.parse_known_args(argv)
    version = args.version
    report, problems = engine_report(version, [*options, "--out", args.out, *passed_on])
    if report is None:
        for problem in problems:
            print(f"FAIL: {problem}")
        return 1 if problems else 2
    return version, report, problems


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    began = start(argv, EXPECTED, __doc__, [])
    if isinstance(began, int):
        return began
    version, report, problems = began
    problems = check(version, report) + problems
    engine = report["engine"]
    from kvoffload_lab.vllm.common.live.report import format_report
    from kvoffload_lab.vllm.live.registry import CONNECTORS

    print(format_report(engine, CONNECTORS["offloading"]))
    print(json.dumps({"vllm": version, "seconds": round(time.perf_counter() - started, 1),
                      "seconds_per_mode": engine["seconds_per_mode"], "model_gaps": len(engine["model_gaps"])}))
    for problem in problems:
        print(f"FAIL: {problem}")
    print(f"check-vllm-live {version}: " + ("gave what it must" if not problems else f"{len(problems)} mismatch(es)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
