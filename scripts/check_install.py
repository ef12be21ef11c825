"""``make check-install``: the built wheels, installed as a user installs them, alone and with each extra.

``python scripts/check_install.py [--cache DIR] [--torch REQUIREMENT] [--installs NAME,...]`` builds
the wheels of the TLA+ checker (packages/tlacheck), of the product, kvoffload, and of the lab,
kvoffload-lab (packages/kvoffload-lab) (``pip wheel --no-deps`` of a clean copy of each tree) and
checks that each holds only files of its src/ (no script of scripts/, no lab module in the product's).

The checker alone (install ``tlacheck``): its wheel in a fresh venv without torch, then, from an
empty folder, ``tlacheck --help``, every action's ``--help``, ``tlacheck check`` and ``tlacheck
check-all`` of a tiny model (which must pass), and a probe that neither kvoffload nor torch came in.

Every other install is a fresh venv with the torch requirement (default ``torch==2.13.0``, the CPU
build), then a wheel:

- ``product`` and ``product-EXTRA`` (tiers, vllm, fast-cpu): the product's wheel alone, as a vLLM
  user installs it. Every module of it that needs neither an extra nor vLLM imports, without
  loading the lab or what only the lab needs (kvoffload_lab, tlacheck, rich, hypothesis), none of
  which is installed; there is no ``kvoffload`` command;
- ``lab`` and ``lab-EXTRA`` (tiers, plot): the lab's wheel, with the product's and the checker's
  wheels (no index serves them). From an empty folder it runs, with that venv's ``kvoffload``:
  ``kvoffload --help`` and every command's and subcommand's ``--help``; one small run of each
  command, where a run that needs an extra this install lacks must answer one line naming that
  extra (``pip install 'kvoffload[tiers]'``, ``pip install 'kvoffload-lab[plot]'``), exit status 2,
  no traceback.

In each, a probe that each extra's modules are there exactly when the extra is installed, so that
no install sees another's modules.

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
PRODUCT, LAB = "kvoffload", "kvoffload-lab"
PRODUCT_INSTALLS: tuple[str, ...] = ("product", "product-tiers", "product-vllm", "product-fast-cpu")
LAB_INSTALLS: tuple[str, ...] = ("lab", "lab-tiers", "lab-plot")
INSTALLS: tuple[str, ...] = (CHECKER, *PRODUCT_INSTALLS, *LAB_INSTALLS)
# What only the lab may import, none of which the bare product install has: the lab, the TLA+ checker and
# the lab's own dependencies (tests/test_layout.py holds the source to the same rule).
LAB_ONLY = ("kvoffload_lab", CHECKER, "rich", "hypothesis")
# The requirement a missing extra's one line names.
REQUIREMENT_OF_EXTRA = {"tiers": "kvoffload[tiers]", "plot": "kvoffload-lab[plot]"}
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
# Imports every module of the installed product; prints which of LAB_ONLY got loaded, which modules
# failed on a module of kvoffload or of LAB_ONLY, and which were skipped (they need an extra or vLLM).
PRODUCT_ALONE_PROBE = """
import importlib, json, pkgutil, sys
import kvoffload

lab_only, skipped, failed = set(%r), [], []
for info in pkgutil.walk_packages(kvoffload.__path__, "kvoffload."):
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as error:
        missing = (error.name or "kvoffload").split(".")[0]
        (failed if missing == "kvoffload" or missing in lab_only else skipped).append(info.name)
    except ImportError:
        skipped.append(info.name)
loaded = sorted({name.split(".")[0] for name in sys.modules} & lab_only)
print(json.dumps({"loaded": loaded, "failed": failed, "skipped": skipped}))
"""
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
    lab install it runs in, for a run no extra changes that costs a minute."""

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
        Run(("link", str(PROJECT / "tla")), only="lab"),
        Run(("replay", "tiny.jsonl", "--gpu-blocks", "4", "--cpu-blocks", "8", "--json")),
        # vLLM itself is the user's (installed, or --vllm-src): without it, one line, in every install.
        Run(("vllm", "check", "--vllm-src", str(folder)), status=2),
        Run(("bench", "scheduler", "--json", "--live", "16", "--steps", "2", "--lifetimes", "100")),
        # Served everywhere: without numba (the product's fast-cpu extra, in no lab install) the mover
        # copies with torch.
        Run(("bench", "mover", "--json", "--total-mib", "1", "--repeats", "1", "--block-sizes", "16384"),
            served=_json_shows("cpu_kernel", lambda kernel, _: kernel == "torch")),
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
    """The wheel of ``distribution`` (kvoffload; the lab or the checker: packages/NAME), built from a clean
    copy of its tree into ``CACHE/dist/DISTRIBUTION``, and what is wrong with its contents: a file that is
    not a module of its src/ (a script of scripts/, a stale build, a lab module in the product's)."""
    root = PROJECT if distribution == PRODUCT else PROJECT / "packages" / distribution
    dist, tree = cache / "dist" / distribution, cache / f"tree-{distribution}"
    shutil.rmtree(dist, ignore_errors=True)
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(root, tree, ignore=NOT_BUILT)
    done = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(tree)])
    shutil.rmtree(tree, ignore_errors=True)
    wheels = sorted(dist.glob(f"{distribution.replace('-', '_')}-*.whl"))
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


def _requirements(name: str, wheels: dict[str, Path]) -> list[str]:
    """What ``pip install`` gets for install ``name`` (``product``, ``lab-tiers``, ...): the side's wheel
    with the install's extra; a lab install also the product's and the checker's wheels, which no index
    serves."""
    side, _, extra = name.partition("-")
    distribution = PRODUCT if side == "product" else LAB
    wheel = wheels[distribution]
    requirement = f"{distribution}[{extra}] @ {wheel.as_uri()}" if extra else str(wheel)
    return [requirement] if side == "product" else [str(wheels[PRODUCT]), str(wheels[CHECKER]), requirement]


def install(cache: Path, base: Path, wheels: dict[str, Path], name: str) -> tuple[Path, list[str]]:
    """A fresh venv for install ``name``: a hard-linked copy of the torch venv, then its wheels."""
    venv = cache / f"venv-{name}"
    shutil.rmtree(venv, ignore_errors=True)
    copied = _run(["cp", "-al", str(base), str(venv)])
    if copied.returncode:
        shutil.copytree(base, venv, symlinks=True)
    requirements = _requirements(name, wheels)
    links = sorted({str(wheel.parent) for wheel in wheels.values()})
    done = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                 *[option for link in links for option in ("--find-links", link)], *requirements])
    if done.returncode:
        return venv, [f"{name}: pip install {' '.join(requirements)} exited {done.returncode}: {_last_line(done)}"]
    return venv, []


def _help_problems(name: str, program: str, python: str, folder: Path, listed: str, cli: str) -> list[str]:
    """``PROGRAM --help`` (which must list ``listed``) and every command's and subcommand's ``--help``,
    the paths read from the installed package's own parser (the module ``cli``); the problems."""
    command = Path(program).name
    problems: list[str] = []
    usage = _run([program, "--help"], cwd=folder)
    if usage.returncode or listed not in usage.stdout:
        problems.append(f"{name}: {command} --help: exit {usage.returncode}: {_last_line(usage)}")
    paths = _run([python, "-c", COMMAND_PATHS % cli], cwd=folder)
    helped = _run([python, "-c", HELP_ALL % cli], cwd=folder, stdin=paths.stdout)
    if paths.returncode or not paths.stdout.strip() or helped.returncode or helped.stdout.strip():
        problems.append(f"{name}: --help: {helped.stdout.strip() or _last_line(helped) or _last_line(paths)}")
    return problems


def _extra_problems(python: str, folder: Path, name: str) -> list[str]:
    """Each extra's modules are there exactly when install ``name`` has that extra."""
    extra = name.partition("-")[2]
    probe = "import importlib.util as u, json; print(json.dumps({m: bool(u.find_spec(m)) for m in %r}))"
    modules = [module for group in EXTRA_MODULES.values() for module in group]
    found = json.loads(_run([python, "-c", probe % modules], cwd=folder).stdout or "{}")
    return [f"{name}: module {module} of the {group_extra!r} extra is {'present' if found.get(module) else 'missing'}"
            for group_extra, group in EXTRA_MODULES.items() for module in group
            if found.get(module) != (group_extra == extra)]


def _product_alone_problems(venv: Path, folder: Path, name: str) -> list[str]:
    """The product installed alone: no ``kvoffload`` command, none of LAB_ONLY installed (with an
    extra, only the lab and its checker: an extra's own requirements may bring rich or hypothesis,
    as the vllm extra's fastapi brings rich), and every module that needs neither an extra nor vLLM
    imports without loading any of them."""
    python = str(venv / "bin" / "python")
    problems: list[str] = []
    if (venv / "bin" / "kvoffload").exists():
        problems.append(f"{name}: {venv / 'bin' / 'kvoffload'} exists (the command is the lab's)")
    absent = LAB_ONLY if name == "product" else LAB_ONLY[:2]
    probe = "import importlib.util as u; print([m for m in %r if u.find_spec(m)])"
    present = _run([python, "-c", probe % (absent,)], cwd=folder).stdout.strip()
    if present != "[]":
        problems.append(f"{name}: the product alone brought in {present}")
    done = _run([python, "-c", PRODUCT_ALONE_PROBE % (LAB_ONLY,)], cwd=folder)
    found = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() else None
    if found is None or found["loaded"] or found["failed"]:
        problems.append(f"{name}: importing the product's modules: {found or _last_line(done)}")
    else:
        print(f"{name}: every product module imports ({len(found['skipped'])} skipped: they need an extra or vLLM)",
              flush=True)
    return problems


def _lab_problems(venv: Path, folder: Path, name: str) -> list[str]:
    """The lab's command: every ``--help``, and one small run of each command."""
    python, kvoffload = str(venv / "bin" / "python"), str(venv / "bin" / "kvoffload")
    problems = _help_problems(name, kvoffload, python, folder, "simulate", "kvoffload_lab.cli")
    for run in _runs(folder):
        if run.only in (None, name):
            problems += _small_run(kvoffload, folder, name, run)
    return problems


def check_install(venv: Path, name: str) -> list[str]:
    """Every check above for one install; its problems."""
    with tempfile.TemporaryDirectory(prefix="kvoffload-check-install-") as empty:
        folder = Path(empty)
        _write_inputs(folder)
        side = _product_alone_problems if name.startswith("product") else _lab_problems
        return side(venv, folder, name) + _extra_problems(str(venv / "bin" / "python"), folder, name)


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
        problems += _help_problems(CHECKER, tlacheck, python, folder, "check-all", f"{CHECKER}.cli")
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
    if run.needs is None or run.needs == name.partition("-")[2]:
        if done.returncode != run.status:
            return [f"{shown}: exit {done.returncode} (want {run.status}): {_last_line(done)}"]
        if run.status and len(done.stderr.strip().splitlines()) != 1:
            return [f"{shown}: expected one line on stderr, got {done.stderr.strip()[-300:]}"]
        if run.served is not None and not run.served(done, name):
            return [f"{shown}: output lacks what it must show: {done.stdout.strip()[-300:]}"]
        return []
    lines = done.stderr.strip().splitlines()
    wanted = f"pip install '{REQUIREMENT_OF_EXTRA[run.needs]}'"
    if done.returncode != 2 or len(lines) != 1 or wanted not in lines[0]:
        return [f"{shown}: expected one line naming {wanted} and exit 2, got exit {done.returncode}: "
                f"{done.stderr.strip()[-300:]}"]
    return []


def check_kvoffload_installs(cache: Path, torch: str, names: list[str], checker_wheel: Path,
                             seconds: dict[str, float]) -> list[str]:
    """The product's wheel, the lab's when a lab install is named, then each install ``names`` in turn
    (its seconds added to ``seconds``); the problems."""
    began = time.perf_counter()
    wheels, problems = {CHECKER: checker_wheel}, []
    for distribution in (PRODUCT, *([LAB] if any(name.startswith("lab") for name in names) else [])):
        wheel, failed = build_wheel(cache, distribution)
        problems += failed
        if wheel is None:
            return problems
        wheels[distribution] = wheel
    built = time.perf_counter()
    seconds["wheels"] = round(built - began, 1)
    base, failed = torch_venv(cache, torch)
    problems += failed
    seconds["torch venv"] = round(time.perf_counter() - built, 1)
    print(f"check-install: wheels in {seconds['wheels']} s, torch venv in {seconds['torch venv']} s", flush=True)
    if failed:
        return problems
    for name in names:
        began = time.perf_counter()
        venv, failed = install(cache, base, wheels, name)
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
        problems += check_kvoffload_installs(cache, args.torch, kvoffload_installs, checker_wheel, seconds)
    for problem in problems:
        print(f"FAIL: {problem}")
    total = round(time.perf_counter() - started, 1)
    print(json.dumps({"installs": names, "seconds": seconds, "total_seconds": total, "failures": len(problems)}))
    print("check-install: " + ("every install works" if not problems else f"{len(problems)} failure(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
