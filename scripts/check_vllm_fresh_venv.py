"""``make check-vllm``'s last step: ``kvoffload[vllm]`` and the lab alone, in a fresh virtual environment.

``python scripts/check_vllm_fresh_venv.py CACHE_DIR [--project DIR] [--torch REQUIREMENT]``
creates ``CACHE_DIR/venv-vllm-extra`` anew and installs into it the torch requirement (default
``torch==2.13.0``, the CPU build: a bare ``torch`` would pull a CUDA build of several GB), then
the project with only its ``[vllm]`` extra, not editable (as a user installs it), then the lab that
runs ``kvoffload vllm check`` (packages/kvoffload-lab, with the TLA+ checker it depends on,
packages/tlacheck; no index serves either), then xgrammar without
its dependencies (as docs/vllm-check.md says). From an empty folder it then runs what a vLLM user runs:
``kvoffload --help``, ``kvoffload vllm check --help``, a ``--vllm-src`` that holds no vLLM (exit 2,
one line), one real check against the newest release in ``CACHE_DIR`` (fetched by scripts/check_vllm_release.py
when missing), and an import of the vLLM integrations (``kvoffload.vllm.spec``,
``kvoffload.vllm.connector``) with that release's sources. The modules of the other extras (tiers,
plot, fast-cpu, test) must be missing there, so an import of one fails as it would for the user.
Exit status 0 when every step gave what it must, 1 otherwise (one line per failure), 2 on bad
arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from check_vllm_release import EXPECTED, fetch

# One module of each extra that [vllm] does not install: tiers, plot, fast-cpu, test.
OTHER_EXTRAS = ("xxhash", "redis", "matplotlib", "numba", "pytest")
VENV = "venv-vllm-extra"


def _install(venv: Path, project: Path, torch: str) -> str | None:
    """Create ``venv`` anew and install into it; the failure, if any, as one line."""
    shutil.rmtree(venv, ignore_errors=True)
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", torch],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"{project}[vllm]"],
        # The lab (the kvoffload command) and its TLA+ checker, distributions of this repository that no
        # index serves; the product they depend on is the one installed above.
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(project / "packages" / "tlacheck"),
         str(project / "packages" / "kvoffload-lab")],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "xgrammar<1", "apache-tvm-ffi"],
    ]
    for args in steps:
        done = subprocess.run(args, capture_output=True, text=True)
        if done.returncode:
            last = done.stderr.strip().splitlines()[-1:]
            return f"`{' '.join(args[1:])}` exited {done.returncode}: {''.join(last)[-300:]}"
    return None


def check_fresh_venv(cache: Path, project: Path, torch: str) -> list[str]:
    """Install and run as above; the list of what went wrong."""
    release = list(EXPECTED)[-1]  # the newest pinned release
    source = fetch(release, cache).resolve()
    venv = (cache / VENV).resolve()
    started = time.perf_counter()
    failed = _install(venv, project.resolve(), torch)
    if failed:
        return [f"fresh venv: {failed}"]
    print(f"fresh venv: installed torch, kvoffload[vllm], the lab and xgrammar in "
          f"{time.perf_counter() - started:.0f} s")
    python, kvoffload = str(venv / "bin" / "python"), str(venv / "bin" / "kvoffload")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVOFFLOAD_VLLM_SRC")}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kvoffload-fresh-venv-") as empty:

        def run(what: str, args: list[str], pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
            extra = {"PYTHONPATH": str(pythonpath)} if pythonpath else {}
            began = time.perf_counter()
            done = subprocess.run(args, cwd=empty, env={**env, **extra}, capture_output=True, text=True)
            print(f"fresh venv: {what} -> exit {done.returncode} ({time.perf_counter() - began:.1f} s)")
            return done

        def expect(done: subprocess.CompletedProcess[str], status: int, ok: bool, what: str) -> None:
            if done.returncode != status or not ok:
                last = (done.stderr.strip() or done.stdout.strip()).splitlines()[-1:]  # a traceback's error line
                problems.append(f"fresh venv: {what}: exit {done.returncode} (want {status}): {''.join(last)[-300:]}")

        probe = f"import importlib.util as u; print(' '.join(m for m in {OTHER_EXTRAS!r} if u.find_spec(m)))"
        present = run("modules of the other extras", [python, "-c", probe])
        found = present.stdout.strip()
        expect(present, 0, not found, f"modules of other extras are installed ({found}): this check would not see them")
        usage = run("kvoffload --help", [kvoffload, "--help"])
        expect(usage, 0, " vllm " in usage.stdout, "kvoffload --help")
        usage = run("kvoffload vllm check --help", [kvoffload, "vllm", "check", "--help"])
        expect(usage, 0, "--vllm-src" in usage.stdout, "kvoffload vllm check --help")
        bad = run("kvoffload vllm check --vllm-src EMPTY_DIR", [kvoffload, "vllm", "check", "--vllm-src", empty])
        lines = bad.stderr.strip().splitlines()
        expect(bad, 2, len(lines) == 1 and "vllm/__init__.py" in lines[0], "a --vllm-src without vLLM")
        what = f"kvoffload vllm check --manager lru --checker sim --vllm-src {release} --json"
        check = run(what, [kvoffload, "vllm", "check", "--manager", "lru", "--checker", "sim",
                           "--vllm-src", str(source), "--json"])
        reports = [json.loads(line) for line in check.stdout.splitlines() if line.startswith("{")]
        verdicts = [(r["manager"], r["checker"], r["result"]) for r in reports[-1]["results"]] if reports else []
        expect(check, 0, verdicts == [("lru", "sim", "success")] and reports[-1]["vllm_version"] == release,
               f"{what} gave {verdicts}")
        what = f"import kvoffload.vllm.spec, kvoffload.vllm.connector with vLLM {release}"
        imported = run(what, [python, "-c", "import kvoffload.vllm.connector, kvoffload.vllm.spec"], source)
        expect(imported, 0, True, what)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cache", type=Path, help="the cache of make check-vllm (.cache/vllm)")
    parser.add_argument("--project", type=Path, default=Path.cwd(), help="the kvoffload checkout (default: .)")
    parser.add_argument("--torch", default="torch==2.13.0", help="torch requirement installed first")
    args = parser.parse_args(argv)
    if not (args.project / "pyproject.toml").is_file():
        parser.error(f"--project {args.project}: no pyproject.toml there")
    started = time.perf_counter()
    problems = check_fresh_venv(args.cache, args.project, args.torch)
    for problem in problems:
        print(f"FAIL: {problem}")
    print(f"fresh venv: {'kvoffload[vllm] alone works' if not problems else f'{len(problems)} failure(s)'}"
          f" ({time.perf_counter() - started:.0f} s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
