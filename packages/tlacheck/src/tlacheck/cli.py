"""``tlacheck``: model-check a TLA+ spec with TLC or with the embedded checker.

``tlacheck check SPEC.tla [--config MODEL.cfg]`` checks one model and exits with TLC's exit code
(0 success, 11 deadlock, 12 safety, 13 liveness, ...). ``tlacheck check-all DIR`` checks every
``.cfg`` in DIR against the outcome its ``\\* expect: ...`` comment announces, and exits 0 only if
every model met its expectation; ``--both`` runs each model under TLC and the embedded checker,
which must agree. Bad input is one line on stderr, exit 2 (150/151 for a spec/config that does not
parse).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tlacheck.engine import ENGINES, UsageError, choose_engine, run_engine
from tlacheck.expectation import ModelOutcome, check_one_model, disagreements
from tlacheck.monitor import DEFAULT_MAX_MEMORY_MB
from tlacheck.report import format_report
from tlacheck.result import EXIT_SUCCESS

# check-all only: every model under TLC and under the embedded checker, which must agree.
BOTH = "both"


def _positive(text: str) -> int:
    """``--max-states``/``--max-memory``: a positive number (0 or less would check nothing)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return value


def add_actions(parser: argparse.ArgumentParser, program: str) -> None:
    """Give ``parser`` the ``check`` and ``check-all`` actions; ``program`` (``tlacheck``, or the
    command that embeds them) begins the notes they print on stderr. :func:`run` runs the one parsed."""
    actions = parser.add_subparsers(dest="tla_command", required=True, metavar="ACTION")

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--engine",
            choices=ENGINES,
            default="auto",
            help="auto: TLC if a jar and java are found, else embedded (default: auto)",
        )
        sub.add_argument("--jar", type=Path, help="path to tla2tools.jar (else $TLA2TOOLS_JAR, else cache)")
        sub.add_argument("--tlc-library", action="append", default=[], metavar="DIR",
                         help="TLC: a folder of modules (proof or community modules: -DTLA-Library; repeatable; "
                              "also $TLACHECK_TLA_LIBRARY)")
        sub.add_argument("--tlc-classpath", action="append", default=[], metavar="JAR",
                         help="TLC: a jar for its class path, such as CommunityModules.jar (repeatable; also "
                              "$TLACHECK_TLC_CLASSPATH)")
        sub.add_argument("--tlc-jvm-option", action="append", default=[], metavar="OPT",
                         help="TLC: a JVM option, such as -Dtlc2.tool.impl.Tool.cdot=true (repeatable; also "
                              "$TLACHECK_TLC_JVM_OPTIONS)")
        sub.add_argument("--json", action="store_true", help="print the result as JSON")
        sub.add_argument("--max-states", type=_positive, default=None,
                         help="embedded engine: stop after N distinct states (exit 152)")
        sub.add_argument("--max-memory", type=_positive, default=DEFAULT_MAX_MEMORY_MB, metavar="MIB",
                         help=f"embedded engine: stop when the process uses more than MIB MiB (exit 152; "
                              f"default {DEFAULT_MAX_MEMORY_MB})")
        sub.add_argument("--workers", type=_positive, default=1,
                         help="embedded engine: processes generating successors (same results; default 1)")
        sub.add_argument("--quiet", action="store_true",
                         help="embedded engine: no header and progress lines on stderr")
        sub.set_defaults(program=program)

    check = actions.add_parser("check", help="check one spec with one model (.cfg)")
    check.add_argument("spec", type=Path, help="the .tla module")
    check.add_argument("--config", type=Path, help="the model (default: SPEC.cfg beside the spec)")
    common(check)
    check.set_defaults(action=run_check)

    check_all = actions.add_parser("check-all", help="check every .cfg of a directory against its expectation")
    check_all.add_argument("directory", type=Path, help="directory with .tla modules and .cfg models")
    common(check_all)
    check_all.add_argument("--both", dest="engine", action="store_const", const=BOTH,
                           help="every model under TLC and under the embedded checker: they must agree on the "
                                "verdict, distinct states, depth, the violated property and the trace's length")
    check_all.set_defaults(action=run_check_all)


def run(args: argparse.Namespace) -> int:
    """Run the action :func:`add_actions` parsed into ``args``; its exit status. Bad input raises
    :class:`~tlacheck.engine.UsageError`."""
    return int(args.action(args))


def _resolve_inputs(spec: Path, config: Path | None) -> tuple[Path, Path]:
    if spec.suffix == ".cfg":
        raise UsageError(f"{spec}: SPEC must be the .tla module (pass the model with --config)")
    if not spec.is_file():
        raise UsageError(f"{spec}: no such spec file")
    config = config if config is not None else spec.with_suffix(".cfg")
    if not config.is_file():
        raise UsageError(f"{config}: no such model file (pass --config MODEL.cfg)")
    return spec, config


def run_check(args: argparse.Namespace) -> int:
    """``check``: print the report (or JSON); exit with the result's exit code."""
    spec, config = _resolve_inputs(args.spec, args.config)
    engine, note = choose_engine(args.engine, args.jar)
    if note:
        print(f"{args.program}: {note}", file=sys.stderr)
    result = run_engine(engine, spec, config, jar=args.jar, max_states=args.max_states,
                        max_memory_mb=args.max_memory, progress=not args.quiet, workers=args.workers,
                        tlc_options=_tlc_options(args))
    result.spec = result.spec or str(spec)
    result.config = result.config or str(config)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(format_report(result))
    return result.exit_code


def _tlc_options(args: argparse.Namespace) -> Any:
    from tlacheck.tlc import TlcOptions

    return TlcOptions.from_env(args.tlc_jvm_option, args.tlc_library, args.tlc_classpath)


def _print_outcome(outcome: ModelOutcome, width: int, label: str = "") -> None:
    verdict = "ok" if outcome.ok else "UNEXPECTED"
    print(
        f"{outcome.model:<{width}}  {label}expected: {outcome.expected:<45} got: {outcome.got:<45} "
        f"{outcome.distinct_states:>8} states {outcome.seconds:8.2f}s  {verdict}",
        flush=True,
    )


def run_check_all(args: argparse.Namespace) -> int:
    """``check-all``: one line per model; exit 0 only if every model met its expectation."""
    directory: Path = args.directory
    if not directory.is_dir():
        raise UsageError(f"{directory}: no such directory")
    configs = sorted(directory.glob("*.cfg"))
    if not configs:
        raise UsageError(f"{directory}: no .cfg models")
    if args.engine == BOTH:
        return _check_all_both(args, configs)
    engine, note = choose_engine(args.engine, args.jar)
    if note:
        print(f"{args.program}: {note}", file=sys.stderr)
    outcomes: list[ModelOutcome] = []
    width = max(len(config.name) for config in configs)
    for config in configs:
        outcome = check_one_model(config, engine, args.jar, args.max_states, _tlc_options(args))
        outcomes.append(outcome)
        if not args.json:
            _print_outcome(outcome, width)
    all_ok = all(outcome.ok for outcome in outcomes)
    if args.json:
        print(json.dumps({"engine": engine, "ok": all_ok, "models": [o.to_json() for o in outcomes]}, indent=2))
    else:
        met = sum(outcome.ok for outcome in outcomes)
        print(f"{met}/{len(outcomes)} models met their expectation (engine: {engine}).")
    return EXIT_SUCCESS if all_ok else 1


def _check_all_both(args: argparse.Namespace, configs: list[Path]) -> int:
    """``check-all --both``: each model under TLC, then the embedded checker; exit 0 only if every
    model met its expectation under both and they agree on it."""
    choose_engine("tlc", args.jar)  # one line saying how to get TLC when there is none
    options = _tlc_options(args)
    width = max(len(config.name) for config in configs)
    rows = []
    for config in configs:
        pair = {engine: check_one_model(config, engine, args.jar, args.max_states, options)
                for engine in ("tlc", "embedded")}
        differ = disagreements(pair["tlc"], pair["embedded"])
        rows.append((pair, differ))
        if not args.json:
            for engine, outcome in pair.items():
                _print_outcome(outcome, width, f"{engine:<8} ")
            if differ:
                print(f"{config.name:<{width}}  ENGINES DISAGREE: " + "; ".join(differ), flush=True)
    all_ok = all(o.ok for pair, _ in rows for o in pair.values()) and not any(d for _, d in rows)
    if args.json:
        print(json.dumps({"engine": BOTH, "ok": all_ok, "models": [
            {**{e: o.to_json() for e, o in pair.items()}, "disagreements": differ} for pair, differ in rows]},
            indent=2))
    else:
        agreed = sum(not differ for _, differ in rows)
        met = sum(all(o.ok for o in pair.values()) for pair, _ in rows)
        print(f"{met}/{len(rows)} models met their expectation under TLC and the embedded checker; "
              f"the engines agree on {agreed}/{len(rows)}.")
    return EXIT_SUCCESS if all_ok else 1


def build_parser() -> argparse.ArgumentParser:
    """The ``tlacheck`` command's parser."""
    parser = argparse.ArgumentParser(prog="tlacheck", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_actions(parser, "tlacheck")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """The ``tlacheck`` console script: the exit status of the action (bad input: one line, exit 2
    or TLC's 150/151)."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except UsageError as error:
        print(f"tlacheck: error: {error}", file=sys.stderr)
        return error.status
    except BrokenPipeError:
        return 0
