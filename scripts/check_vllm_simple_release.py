"""``make check-vllm`` for ``SimpleCPUOffloadConnector``: what the checks and the reproductions must
give in each release that ships it.

``python scripts/check_vllm_simple_release.py CACHE_DIR [--all]`` fetches each release (as
scripts/check_vllm_release.py's ``fetch`` does), runs ``kvoffload vllm check --connector simple
--json`` and scripts/repro_simple.py against it, each in a fresh process, prints one
line per finding and a Markdown row per release (the historical table of docs/vllm-check.md), and
exits 1 when a release gave other than :func:`expected` says. ``make check-vllm`` runs
:data:`CHECKED` (the releases around each change); ``--all`` runs every release from 0.26.0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from packaging.version import Version

from check_vllm_release import fetch

CHECKED: tuple[str, ...] = ("0.27.0", "0.30.0", "0.33.0", "0.34.0")
ALL: tuple[str, ...] = ("0.26.0", "0.27.0", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0")
CHECKERS = ("sim", "hypothesis", "explore")
# Before 0.30.0 the connector's pending stores never keep the engine stepping (``idle_store``) and
# a request's final full block is dropped (#41704); from 0.30.0 lazy mode can keep an idle engine
# stepping for ever (``lazy_never_idle``), still in 0.34.0.
IDLE_HOLDING = "the engine is idle"
NEVER_IDLE = "the engine never became idle"
REPRO = Path(__file__).with_name("repro_simple.py")


def _fixed(version: str) -> bool:
    return Version(version) >= Version("0.30.0")


def expected(version: str) -> dict[tuple[str, str], tuple[str, str, str, bool]]:
    """(offload mode, checker) -> (result, invariant, text its error must contain, a loss too)."""
    if _fixed(version):
        return {**{("eager", c): ("success", "", "", False) for c in CHECKERS},
                **{("lazy", c): ("violation", "NoLeak", NEVER_IDLE, False) for c in CHECKERS}}
    return {**{("eager", c): ("violation", "NoLeak", IDLE_HOLDING, True) for c in CHECKERS},
            **{("lazy", c): ("violation", "NoLeak", IDLE_HOLDING, False) for c in CHECKERS}}


def expected_repro(version: str) -> dict[str, str]:
    """Scenario -> how its outcome must begin."""
    if _fixed(version):
        return {"final_block": "stored", "idle_store": "steps until the store is reported",
                "lazy_never_idle": "never idle"}
    return {"final_block": "lost", "idle_store": "idle with a store pending", "lazy_never_idle": "idle"}


def _json_line(stdout: str) -> dict[str, Any] | None:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def check_simple_release(version: str, cache: Path) -> tuple[list[str], str]:
    """The ways ``version`` differs from what it must give, and its row of the historical table."""
    source = str(fetch(version, cache))
    problems: list[str] = []
    run = subprocess.run([sys.executable, "-m", "kvoffload_lab.cli", "vllm", "check", "--connector", "simple", "--json",
                          "--vllm-src", source], capture_output=True, text=True)
    report = _json_line(run.stdout)
    if run.returncode not in (0, 1) or report is None:
        return [f"vLLM {version} simple: exited {run.returncode}: {run.stderr.strip()[-400:]}"], ""
    cells: dict[str, set[str]] = {"eager": set(), "lazy": set()}
    for result in report["results"]:
        key = (result["manager"], result["checker"])
        verdict, invariant, text, loss = expected(version)[key]
        has_loss = result["result"] == "loss" or "loss" in result.get("details", {})
        shown = f"{result['result']} {result['invariant']} {'(+ loss) ' if has_loss else ''}{result['error']}"
        print(f"vLLM {version} simple {key[0]:>5} x {key[1]:<10} {result['seconds']:>6.1f} s  {shown[:150]}")
        if result["result"] != verdict or (invariant and result["invariant"] != invariant) or (
            text and text not in (result["error"] or "")
        ) or has_loss != loss:
            problems.append(f"vLLM {version} simple {key}: expected {verdict} {invariant} {text!r} loss={loss}, "
                            f"got {shown[:300]}")
        if result["result"] == "violation":
            cells[key[0]].add(f"{result['invariant']}: {_kind(result['error'])}")
        if has_loss:
            cells[key[0]].add("FinalBlockStored loss")
    repro = subprocess.run([sys.executable, str(REPRO), "--vllm-src", source],
                           capture_output=True, text=True)
    outcomes = dict(line.removeprefix(f"vLLM {version} ").split(": ", 1)
                    for line in repro.stdout.splitlines() if line.startswith(f"vLLM {version} "))
    for scenario, begins in expected_repro(version).items():
        got = outcomes.get(scenario, f"missing (exit {repro.returncode}: {repro.stderr.strip()[-200:]})")
        print(f"vLLM {version} simple repro {scenario}: {got}")
        if not got.startswith(begins):
            problems.append(f"vLLM {version} simple repro {scenario}: expected {begins!r}..., got {got}")
    eager, lazy = ("; ".join(sorted(cells[mode])) or "clean" for mode in ("eager", "lazy"))
    row = f"| {version} | {eager} | {lazy} | {', '.join(f'{k}: {v}' for k, v in outcomes.items())} |"
    return problems, row


def _kind(error: str | None) -> str:
    text = error or ""
    if NEVER_IDLE in text:
        return "never idle"
    if IDLE_HOLDING in text:
        return "idle, holding stores"
    return text[:60]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cache", type=Path, metavar="CACHE_DIR", help="where the release sources are kept")
    parser.add_argument("--all", action="store_true", help="every release from 0.26.0, not only CHECKED")
    args = parser.parse_args(argv)
    problems: list[str] = []
    rows = ["| vLLM | eager | lazy | reproductions |", "|---|---|---|---|"]
    for version in ALL if args.all else CHECKED:
        found, row = check_simple_release(version, args.cache)
        problems += found
        rows.append(row)
    print("\n".join(rows))
    for problem in problems:
        print(f"FAIL: {problem}")
    print("check-vllm (SimpleCPUOffloadConnector): "
          + ("every release gave what it must" if not problems else f"{len(problems)} mismatch(es)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
