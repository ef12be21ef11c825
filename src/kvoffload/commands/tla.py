"""``kvoffload tla``: model-check the TLA+ spec with TLC or with the embedded checker.

``kvoffload tla check SPEC.tla [--config MODEL.cfg]`` checks one model and exits with TLC's exit
code (0 success, 11 deadlock, 12 safety, 13 liveness, ...). ``kvoffload tla check-all DIR`` checks
every ``.cfg`` in DIR against the outcome its ``\\* expect: ...`` comment announces, and exits 0
only if every model met its expectation (``make tla``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvoffload.commands.errors import CommandError
from kvoffload.statemachine.checkresult import (
    EXIT_ERROR_CONFIG_PARSE,
    EXIT_ERROR_SPEC_PARSE,
    EXIT_SUCCESS,
    CheckResult,
)
from kvoffload.tla.monitor import DEFAULT_MAX_MEMORY_MB

ENGINES = ("auto", "tlc", "embedded")
# check-all only: every model under TLC and under the embedded checker, which must agree.
BOTH = "both"
_EXPECT_RE = re.compile(r"^\s*\\\*\s*expect:\s*(.+?)\s*$", re.MULTILINE)
_SPEC_RE = re.compile(r"^\s*\\\*\s*spec:\s*(\S+)\s*$", re.MULTILINE)
# Binary or non-UTF-8 .tla/.cfg: TLC has no exit code for it; the CLI's usage error status.
EXIT_UNREADABLE_INPUT = 2
_OUTCOMES = ("success", "safety failure", "liveness failure", "deadlock failure", "error")


def _positive(text: str) -> int:
    """``--max-states``/``--max-memory``: a positive number (0 or less would check nothing)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return value


def add_parser(subparsers: Any) -> None:
    """Register ``kvoffload tla`` and its ``check`` / ``check-all`` subcommands."""
    parser = subparsers.add_parser(
        "tla",
        help="model-check the TLA+ spec (TLC when a tla2tools.jar is found, else the embedded checker)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
                              "also $KVOFFLOAD_TLA_LIBRARY)")
        sub.add_argument("--tlc-classpath", action="append", default=[], metavar="JAR",
                         help="TLC: a jar for its class path, such as CommunityModules.jar (repeatable; also "
                              "$KVOFFLOAD_TLC_CLASSPATH)")
        sub.add_argument("--tlc-jvm-option", action="append", default=[], metavar="OPT",
                         help="TLC: a JVM option, such as -Dtlc2.tool.impl.Tool.cdot=true (repeatable; also "
                              "$KVOFFLOAD_TLC_JVM_OPTIONS)")
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

    check = actions.add_parser("check", help="check one spec with one model (.cfg)")
    check.add_argument("spec", type=Path, help="the .tla module")
    check.add_argument("--config", type=Path, help="the model (default: SPEC.cfg beside the spec)")
    common(check)
    check.set_defaults(func=run_check)

    check_all = actions.add_parser("check-all", help="check every .cfg of a directory against its expectation")
    check_all.add_argument("directory", type=Path, help="directory with .tla modules and .cfg models")
    common(check_all)
    check_all.add_argument("--both", dest="engine", action="store_const", const=BOTH,
                           help="every model under TLC and under the embedded checker: they must agree on the "
                                "verdict, distinct states, depth, the violated property and the trace's length")
    check_all.set_defaults(func=run_check_all)


# --- engines ----------------------------------------------------------------------------------


def choose_engine(engine: str, jar: Path | None) -> tuple[str, str | None]:
    """Resolve ``auto`` to ``tlc`` or ``embedded``. Returns ``(engine, note)``; the note says why
    ``auto`` fell back to the embedded checker. ``tlc`` without a jar or java raises CommandError
    with the how-to-get-the-jar message."""
    from kvoffload.tla import tlc

    if engine == "embedded":
        return "embedded", None
    try:
        tlc.find_tlc(jar)
    except tlc.TlcNotFound as error:
        if engine == "tlc" or jar is not None:
            raise CommandError(str(error)) from error
        if "java not found" in str(error):
            return "embedded", "TLC not available (java not found); using the embedded checker (to use TLC, " \
                               "install a Java runtime, 11 or later)"
        return "embedded", (
            f"no tla2tools.jar ({tlc.where_jars_are_looked_for()}); using the embedded checker. To use TLC, "
            f"download tla2tools.jar from https://github.com/tlaplus/tlaplus/releases to {tlc.default_jar_path()} "
            f"or set {tlc.JAR_ENV}=/path/to/tla2tools.jar"
        )
    return "tlc", None


def run_engine(
    engine: str,
    spec: Path,
    config: Path,
    *,
    jar: Path | None = None,
    max_states: int | None = None,
    max_memory_mb: int | None = DEFAULT_MAX_MEMORY_MB,
    progress: bool = False,
    workers: int = 1,
    tlc_options: Any = None,
) -> CheckResult:
    """Check ``spec`` with ``config`` on a resolved engine (``tlc`` or ``embedded``).

    Errors in the inputs (a spec or config that does not parse or names something undefined)
    raise CommandError with one line naming the file and line, whichever engine found them.
    """
    if engine == "tlc":
        from kvoffload.tla import tlc

        try:
            result = tlc.run_tlc(spec, config, jar=jar, options=tlc_options)
        except tlc.TlcNotFound as error:
            raise CommandError(str(error)) from error
        return _reject_input_errors(result, spec, config)
    try:
        from kvoffload.tla import TlaError, check_model
    except ImportError as error:
        raise CommandError(
            f"the embedded TLA+ checker is not available ({error}); use --engine tlc with a tla2tools.jar"
        ) from error
    started = time.perf_counter()
    try:
        result = check_model(spec, config, max_states=max_states, max_memory_mb=max_memory_mb, progress=progress,
                             workers=workers)
    except TlaError as error:
        raise CommandError(format_tla_error(error), EXIT_ERROR_SPEC_PARSE) from error
    if not result.seconds:
        result.seconds = time.perf_counter() - started
    return _reject_input_errors(result, spec, config)


def _reject_input_errors(result: CheckResult, spec: Path, config: Path) -> CheckResult:
    """A spec or config that does not parse is the user's input error (one line, exit 2), not a
    model-checking outcome; the message names the file (and line, where the engine knows it)."""
    if result.exit_code not in (EXIT_ERROR_SPEC_PARSE, EXIT_ERROR_CONFIG_PARSE, EXIT_UNREADABLE_INPUT):
        return result
    message = " ".join(part.strip() for part in result.message.splitlines() if part.strip())
    if not re.match(r"\S+\.(tla|cfg)\b", message):
        where = str(spec) if result.exit_code == EXIT_ERROR_SPEC_PARSE else _config_location(config, message)
        message = f"{where}: {message}"
    raise CommandError(message, result.exit_code)


def _config_location(config: Path, message: str) -> str:
    """``MODEL.cfg:LINE`` of the name a config error is about (TLC reports no line for these)."""
    named = re.search(r"\b(?:invariant|property|constant|parameter|operator|definition)\s+(\w+)", message, re.I)
    if named:
        try:
            lines = config.read_text().splitlines()
        except OSError:
            return str(config)
        pattern = re.compile(rf"^(?!\s*\\\*).*\b{re.escape(named.group(1))}\b")
        for number, line in enumerate(lines, start=1):
            if pattern.match(line):
                return f"{config}:{number}"
    return str(config)


def format_tla_error(error: Exception) -> str:
    """One line, ``FILE:LINE:COLUMN: message``, for an embedded-checker TlaError."""
    file = getattr(error, "file", None)
    line = getattr(error, "line", None)
    column = getattr(error, "column", None)
    message = " ".join(part.strip() for part in str(error).splitlines() if part.strip())
    location = ":".join(str(part) for part in (file, line, column) if part not in (None, ""))
    if location and not message.startswith(location) and (file is None or str(file) not in message):
        return f"{location}: {message}"
    return message


# --- check ------------------------------------------------------------------------------------


def _resolve_inputs(spec: Path, config: Path | None) -> tuple[Path, Path]:
    if spec.suffix == ".cfg":
        raise CommandError(f"{spec}: SPEC must be the .tla module (pass the model with --config)")
    if not spec.is_file():
        raise CommandError(f"{spec}: no such spec file")
    config = config if config is not None else spec.with_suffix(".cfg")
    if not config.is_file():
        raise CommandError(f"{config}: no such model file (pass --config MODEL.cfg)")
    return spec, config


def run_check(args: argparse.Namespace) -> int:
    """``kvoffload tla check``: print the report (or JSON); exit with the result's exit code."""
    spec, config = _resolve_inputs(args.spec, args.config)
    engine, note = choose_engine(args.engine, args.jar)
    if note:
        print(f"kvoffload tla: {note}", file=sys.stderr)
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


def _changed(previous: dict[str, str] | None, state: dict[str, str]) -> dict[str, str]:
    if previous is None:
        return dict(state)
    return {name: value for name, value in state.items() if previous.get(name) != value}


def format_report(result: CheckResult) -> str:
    """A TLC-style human report: what was checked, the verdict, the counterexample as numbered
    actions with the variables each one changed, and the statistics."""
    lines = [
        f"Model checking {Path(result.spec).name or '?'} with {Path(result.config).name or '?'} "
        f"(engine: {result.engine})"
    ]
    if result.result == "success":
        lines += [line for line in result.message.splitlines() if line.startswith("Warning:")]
        lines.append("Model checking completed. No error has been found.")
    elif result.result == "error":
        # The engine's message may carry its own "Error: " and the counters printed below.
        summary = f"{result.states_generated} states generated, "
        text = [line for line in result.message.splitlines() if not line.startswith(summary)]
        lines += [f"Error: {line.removeprefix('Error: ')}" if k == 0 else line for k, line in enumerate(text)]
    else:
        headline = {
            "safety failure": f"Invariant {result.violated} is violated.",
            "liveness failure": f"Temporal property {result.violated} is violated.",
            "deadlock failure": "Deadlock reached.",
        }[result.result]
        lines.append(f"Error: {headline}")
        if result.trace:
            lines.append("Error: The behavior up to this point is:")
    previous: dict[str, str] | None = None
    for number, step in enumerate(result.trace, start=1):
        marker = ""
        if result.loop_back_to is not None and number - 1 == result.loop_back_to:
            marker = "   <- loop starts here"
        lines.append(f"{number}: {step.action}{marker}")
        changed = _changed(previous, step.state)
        if not changed and previous is not None:
            lines.append("     (no variable changed)")
        for name, value in changed.items():
            lines.append(f"     {name} = {value}")
        previous = step.state
    if result.loop_back_to is not None and result.trace:
        lines.append(f"Back to state {result.loop_back_to + 1}: the behavior repeats from there forever.")
    lines.append(
        f"{result.states_generated} states generated, {result.distinct_states} distinct states found, "
        f"{result.states_left_on_queue} states left on queue."
    )
    lines.append(f"The depth of the complete state graph search is {result.depth}.")
    lines.append(f"Finished in {result.seconds:.2f}s (exit status {result.exit_code}).")
    return "\n".join(lines)


# --- check-all --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """What a model's ``\\* expect: ...`` comment announces: an outcome, and for violations
    optionally the name of the violated invariant/property."""

    result: str
    violated: str | None = None

    def __str__(self) -> str:
        return f"{self.result} {self.violated}" if self.violated else self.result

    def met_by(self, result: CheckResult) -> bool:
        """True when ``result`` is the announced outcome (and names the announced violation)."""
        if result.result != self.result:
            return False
        # TLC may name several properties ("P, Q"): the announced one must be among them.
        from kvoffload.tla.tlc import violated_properties

        return self.violated is None or self.violated in violated_properties(result.violated or "")


def parse_expectation(text: str) -> Expectation:
    """Parse ``success``, ``safety failure NoManagerCallAfterSignal``, ``deadlock failure``, ..."""
    text = " ".join(text.split())
    for outcome in sorted(_OUTCOMES, key=len, reverse=True):
        if text == outcome:
            return Expectation(outcome)
        if text.startswith(outcome + " "):
            name = text[len(outcome) + 1 :].strip()
            if outcome == "success" or " " in name:
                break
            return Expectation(outcome, name)
    raise ValueError(f"unknown expectation {text!r} (expected one of: {', '.join(_OUTCOMES)} [NAME])")


def read_expectation(config: Path) -> Expectation | None:
    """The expectation of a ``.cfg``, or None if it has no ``\\* expect:`` line."""
    match = _EXPECT_RE.search(config.read_text())
    return parse_expectation(match.group(1)) if match else None


def spec_for_config(config: Path) -> Path:
    """The module a model checks: its ``\\* spec: X.tla`` comment, else the .tla named like the
    cfg up to its first ``_``, else the only .tla of the directory."""
    directory = config.parent
    match = _SPEC_RE.search(config.read_text())
    if match:
        named = directory / match.group(1)
        if not named.is_file():
            raise CommandError(f"{config}: names spec {match.group(1)}, which is not in {directory}")
        return named
    by_name = directory / (config.stem.split("_", 1)[0] + ".tla")
    if by_name.is_file():
        return by_name
    modules = sorted(directory.glob("*.tla"))
    if len(modules) == 1:
        return modules[0]
    raise CommandError(f"{config}: cannot tell which .tla it checks (add a line '\\* spec: X.tla')")


@dataclass
class ModelOutcome:
    """One line of ``check-all``."""

    model: str
    spec: str
    expected: str
    got: str
    ok: bool
    distinct_states: int
    seconds: float
    result: CheckResult | None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "spec": self.spec,
            "expected": self.expected,
            "got": self.got,
            "ok": self.ok,
            "distinct_states": self.distinct_states,
            "seconds": self.seconds,
            "result": self.result.to_json() if self.result else None,
        }


def _tlc_options(args: argparse.Namespace) -> Any:
    from kvoffload.tla.tlc import TlcOptions

    return TlcOptions.from_env(args.tlc_jvm_option, args.tlc_library, args.tlc_classpath)


def check_one_model(config: Path, engine: str, jar: Path | None, max_states: int | None,
                    tlc_options: Any = None) -> ModelOutcome:
    """Check one ``.cfg`` and compare with its expectation; input errors become ``got: error``."""
    started = time.perf_counter()
    spec_name = "?"
    expected = "?"
    try:
        expectation = read_expectation(config)
        if expectation is None:
            raise CommandError(f"{config}: no '\\* expect: ...' line")
        expected = str(expectation)
        spec = spec_for_config(config)
        spec_name = spec.name
        result = run_engine(engine, spec, config, jar=jar, max_states=max_states, tlc_options=tlc_options)
    except (CommandError, ValueError) as error:
        # A model expected to be rejected (e.g. a deliberately broken cfg) may say "expect: error".
        return ModelOutcome(
            model=config.name,
            spec=spec_name,
            expected=expected,
            got=f"error: {error}",
            ok=expected == "error",
            distinct_states=0,
            seconds=time.perf_counter() - started,
            result=None,
        )
    got = f"{result.result} {result.violated}" if result.violated else result.result
    return ModelOutcome(
        model=config.name,
        spec=spec_name,
        expected=expected,
        got=got,
        ok=expectation.met_by(result),
        distinct_states=result.distinct_states,
        seconds=result.seconds or (time.perf_counter() - started),
        result=result,
    )


def disagreements(tlc_outcome: ModelOutcome, embedded_outcome: ModelOutcome) -> list[str]:
    """What TLC and the embedded checker answered differently for one model (empty: they agree)."""
    a, b = tlc_outcome.result, embedded_outcome.result
    if a is None or b is None:
        both_errors = tlc_outcome.got.startswith("error") == embedded_outcome.got.startswith("error")
        same = (a is None) == (b is None) and both_errors
        return [] if same else [f"verdict: TLC {tlc_outcome.got} / embedded {embedded_outcome.got}"]
    return result_differences(a, b)


def result_differences(tlc_result: CheckResult, embedded_result: CheckResult) -> list[str]:
    """What two results of one model differ in, of the verdict, distinct states, depth, the
    violated invariant or property and the counterexample's length (empty: they agree).
    ``tlc_result`` gives the counts to compare, unless TLC printed none."""
    from kvoffload.tla.tlc import violated_properties

    a, b = tlc_result, embedded_result
    fields = {"verdict": (a.result, b.result)}
    # TLC prints no statistics when an initial state breaks an invariant: nothing to compare.
    if a.states_generated or a.result in ("success", "error"):
        fields |= {"distinct states": (a.distinct_states, b.distinct_states), "depth": (a.depth, b.depth)}
    # TLC names every property the counterexample violates; the embedded checker the first.
    violated = b.violated if a.result in ("liveness failure", "safety failure") \
        and b.violated in violated_properties(a.violated or "") \
        else a.violated
    fields |= {
        "violated": (violated, b.violated),
        "trace length": (_states_in_trace(a), _states_in_trace(b)),
    }
    return [f"{name}: TLC {x} / embedded {y}" for name, (x, y) in fields.items() if x != y]


def _states_in_trace(result: CheckResult) -> int:
    """The states of a counterexample: TLC writes a stuttering ending as a step of its own, the
    embedded checker as a loop back to the last state."""
    from kvoffload.tla.tlc import STUTTERING_ACTION

    return sum(step.action != STUTTERING_ACTION for step in result.trace)


def _print_outcome(outcome: ModelOutcome, width: int, label: str = "") -> None:
    verdict = "ok" if outcome.ok else "UNEXPECTED"
    print(
        f"{outcome.model:<{width}}  {label}expected: {outcome.expected:<45} got: {outcome.got:<45} "
        f"{outcome.distinct_states:>8} states {outcome.seconds:8.2f}s  {verdict}",
        flush=True,
    )


def run_check_all(args: argparse.Namespace) -> int:
    """``kvoffload tla check-all``: one line per model; exit 0 only if every model met its
    expectation."""
    directory: Path = args.directory
    if not directory.is_dir():
        raise CommandError(f"{directory}: no such directory")
    configs = sorted(directory.glob("*.cfg"))
    if not configs:
        raise CommandError(f"{directory}: no .cfg models")
    if args.engine == BOTH:
        return _check_all_both(args, configs)
    engine, note = choose_engine(args.engine, args.jar)
    if note:
        print(f"kvoffload tla: {note}", file=sys.stderr)
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
