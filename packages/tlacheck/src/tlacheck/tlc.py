"""Run the TLC model checker (``tla2tools.jar``) by subprocess and read its result.

TLC is found from, in this order: an explicit jar path, the ``TLA2TOOLS_JAR`` environment variable,
then ``~/.cache/tlacheck/tla2tools.jar``; ``java`` from ``PATH`` (or ``$JAVA_HOME/bin``). The run
is ``java [JVM OPTIONS] [-DTLA-Library=DIRS] -cp JAR[:JARS] tlc2.TLC -config MODEL.cfg -dumpTrace json
TRACE -workers 1 ... SPEC.tla`` in the spec's directory, so modules named by ``EXTENDS``/``INSTANCE``
are found beside it, and in the library folders (:class:`TlcOptions`: the proof modules a spec that
``EXTENDS TLAPS`` needs, the community modules) and jars (``CommunityModules.jar``) given.

The outcome comes from TLC's exit code (see :mod:`tlacheck.result`); counts,
depth, the violated invariant and the counterexample come from TLC's standard output, and the
counterexample preferably from the ``-dumpTrace json`` file (TLC's ``CounterExample`` record
serialised by its ``Json`` module), falling back to the textual ``State N: <Action ...>`` blocks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlacheck.result import (
    EXIT_ERROR,
    EXIT_ERROR_CONFIG_PARSE,
    EXIT_ERROR_SPEC_PARSE,
    EXIT_ERROR_STATESPACE_TOO_LARGE,
    EXIT_ERROR_SYSTEM,
    EXIT_FAILURE_LIVENESS_EVAL,
    EXIT_FAILURE_SAFETY_EVAL,
    EXIT_FAILURE_SPEC_EVAL,
    EXIT_SUCCESS,
    EXIT_VIOLATION_ASSERT,
    EXIT_VIOLATION_ASSUMPTION,
    EXIT_VIOLATION_DEADLOCK,
    EXIT_VIOLATION_LIVENESS,
    EXIT_VIOLATION_SAFETY,
    CheckResult,
    Outcome,
    TraceStep,
)

JAR_ENV = "TLA2TOOLS_JAR"
JAR_NAME = "tla2tools.jar"
INITIAL_ACTION = "Initial predicate"
STUTTERING_ACTION = "Stuttering"

HOW_TO_GET_JAR = (
    "download tla2tools.jar from the TLA+ GitHub releases "
    "(https://github.com/tlaplus/tlaplus/releases) and put it at ~/.cache/tlacheck/tla2tools.jar "
    f"or set {JAR_ENV}=/path/to/tla2tools.jar (or use --engine embedded)"
)


LIBRARY_ENV = "TLACHECK_TLA_LIBRARY"
CLASS_PATH_ENV = "TLACHECK_TLC_CLASSPATH"
JVM_OPTIONS_ENV = "TLACHECK_TLC_JVM_OPTIONS"


@dataclass(frozen=True)
class TlcOptions:
    """What TLC's JVM gets besides the jar: options (``-Dtlc2.tool.impl.Tool.cdot=true``, as the TLA+
    examples' manifests record them per model), folders of modules (``-DTLA-Library``) and jars
    added to the class path."""

    jvm_options: tuple[str, ...] = ()
    library_paths: tuple[Path, ...] = ()
    class_path: tuple[Path, ...] = ()

    @classmethod
    def from_env(cls, jvm_options: Sequence[str] = (), library_paths: Sequence[str | os.PathLike[str]] = (),
                 class_path: Sequence[str | os.PathLike[str]] = ()) -> TlcOptions:
        """These, after those of ``$TLACHECK_TLC_JVM_OPTIONS`` (split on spaces),
        ``$TLACHECK_TLA_LIBRARY`` and ``$TLACHECK_TLC_CLASSPATH`` (both split on ``os.pathsep``).
        Paths are made absolute: TLC runs in the spec's directory."""

        def paths(env: str, given: Sequence[str | os.PathLike[str]]) -> tuple[Path, ...]:
            listed = [p for p in os.environ.get(env, "").split(os.pathsep) if p]
            return tuple(Path(p).expanduser().resolve() for p in [*listed, *given])

        return cls(tuple(os.environ.get(JVM_OPTIONS_ENV, "").split()) + tuple(jvm_options),
                   paths(LIBRARY_ENV, library_paths), paths(CLASS_PATH_ENV, class_path))


class TlcNotFound(RuntimeError):
    """TLC cannot run here: no ``tla2tools.jar`` or no ``java``. The message says how to fix it."""


def default_jar_path() -> Path:
    """Where ``tlacheck`` looks for the jar when neither a path nor ``TLA2TOOLS_JAR`` is given."""
    return Path.home() / ".cache" / "tlacheck" / JAR_NAME


def find_jar(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Return the ``tla2tools.jar`` to use: ``explicit`` > ``$TLA2TOOLS_JAR`` > the cache path.

    A path that was asked for (explicit or by the environment) but names no file is an error
    rather than silently skipped, so a typo does not quietly switch engines.
    Raises :class:`TlcNotFound` when no jar is found.
    """
    if explicit is not None:
        # Absolute: TLC runs in the spec's directory, where a relative path would mean another file.
        path = Path(explicit).expanduser().resolve()
        if not path.is_file():
            raise TlcNotFound(f"tla2tools.jar not found at {path} (given by --jar); {HOW_TO_GET_JAR}")
        return path
    from_env = os.environ.get(JAR_ENV)
    if from_env:
        path = Path(from_env).expanduser().resolve()
        if not path.is_file():
            raise TlcNotFound(f"{JAR_ENV}={from_env} names no file; {HOW_TO_GET_JAR}")
        return path
    cached = default_jar_path()
    if cached.is_file():
        return cached
    raise TlcNotFound(f"no tla2tools.jar ({where_jars_are_looked_for()}): {HOW_TO_GET_JAR}")


def where_jars_are_looked_for() -> str:
    """Where :func:`find_jar` looked when given no path, for a one-line message."""
    return f"looked at ${JAR_ENV} (unset) and {default_jar_path()} (missing)"


def find_java() -> str:
    """Return the ``java`` executable (``PATH``, then ``$JAVA_HOME/bin``); raise :class:`TlcNotFound`."""
    found = shutil.which("java")
    if found:
        return found
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise TlcNotFound("java not found: install a Java runtime (11 or later) to run TLC, or use --engine embedded")


def find_tlc(jar: str | os.PathLike[str] | None = None) -> tuple[str, Path]:
    """Return ``(java, jar)`` if TLC can run here, else raise :class:`TlcNotFound`."""
    found_jar = find_jar(jar)
    return find_java(), found_jar


def tlc_available(jar: str | os.PathLike[str] | None = None) -> bool:
    """True when both a jar and ``java`` are found."""
    try:
        find_tlc(jar)
    except TlcNotFound:
        return False
    return True


def build_command(
    java: str,
    jar: Path,
    spec: Path,
    config: Path,
    trace_file: Path,
    *,
    metadir: Path | None = None,
    workers: int = 1,
    check_deadlock: bool = True,
    extra_args: Sequence[str] = (),
    options: TlcOptions = TlcOptions(),
) -> list[str]:
    """The TLC command line. ``spec`` is passed by file name: TLC runs in the spec's directory."""
    folders = os.pathsep.join(str(p) for p in options.library_paths)
    library = [f"-DTLA-Library={folders}"] if folders else []
    command = [
        java,
        # TLC's documentation asks for the throughput collector; it is much faster with it.
        "-XX:+UseParallelGC",
        *options.jvm_options,
        *library,
        "-cp",
        os.pathsep.join([str(jar), *(str(p) for p in options.class_path)]),
        "tlc2.TLC",
        "-config",
        str(config),
        "-dumpTrace",
        "json",
        str(trace_file),
        "-workers",
        str(workers),
        # TLC would otherwise write a <Spec>_TTrace_<time>.tla beside the spec on every error.
        "-noGenerateSpecTE",
        # Liveness on the complete state space only: TLC otherwise also checks it on the states
        # found so far at its progress reports and stops at a violation there, with counts that
        # depend on timing (distinct states, depth) and so cannot be compared.
        "-lncheck",
        "final",
    ]
    if metadir is not None:
        # Keeps TLC's states/ fingerprint directory out of the source tree.
        command += ["-metadir", str(metadir)]
    if not check_deadlock:
        command.append("-deadlock")  # TLC's flag means "do not report deadlocks"
    command += list(extra_args)
    # A file name starting with '-' would reach TLC as an option.
    command.append(spec.name if not spec.name.startswith("-") else f".{os.sep}{spec.name}")
    return command


def run_tlc(
    spec: str | os.PathLike[str],
    config: str | os.PathLike[str] | None = None,
    *,
    jar: str | os.PathLike[str] | None = None,
    java: str | None = None,
    workers: int = 1,
    check_deadlock: bool = True,
    timeout: float | None = None,
    extra_args: Sequence[str] = (),
    options: TlcOptions | None = None,
) -> CheckResult:
    """Model-check ``spec`` with ``config`` (default: the ``.cfg`` beside the spec) using TLC;
    ``options`` default to :meth:`TlcOptions.from_env`.

    Raises :class:`TlcNotFound` when TLC cannot run, :class:`FileNotFoundError` for a missing
    spec or config. Every outcome of TLC itself (including parse errors) is a :class:`CheckResult`.
    """
    spec_path = Path(spec).resolve()
    config_path = Path(config).resolve() if config is not None else spec_path.with_suffix(".cfg")
    for path in (spec_path, config_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
    jar_path = find_jar(jar)
    java_exe = java if java is not None else find_java()
    with tempfile.TemporaryDirectory(prefix="tlacheck-tlc-") as tmp:
        trace_file = Path(tmp) / "trace.json"
        command = build_command(
            java_exe,
            jar_path,
            spec_path,
            config_path,
            trace_file,
            metadir=Path(tmp) / "states",
            workers=workers,
            check_deadlock=check_deadlock,
            extra_args=extra_args,
            options=TlcOptions.from_env() if options is None else options,
        )
        started = time.perf_counter()
        try:
            completed = subprocess.run(
                command,
                cwd=spec_path.parent,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError as error:
            raise TlcNotFound(f"cannot run {java_exe}: {error}") from error
        seconds = time.perf_counter() - started
        trace_json = trace_file.read_text() if trace_file.is_file() else None
    output = (completed.stdout or "") + (completed.stderr or "")
    result = parse_tlc_output(
        output,
        completed.returncode,
        trace_json=trace_json,
        properties=config_properties(config_path),
        invariants=config_invariants(config_path),
    )
    result.seconds = seconds
    result.spec = str(spec_path)
    result.config = str(config_path)
    return result


# --- reading TLC's output ---------------------------------------------------------------------

_EXIT_OUTCOMES: dict[int, Outcome] = {
    EXIT_SUCCESS: "success",
    EXIT_VIOLATION_DEADLOCK: "deadlock failure",
    EXIT_VIOLATION_SAFETY: "safety failure",
    EXIT_VIOLATION_LIVENESS: "liveness failure",
    # A failed Assert is a reachable bad state, like a broken invariant.
    EXIT_VIOLATION_ASSERT: "safety failure",
    EXIT_VIOLATION_ASSUMPTION: "error",
    EXIT_FAILURE_SPEC_EVAL: "error",
    EXIT_FAILURE_SAFETY_EVAL: "error",
    EXIT_FAILURE_LIVENESS_EVAL: "error",
    EXIT_ERROR_SPEC_PARSE: "error",
    EXIT_ERROR_CONFIG_PARSE: "error",
    EXIT_ERROR_STATESPACE_TOO_LARGE: "error",
    EXIT_ERROR_SYSTEM: "error",
    EXIT_ERROR: "error",
}

_STATS_RE = re.compile(r"([\d,]+) states generated, ([\d,]+) distinct states found, ([\d,]+) states left on queue")
_DEPTH_RE = re.compile(r"The depth of the complete state graph search is ([\d,]+)")
_INVARIANT_RE = re.compile(r"^Error: Invariant (\S+) is violated", re.MULTILINE)
_ACTION_PROPERTY_RE = re.compile(r"^Error: Action property (.+?) is violated", re.MULTILINE)
_TEMPORAL_RE = re.compile(r"^Error: Temporal propert(?:y|ies) (?:(.+?) )?(?:was|were) violated", re.MULTILINE)
_DEADLOCK_RE = re.compile(r"^Error: Deadlock reached", re.MULTILINE)
_ASSUMPTION_RE = re.compile(r"^Error: Assumption (.+?) is false", re.MULTILINE)
_STATE_RE = re.compile(r"^State (\d+):\s*(?:<(.*)>|(Stuttering))\s*$")
# TLC prints a violating initial state without a "State 1:" header (and no statistics after it).
_INITIAL_VIOLATION_RE = re.compile(r"^Error: Invariant \S+ is violated by the initial state:\s*$")
_BACK_TO_RE = re.compile(r"^Back to state (\d+)(?::\s*<(.*)>)?\s*$")
_FATAL_PARSE_RE = re.compile(r"Fatal errors while parsing TLA\+ spec in file (\S+)")
_ACTION_NAME_RE = re.compile(r"^(.*?)\s+line \d+, col(?:umn)? \d+")
_ACTION_ARGUMENTS_RE = re.compile(r"^([A-Za-z_][\w!]*)\(.*\)$")
# Tool-mode message markers, in case extra_args asked for -tool.
_TOOL_MARKER_RE = re.compile(r"^@!@!@(?:STARTMSG|ENDMSG) \d+(?::\d+)? @!@!@$")


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _outcome_from_text(text: str) -> Outcome:
    if _INVARIANT_RE.search(text) or _ACTION_PROPERTY_RE.search(text):
        return "safety failure"
    if _TEMPORAL_RE.search(text):
        return "liveness failure"
    if _DEADLOCK_RE.search(text):
        return "deadlock failure"
    if "Model checking completed. No error has been found." in text:
        return "success"
    return "error"


def config_properties(config: Path) -> list[str]:
    """Names listed under ``PROPERTY``/``PROPERTIES`` in a TLC config (TLC does not name the
    temporal property it found violated; with a single one we can)."""
    return _config_names(config, ("PROPERTY", "PROPERTIES"))


def config_invariants(config: Path) -> list[str]:
    """Names listed under ``INVARIANT``/``INVARIANTS`` in a TLC config."""
    return _config_names(config, ("INVARIANT", "INVARIANTS"))


def _config_names(config: Path, sections: tuple[str, ...]) -> list[str]:
    try:
        text = config.read_text()
    except OSError:
        return []
    text = re.sub(r"\(\*.*?\*\)", " ", text, flags=re.DOTALL)
    text = re.sub(r"\\\*.*", "", text)
    keywords = {
        "CONSTANT", "CONSTANTS", "INIT", "NEXT", "SPECIFICATION", "INVARIANT", "INVARIANTS",
        "PROPERTY", "PROPERTIES", "SYMMETRY", "VIEW", "CONSTRAINT", "CONSTRAINTS",
        "ACTION_CONSTRAINT", "ACTION_CONSTRAINTS", "CHECK_DEADLOCK", "POSTCONDITION", "ALIAS",
    }  # fmt: skip
    names: list[str] = []
    section = None
    for token in text.split():
        if token in keywords:
            section = token
        elif section in sections:
            names.append(token)
    return names


def violated_properties(named: str) -> list[str]:
    """The names in TLC's ``P``, ``P and Q``, ``P, Q and R`` (or a result's ``P, Q``)."""
    return [name for name in re.split(r",\s*|\s+and\s+", named.strip()) if name]


def _error_message(text: str, exit_code: int) -> str:
    """A short, one-paragraph description of what TLC reported as an error."""
    lines = [line.rstrip() for line in text.splitlines() if not _TOOL_MARKER_RE.match(line.strip())]
    if exit_code == EXIT_ERROR_SPEC_PARSE or "***Parse Error***" in text or "Semantic errors:" in text:
        return _sany_message(lines)
    for index, line in enumerate(lines):
        if line.startswith("Error: ") and not line.startswith("Error: The behavior up to this point"):
            block = [line[len("Error: ") :]]
            for follow in lines[index + 1 :]:
                # TLC wraps long messages mid-sentence; a finished sentence ends the message.
                if block[-1].endswith(".") or not follow.strip():
                    break
                if follow.startswith(("Error: ", "State ", "Finished in", "Starting...")):
                    break
                block.append(follow.strip())
            return " ".join(block)
    tail = [line for line in lines if line.strip()]
    return tail[-1] if tail else f"TLC exited with status {exit_code}"


def _sany_message(lines: list[str]) -> str:
    """Pull the first parse or semantic error (with its location) out of SANY's report."""
    for index, line in enumerate(lines):
        if line.strip() == "***Parse Error***":
            detail = []
            for follow in lines[index + 1 :]:
                if not follow.strip() or follow.startswith("Residual stack trace follows"):
                    break
                detail.append(follow.strip())
            fatal = _FATAL_PARSE_RE.search("\n".join(lines))
            module = fatal.group(1) if fatal else None
            prefix = f"parse error in module {module}: " if module else "parse error: "
            return prefix + " ".join(detail)
        if line.strip().startswith("*** Errors:"):
            detail = [follow.strip() for follow in lines[index + 1 :] if follow.strip()]
            # SANY prints the location line, a blank line, then the message.
            if len(detail) >= 2 and detail[0].startswith("line "):
                return f"semantic error at {detail[0]}: {detail[1]}"
            # "In module M" and then what is wrong in it ("Cannot find source file for module TLAPS").
            if len(detail) >= 2 and detail[0].startswith("In module "):
                missing = ""
                if "Cannot find source" in detail[1]:
                    missing = " (give the folder of that module: --tlc-library DIR)"
                return f"semantic error in module {detail[0].removeprefix('In module ')}: {detail[1]}{missing}"
            return "semantic error: " + (detail[0] if detail else "")
    for line in lines:
        if "Could not parse module" in line or "Parsing or semantic analysis failed" in line:
            return line.strip()
    return "TLC could not parse the specification"


def parse_text_trace(text: str) -> tuple[list[TraceStep], int | None, str | None]:
    """Parse TLC's textual counterexample.

    Returns ``(steps, loop_back_to, loop_action)``: ``loop_back_to`` is the 0-based index of the
    state a liveness lasso returns to (``Back to state N``), or the last index for a
    ``Stuttering`` ending (which is kept as a step of its own, as TLC numbers it); the action that
    closes a ``Back to state`` loop is returned as ``loop_action``.
    """
    steps: list[TraceStep] = []
    loop_back_to: int | None = None
    loop_action: str | None = None
    current: dict[str, str] | None = None
    last_var: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if _TOOL_MARKER_RE.match(line.strip()):
            continue
        header = _STATE_RE.match(line)
        if header:
            if header.group(3):  # stuttering: the previous state repeats forever
                previous = dict(steps[-1].state) if steps else {}
                steps.append(TraceStep(action=STUTTERING_ACTION, state=previous))
                loop_back_to = len(steps) - 1
                current = None
            else:
                current = {}
                steps.append(TraceStep(action=_action_name(header.group(2)), state=current))
            last_var = None
            continue
        if _INITIAL_VIOLATION_RE.match(line):
            current = {}
            steps.append(TraceStep(action=INITIAL_ACTION, state=current))
            last_var = None
            continue
        back = _BACK_TO_RE.match(line)
        if back:
            loop_back_to = int(back.group(1)) - 1
            loop_action = _action_name(back.group(2)) if back.group(2) else None
            current = None
            continue
        if current is None:
            continue
        if not line.strip():
            current = None  # a blank line ends a state
            continue
        stripped = line.strip()
        body = stripped[2:].strip() if stripped.startswith("/\\") else None
        if body is None and not current and " = " in stripped:
            body = stripped  # a spec with one variable prints "x = 1" without "/\"
        if body is not None and " = " in body:
            name, value = body.split(" = ", 1)
            last_var = name.strip()
            current[last_var] = value.strip()
        elif last_var is not None:
            current[last_var] += " " + stripped  # continuation of a multi-line value
    return steps, loop_back_to, loop_action


def _action_name(label: str) -> str:
    """``Admit line 120, col 5 to line 140, col 3 of module KVOffload`` -> ``Admit``; TLC from 2026 on
    prints the action's arguments too (``Admit(r1) line ...``), which the embedded checker's traces
    do not: the name is the part before them."""
    label = label.strip()
    if label == INITIAL_ACTION:
        return label
    match = _ACTION_NAME_RE.match(label)
    name = match.group(1) if match else label
    arguments = _ACTION_ARGUMENTS_RE.match(name)
    return arguments.group(1) if arguments else name


def tla_value_from_json(value: Any) -> str:
    """Render a value of TLC's JSON serialisation as TLA+ text.

    The serialisation is lossy (sets and sequences are both arrays, strings and model values
    both JSON strings), so this is for display: arrays print as sequences ``<<...>>``.
    """
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "<<" + ", ".join(tla_value_from_json(item) for item in value) + ">>"
    if isinstance(value, dict):
        return "[" + ", ".join(f"{key} |-> {tla_value_from_json(item)}" for key, item in value.items()) + "]"
    return str(value)


def parse_dump_trace_json(data: Any) -> tuple[list[TraceStep], int | None]:
    """Parse the file written by ``-dumpTrace json``: TLC's ``CounterExample`` record,
    ``[state |-> {<<i, s>>, ...}, action |-> {<<<<i, s>>, [name |-> ..., ...], <<j, t>>>>, ...}]``.

    Returns ``(steps, loop_back_to)``; ``([], None)`` when ``data`` holds no trace.
    """
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], Mapping):
        data = data[0]  # JsonSerialize wraps a single value in an array
    if not isinstance(data, Mapping):
        return [], None
    raw_states = data.get("state") or []
    states: dict[int, dict[str, str]] = {}
    for entry in raw_states:
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], Mapping):
            states[int(entry[0])] = {name: tla_value_from_json(v) for name, v in entry[1].items()}
    if not states:
        return [], None
    actions: dict[int, str] = {}
    loop_back_to: int | None = None
    stutter = False
    for entry in data.get("action") or []:
        if not (isinstance(entry, list) and len(entry) == 3):
            continue
        source, label, target = entry
        source_index, target_index = int(source[0]), int(target[0])
        name = str(label.get("name", "")) if isinstance(label, Mapping) else str(label)
        if target_index <= source_index:  # the edge closing a lasso
            if target_index == source_index:
                stutter = True
            else:
                loop_back_to = target_index - 1
            continue
        actions[target_index] = name
    ordered = sorted(states)
    steps = [
        TraceStep(action=INITIAL_ACTION if i == ordered[0] else actions.get(i, "Next"), state=states[i])
        for i in ordered
    ]
    if stutter:
        steps.append(TraceStep(action=STUTTERING_ACTION, state=dict(steps[-1].state)))
        loop_back_to = len(steps) - 1
    return steps, loop_back_to


def parse_tlc_output(
    text: str,
    exit_code: int,
    *,
    trace_json: str | None = None,
    properties: Sequence[str] = (),
    invariants: Sequence[str] | None = None,
) -> CheckResult:
    """Turn TLC's output and exit code (and the ``-dumpTrace json`` file, if any) into a
    :class:`CheckResult`. ``properties`` are the config's temporal properties, used to name the
    violated one when there is only one; ``invariants`` its invariants, which tell a property
    ``[]P`` that TLC checked as an invariant from an invariant."""
    result_kind = _EXIT_OUTCOMES.get(exit_code)
    if result_kind is None:
        # Old TLC versions exited 1 (or even 0) on violations: read the verdict from the text.
        result_kind = _outcome_from_text(text)
    elif exit_code == EXIT_VIOLATION_LIVENESS and _ACTION_PROPERTY_RE.search(text):
        # TLC exits 13 on a broken [][A]_v as on any temporal property; it is a safety property.
        result_kind = "safety failure"
    result = CheckResult(engine="tlc", result=result_kind, exit_code=exit_code)
    stats = _STATS_RE.findall(text)
    if stats:
        generated, distinct, left = stats[-1]
        result.states_generated = _int(generated)
        result.distinct_states = _int(distinct)
        result.states_left_on_queue = _int(left)
    depths = _DEPTH_RE.findall(text)
    if depths:
        result.depth = _int(depths[-1])

    if (match := _INVARIANT_RE.search(text)) or (match := _ACTION_PROPERTY_RE.search(text)):
        result.violated = match.group(1)
        if (match.re is _INVARIANT_RE and invariants is not None and properties
                and match.group(1) not in invariants and match.group(1) not in properties):
            # A PROPERTY []P: TLC checks P as an invariant and names it by its formula (by the
            # property's name where P is no plain name).
            result.violated = ", ".join(properties)
    elif (match := _TEMPORAL_RE.search(text)) is not None:
        # TLC from 2026 on names the properties the behaviour violates ("P and Q", "P, Q and R").
        result.violated = (", ".join(violated_properties(match.group(1))) if match.group(1)
                           else properties[0] if len(properties) == 1 else "temporal properties")
    elif _DEADLOCK_RE.search(text):
        result.violated = "Deadlock"  # as the embedded checker names it
    elif (match := _ASSUMPTION_RE.search(text)) is not None:
        result.violated = f"assumption {match.group(1)}"

    steps: list[TraceStep] = []
    loop_back_to: int | None = None
    loop_action: str | None = None
    if trace_json:
        try:
            steps, loop_back_to = parse_dump_trace_json(json.loads(trace_json))
        except (ValueError, TypeError, KeyError, IndexError):
            steps, loop_back_to = [], None  # a truncated dump: the text still has the trace
    if not steps:
        steps, loop_back_to, loop_action = parse_text_trace(text)
    result.trace = steps
    result.loop_back_to = loop_back_to

    if result.result == "success":
        result.message = "Model checking completed. No error has been found."
    elif result.result == "error":
        result.message = _error_message(text, exit_code)
    else:
        result.message = _error_message(text, exit_code)
        if loop_back_to is not None and loop_action:
            result.message += f" (the behavior loops back to state {loop_back_to + 1} by {loop_action})"
    return result
