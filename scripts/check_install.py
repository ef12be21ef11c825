"""``make check-install``: the built wheels, installed as a user installs them, alone and with each extra.

``python scripts/check_install.py [--cache DIR] [--torch REQUIREMENT] [--installs NAME,...]`` builds
the wheels of the TLA+ checker (packages/tlacheck) and of kvoffload (``pip wheel --no-deps`` of a
clean copy of each tree) and checks that each holds only files of its src/ (no script of scripts/,
no checker module in kvoffload's).

The checker alone (install ``tlacheck``): its wheel in a fresh venv without torch, then, from an
empty folder, ``tlacheck --help``, every action's ``--help``, ``tlacheck check`` and ``tlacheck
check-all`` of a tiny model (which must pass), and a probe that neither kvoffload nor torch came in.

kvoffload, for each install (the base package, then each extra alone: tiers, vllm, plot, fast-cpu):
a fresh venv with the torch requirement (default ``torch==2.13.0``, the CPU build), then the wheel
with that extra, its ``tlacheck`` dependency found beside it (``--find-links``). From an empty
folder it then runs, with that venv's ``kvoffload``:

- ``kvoffload --help`` and every command's and subcommand's ``--help``;
- one small run of each command; a run that needs an extra this install lacks must answer one
  line naming that extra (``pip install 'kvoffload[EXTRA]'``), exit status 2, no traceback;
- a probe that each extra's modules are there exactly when the extra is installed, so that no
  install sees another's modules.

torch is installed once into ``CACHE/torch-venv``; each install's venv starts as a hard-linked copy
of it (seconds, no disk) instead of unpacking torch again. Prints one line per step with its
seconds, then a JSON summary; exit 0 when every install gave what it must, 1 otherwise.
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
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
CHECKER = "tlacheck"
KVOFFLOAD_INSTALLS: tuple[str, ...] = ("base", "tiers", "vllm", "plot", "fast-cpu")
INSTALLS: tuple[str, ...] = (CHECKER, *KVOFFLOAD_INSTALLS)
# Modules that only an extra installs: each must be importable exactly when its extra is.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "tiers": ("xxhash", "redis"),
    "plot": ("matplotlib",),
    "fast-cpu": ("numba",),
    "vllm": ("transformers", "psutil", "zmq"),
}
TINY_SPEC = """---- MODULE Tiny ----
EXTENDS Naturals
VARIABLE x
Init == x = 0
Next == x' = (x + 1) % 3
Small == x < 3
====
"""
TINY_CONFIG = "\\* expect: success\nINIT Init\nNEXT Next\nINVARIANT Small\n"
# Every command path of the parser of the CLI module (%s), printed one per line by the installed package.
COMMAND_PATHS = """
import argparse
from %s import build_parser

def walk(parser, path):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                print(" ".join([*path, name]))
                walk(sub, [*path, name])

walk(build_parser(), [])
"""
# Runs the CLI module's (%s) ``PATH --help`` in this process for each path on stdin; prints the failing ones.
HELP_ALL = """
import contextlib, io, sys
from %s import main

for line in sys.stdin.read().splitlines():
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            main([*line.split(), "--help"])
        status = 0
    except SystemExit as stop:
        status = stop.code
    if status != 0 or "usage:" not in out.getvalue():
        print(f"{line} --help: exit {status}")
"""


# What a served run's output must show, given the install's name.
Verdict = Callable[[subprocess.CompletedProcess[str], str], bool]


@dataclass(frozen=True)
class Run:
    """One small run of a command: ``args`` after ``kvoffload``; ``needs`` the extra it needs (None:
    the base package serves it); ``served`` what its output must show when the install serves it;
    ``status`` its exit status then (not 0: a usage error, which must be one line); ``only`` the one
    install it runs in, for a run no extra changes that costs a minute."""

    args: tuple[str, ...]
    needs: str | None = None
    served: Verdict | None = None
    status: int = 0
    only: str | None = None


def _json_shows(key: str, wanted: Callable[[object, str], bool]) -> Verdict:
    """The verdict that the last JSON line's ``key`` is what ``wanted`` accepts."""

    def check(done: subprocess.CompletedProcess[str], install: str) -> bool:
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        return bool(lines) and wanted(json.loads(lines[-1]).get(key), install)

    return check


def _runs(folder: Path) -> list[Run]:
    """The small runs, in order (trace check reads simulate's trace)."""
    return [
        Run(("simulate", "--users", "2", "--turns", "1", "--backend", "model", "--json", "--trace", "run.ndjson"),
            served=_json_shows("finished", lambda finished, _: isinstance(finished, int) and finished > 0)),
        Run(("trace", "check", "run.ndjson")),
        Run(("explore", "--requests", "1", "--chunks", "2", "--json")),
        Run(("mutants", "--json")),
        Run(("diagram",)),
        Run(("tla", "check", "Tiny.tla", "--engine", "embedded")),
        # The refinement of tla/KVOffload.tla is model-checked: about a minute on a 2-core machine.
        Run(("link", str(PROJECT / "tla")), only="base"),
        Run(("replay", "tiny.jsonl", "--gpu-blocks", "4", "--cpu-blocks", "8", "--json")),
        # vLLM itself is the user's (installed, or --vllm-src): without it, one line, in every install.
        Run(("vllm", "check", "--vllm-src", str(folder)), status=2),
        Run(("bench", "scheduler", "--json", "--live", "16", "--steps", "2", "--lifetimes", "100")),
        # Served everywhere: without numba the mover copies with torch.
        Run(("bench", "mover", "--json", "--total-mib", "1", "--repeats", "1", "--block-sizes", "16384"),
            served=_json_shows("cpu_kernel", lambda kernel, install: kernel == ("numba" if install == "fast-cpu"
                                                                                else "torch"))),
        Run(("simulate", "--tiers", "cpu,file", "--users", "2", "--turns", "1", "--json"), needs="tiers"),
        Run(("bench", "tiers", "--json", "--mib", "1", "--repeats", "1", "--skip-redis", "--dir", str(folder)),
            needs="tiers"),
        Run(("replay", "tiny.jsonl", "--sweep", "--cpu-sizes", "4,8", "--policies", "lru", "--gpu-blocks", "4",
             "--plot", "sweep.png"), needs="plot", served=lambda _, __: (folder / "sweep.png").is_file()),
    ]


def _write_inputs(folder: Path) -> None:
    (folder / "Tiny.tla").write_text(TINY_SPEC, encoding="utf-8")
    (folder / "Tiny.cfg").write_text(TINY_CONFIG, encoding="utf-8")
    lines = [{"timestamp": 1000 * i, "input_length": 1024, "output_length": 8, "hash_ids": [i % 3, 7 + i % 2]}
             for i in range(12)]
    (folder / "tiny.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def _run(args: list[str], *, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True)


def _last_line(done: subprocess.CompletedProcess[str]) -> str:
    return "".join((done.stderr.strip() or done.stdout.strip()).splitlines()[-1:])[-300:]


# What a build must not see: version control, venvs, caches and earlier builds (setuptools packs
# whatever a stale build/lib holds).
NOT_BUILT = shutil.ignore_patterns(".git", ".venv*", ".cache", "build", "dist", "*.egg-info", "__pycache__",
                                   ".pytest_cache", ".ruff_cache", ".hypothesis", ".live", ".fuzz", "out", ".whl")


def build_wheel(cache: Path, distribution: str) -> tuple[Path | None, list[str]]:
    """The wheel of ``distribution`` (kvoffload, or the checker: packages/tlacheck), built from a clean copy of
    its tree into ``CACHE/dist/DISTRIBUTION``, and what is wrong with its contents: a file that is not a
    module of its src/ (a script of scripts/, a stale build, a checker module in kvoffload's)."""
    root = PROJECT if distribution == "kvoffload" else PROJECT / "packages" / distribution
    dist, tree = cache / "dist" / distribution, cache / f"tree-{distribution}"
    shutil.rmtree(dist, ignore_errors=True)
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(root, tree, ignore=NOT_BUILT)
    done = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(tree)])
    shutil.rmtree(tree, ignore_errors=True)
    wheels = sorted(dist.glob(f"{distribution}-*.whl"))
    if done.returncode or not wheels:
        return None, [f"{distribution}: pip wheel exited {done.returncode}: {_last_line(done)}"]
    with zipfile.ZipFile(wheels[0]) as archive:
        names = [name for name in archive.namelist() if not name.split("/")[0].endswith(".dist-info")]
    return wheels[0], [f"{distribution} wheel: {name} is not a file of its src/" for name in names
                       if not (root / "src" / name).is_file()]


def torch_venv(cache: Path, torch: str) -> tuple[Path, list[str]]:
    """A venv holding only ``torch`` (made once, kept in the cache while the requirement is the same)."""
    venv = cache / "torch-venv"
    stamp = venv / "torch-requirement"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == torch:
        return venv, []
    shutil.rmtree(venv, ignore_errors=True)
    for args in ([sys.executable, "-m", "venv", str(venv)], [str(venv / "bin" / "python"), "-m", "pip", "install",
                                                                "-q", torch]):
        done = _run(args)
        if done.returncode:
            return venv, [f"torch venv: `{' '.join(args[1:])}` exited {done.returncode}: {_last_line(done)}"]
    stamp.write_text(torch, encoding="utf-8")
    return venv, []


def install(cache: Path, base: Path, wheel: Path, checker_wheels: Path, name: str) -> tuple[Path, list[str]]:
    """A fresh venv for install ``name``: a hard-linked copy of the torch venv, then the wheel (its
    ``tlacheck`` dependency from the folder ``checker_wheels``, which no index serves)."""
    venv = cache / f"venv-{name}"
    shutil.rmtree(venv, ignore_errors=True)
    copied = _run(["cp", "-al", str(base), str(venv)])
    if copied.returncode:
        shutil.copytree(base, venv, symlinks=True)
    requirement = str(wheel) if name == "base" else f"kvoffload[{name}] @ {wheel.as_uri()}"
    done = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--find-links", str(checker_wheels),
                 requirement])
    if done.returncode:
        return venv, [f"{name}: pip install {requirement} exited {done.returncode}: {_last_line(done)}"]
    return venv, []


def _help_problems(name: str, program: str, python: str, folder: Path, listed: str) -> list[str]:
    """``PROGRAM --help`` (which must list ``listed``) and every command's and subcommand's ``--help``,
    the paths read from the installed package's own parser (``PROGRAM.cli``); the problems."""
    command = Path(program).name
    problems: list[str] = []
    usage = _run([program, "--help"], cwd=folder)
    if usage.returncode or listed not in usage.stdout:
        problems.append(f"{name}: {command} --help: exit {usage.returncode}: {_last_line(usage)}")
    paths = _run([python, "-c", COMMAND_PATHS % f"{command}.cli"], cwd=folder)
    helped = _run([python, "-c", HELP_ALL % f"{command}.cli"], cwd=folder, stdin=paths.stdout)
    if paths.returncode or not paths.stdout.strip() or helped.returncode or helped.stdout.strip():
        problems.append(f"{name}: --help: {helped.stdout.strip() or _last_line(helped) or _last_line(paths)}")
    return problems


def check_install(venv: Path, name: str) -> list[str]:
    """Every check above for one install; its problems."""
    python, kvoffload = str(venv / "bin" / "python"), str(venv / "bin" / "kvoffload")
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="kvoffload-check-install-") as empty:
        folder = Path(empty)
        _write_inputs(folder)
        problems += _help_problems(name, kvoffload, python, folder, "simulate")
        for run in _runs(folder):
            if run.only in (None, name):
                problems += _small_run(kvoffload, folder, name, run)
        probe = "import importlib.util as u, json; print(json.dumps({m: bool(u.find_spec(m)) for m in %r}))"
        modules = [module for group in EXTRA_MODULES.values() for module in group]
        found = json.loads(_run([python, "-c", probe % modules], cwd=folder).stdout or "{}")
        for extra, group in EXTRA_MODULES.items():
            for module in group:
                if found.get(module) != (extra == name):
                    problems.append(f"{name}: module {module} of the {extra!r} extra is "
                                    f"{'present' if found.get(module) else 'missing'}")
    return problems


def check_checker_alone(cache: Path, wheel: Path) -> list[str]:
    """The checker's wheel alone in a fresh venv (no torch): its command's and actions' --help, a check
    and a check-all of the tiny model, and neither kvoffload nor torch installed with it; the problems."""
    venv = cache / f"venv-{CHECKER}"
    shutil.rmtree(venv, ignore_errors=True)
    python, tlacheck = str(venv / "bin" / "python"), str(venv / "bin" / CHECKER)
    for args in ([sys.executable, "-m", "venv", str(venv)], [python, "-m", "pip", "install", "-q", str(wheel)]):
        done = _run(args)
        if done.returncode:
            return [f"{CHECKER}: `{' '.join(args[1:])}` exited {done.returncode}: {_last_line(done)}"]
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tlacheck-check-install-") as empty:
        folder = Path(empty)
        _write_inputs(folder)
        problems += _help_problems(CHECKER, tlacheck, python, folder, "check-all")
        for args, shows in ((("check", "Tiny.tla", "--engine", "embedded"), "No error has been found"),
                            (("check-all", ".", "--engine", "embedded"), "1/1 models met their expectation")):
            began = time.perf_counter()
            done = _run([tlacheck, *args], cwd=folder)
            print(f"{CHECKER}: tlacheck {' '.join(args)} -> exit {done.returncode} "
                  f"({time.perf_counter() - began:.1f} s)", flush=True)
            if done.returncode or shows not in done.stdout:
                problems.append(f"{CHECKER}: tlacheck {' '.join(args)}: exit {done.returncode}, wanted 0 and "
                                f"{shows!r}: {done.stdout.strip()[-300:]} {_last_line(done)}")
        probe = "import importlib.util as u; print([m for m in ('kvoffload', 'torch') if u.find_spec(m)])"
        found = _run([python, "-c", probe], cwd=folder).stdout.strip()
        if found != "[]":
            problems.append(f"{CHECKER}: installed alone, it brought in {found}")
    shutil.rmtree(venv, ignore_errors=True)
    return problems


def _small_run(kvoffload: str, folder: Path, name: str, run: Run) -> list[str]:
    began = time.perf_counter()
    done = _run([kvoffload, *run.args], cwd=folder)
    shown = f"{name}: kvoffload {' '.join(run.args)}"
    print(f"{shown} -> exit {done.returncode} ({time.perf_counter() - began:.1f} s)", flush=True)
    if run.needs is None or run.needs == name:
        if done.returncode != run.status:
            return [f"{shown}: exit {done.returncode} (want {run.status}): {_last_line(done)}"]
        if run.status and len(done.stderr.strip().splitlines()) != 1:
            return [f"{shown}: expected one line on stderr, got {done.stderr.strip()[-300:]}"]
        if run.served is not None and not run.served(done, name):
            return [f"{shown}: output lacks what it must show: {done.stdout.strip()[-300:]}"]
        return []
    lines = done.stderr.strip().splitlines()
    if done.returncode != 2 or len(lines) != 1 or f"kvoffload[{run.needs}]" not in lines[0]:
        return [f"{shown}: expected one line naming kvoffload[{run.needs}] and exit 2, got exit {done.returncode}: "
                f"{done.stderr.strip()[-300:]}"]
    return []


def check_kvoffload_installs(cache: Path, torch: str, names: list[str], checker_wheels: Path,
                             seconds: dict[str, float]) -> list[str]:
    """kvoffload's wheel, then each install ``names`` in turn (its seconds added to ``seconds``); the problems."""
    began = time.perf_counter()
    wheel, problems = build_wheel(cache, "kvoffload")
    built = time.perf_counter()
    seconds["wheel"] = round(built - began, 1)
    base, failed = torch_venv(cache, torch)
    problems += failed
    seconds["torch venv"] = round(time.perf_counter() - built, 1)
    print(f"check-install: wheel in {seconds['wheel']} s, torch venv in {seconds['torch venv']} s", flush=True)
    if wheel is None or failed:
        return problems
    for name in names:
        began = time.perf_counter()
        venv, failed = install(cache, base, wheel, checker_wheels, name)
        installed = time.perf_counter() - began
        problems += failed or check_install(venv, name)
        shutil.rmtree(venv, ignore_errors=True)
        seconds[name] = round(time.perf_counter() - began, 1)
        print(f"check-install: {name}: installed in {installed:.0f} s, checked in "
              f"{seconds[name] - installed:.0f} s", flush=True)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=PROJECT / ".cache" / "check-install",
                        help="where the wheel and the venvs are made (default .cache/check-install)")
    parser.add_argument("--torch", default="torch==2.13.0", help="torch requirement installed first")
    parser.add_argument("--installs", default=",".join(INSTALLS),
                        help=f"comma-separated installs to check (default {','.join(INSTALLS)})")
    args = parser.parse_args(argv)
    names = [name for name in args.installs.split(",") if name]
    unknown = [name for name in names if name not in INSTALLS]
    if unknown:
        parser.error(f"--installs: unknown {', '.join(unknown)}; choose from {', '.join(INSTALLS)}")
    cache = args.cache.resolve()
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    seconds: dict[str, float] = {}
    checker_wheel, problems = build_wheel(cache, CHECKER)
    seconds[f"{CHECKER} wheel"] = round(time.perf_counter() - started, 1)
    if CHECKER in names and checker_wheel is not None:
        began = time.perf_counter()
        problems += check_checker_alone(cache, checker_wheel)
        seconds[CHECKER] = round(time.perf_counter() - began, 1)
        print(f"check-install: {CHECKER} alone: installed and checked in {seconds[CHECKER]} s", flush=True)
    kvoffload_installs = [name for name in names if name != CHECKER]
    if kvoffload_installs and checker_wheel is not None:
        problems += check_kvoffload_installs(cache, args.torch, kvoffload_installs, checker_wheel.parent, seconds)
    for problem in problems:
        print(f"FAIL: {problem}")
    total = round(time.perf_counter() - started, 1)
    print(json.dumps({"installs": names, "seconds": seconds, "total_seconds": total, "failures": len(problems)}))
    print("check-install: " + ("every install works" if not problems else f"{len(problems)} failure(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
