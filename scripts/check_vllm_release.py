"""``make check-vllm``: fetch pinned vLLM releases and assert what the check must find in each.

``python scripts/check_vllm_release.py CACHE_DIR`` downloads each release wheel with pip (no
dependencies), unpacks only its ``.py`` files and ``METADATA`` into ``CACHE_DIR/src/VERSION``, runs
``kvoffload vllm check --json`` against it in a fresh process (one vLLM per process), and asserts the
expected verdicts below, and that neither the check nor the reproduction left a shared-memory file
of vLLM's tiering manager in /dev/shm. Exit status 0 when every release gave what it must, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from kvoffload_lab.vllm.offloading.build import region_files

# vLLM release -> {(manager, checker): (result, invariant, text the error must contain)}; pairs not
# listed must succeed. 0.26.0 is the release before the fix of #49635; 0.34.0 changed the API the
# adapter drives (NewRequestData.from_request's prefill tokens, resumed requests in
# scheduled_new_reqs) and is checked with two resets between steps allowed (it fixed that assertion).
EXPECTED: dict[str, dict[tuple[str, str], tuple[str, str, str]]] = {
    "0.26.0": {
        ("lru", "sim"): ("violation", "NoManagerCallAfterSignal", "prepare_store"),
        ("arc", "sim"): ("violation", "NoManagerCallAfterSignal", "prepare_store"),
        ("tiering", "sim"): ("violation", "Crash", "KeyError"),
        ("lru", "hypothesis"): ("violation", "", ""),
        ("arc", "hypothesis"): ("violation", "", ""),
        ("tiering", "hypothesis"): ("violation", "", ""),
        ("lru", "explore"): ("violation", "Crash", "_build_store_jobs"),
        ("arc", "explore"): ("violation", "Crash", "_build_store_jobs"),
        ("tiering", "explore"): ("violation", "Crash", "_build_store_jobs"),
    },
    "0.33.0": {},
    "0.34.0": {},
}
# Found by the checkers in 0.26.0 to 0.33.0: two reset_cache calls between two steps while a job is
# in flight raise AssertionError (docs/vllm-check.md, "Found in 0.33.0"); there the checkers reset at
# most once between steps so they keep looking for other bugs. 0.34.0 fixed it: the reproduction
# must raise on the releases of this set and must not on the others.
DOUBLE_RESET_CRASHES = frozenset({"0.26.0", "0.33.0"})
REPRO_DOUBLE_RESET = Path(__file__).with_name("repro_double_reset.py")


def fetch(version: str, cache: Path) -> Path:
    """The unpacked ``.py`` sources of vLLM ``version`` (downloaded once)."""
    target = cache / "src" / version
    if (target / "vllm" / "__init__.py").is_file():
        return target
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", f"vllm=={version}", "--no-deps",
                    "--only-binary=:all:", "-d", str(wheels)], check=True)
    wheel = next(iter(sorted(wheels.glob(f"vllm-{version}-*.whl"))))
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.endswith(".py") or n.endswith(".dist-info/METADATA")]
        archive.extractall(target, names)
    wheel.unlink()  # ~300 MB each; only the .py files are needed
    return target


def _run(what: str, args: list[str], problems: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``args`` (output captured); a shared-memory file its connectors left is one of ``problems``."""
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        stdout, stderr = process.communicate()
    # The check's engine ids carry the process id, so only this run's files are counted.
    left = region_files(process.pid)
    if left:
        problems.append(f"{what} left {len(left)} file(s) in /dev/shm, e.g. {left[0]}")
    return subprocess.CompletedProcess(args, process.returncode, stdout, stderr)


def check_release(version: str, cache: Path) -> list[str]:
    """Run the check on ``version``; the list of ways its result differs from EXPECTED."""
    source = fetch(version, cache)
    problems: list[str] = []
    run = _run(f"vLLM {version}: kvoffload vllm check",
               [sys.executable, "-m", "kvoffload_lab.cli", "vllm", "check", "--json", "--vllm-src", str(source)],
               problems)
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    if run.returncode not in (0, 1) or not lines:
        return [*problems, f"vLLM {version}: kvoffload vllm check exited {run.returncode}: {run.stderr.strip()[-400:]}"]
    report: dict[str, Any] = json.loads(lines[-1])
    repro = _run(f"vLLM {version}: repro_double_reset",
                 [sys.executable, str(REPRO_DOUBLE_RESET), "--vllm-src", str(source)], problems)
    print(repro.stdout.strip())
    crashed = repro.returncode == 1 and "AssertionError" in repro.stdout
    if crashed != (version in DOUBLE_RESET_CRASHES):
        problems.append(f"vLLM {version}: double reset_cache expected crash={version in DOUBLE_RESET_CRASHES}, "
                        f"got exit {repro.returncode}: {(repro.stdout + repro.stderr).strip()[-300:]}")
    for result in report["results"]:
        key = (result["manager"], result["checker"])
        verdict, invariant, text = EXPECTED[version].get(key, ("success", "", ""))
        shown = f"{result['result']} {result['invariant']} {result['error']}"
        print(f"vLLM {version} {key[0]:>8} x {key[1]:<10} {result['seconds']:>7.1f} s  {shown[:150]}")
        if result["result"] != verdict or (invariant and result["invariant"] != invariant) or (
            text and text not in (result["error"] or "")
        ):
            problems.append(f"vLLM {version} {key}: expected {verdict} {invariant} {text!r}, got {shown}")
        elif verdict == "violation" and not result["trace"]:
            problems.append(f"vLLM {version} {key}: a violation without a step list")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cache", type=Path, metavar="CACHE_DIR", help="where the release sources are kept")
    cache = parser.parse_args(argv).cache
    problems = [p for version in EXPECTED for p in check_release(version, cache)]
    for problem in problems:
        print(f"FAIL: {problem}")
    print("check-vllm: " + ("every release gave what it must" if not problems else f"{len(problems)} mismatch(es)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
