"""The TLC runner: output parsing (on fixtures written from TLC's documented format), jar
discovery, the command line, and, when a tla2tools.jar and java are present, real TLC runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tlacheck import tlc
from tlacheck.result import (
    EXIT_ERROR_CONFIG_PARSE,
    EXIT_ERROR_SPEC_PARSE,
    EXIT_SUCCESS,
    EXIT_VIOLATION_DEADLOCK,
    EXIT_VIOLATION_LIVENESS,
    EXIT_VIOLATION_SAFETY,
)
from tlc_fakes import FIXTURES, REAL_JAR, SHARED_TLC, FakeTlc, fixture, requires_tlc, touch_jar

REPO = Path(__file__).resolve().parents[3]
TLA_DIR = REPO / "tla"


@pytest.fixture(autouse=True)
def _no_extra_class_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' commands have the jar alone on the class path, whatever the caller's
    environment adds (tests that want more jars pass them)."""
    monkeypatch.delenv(tlc.CLASS_PATH_ENV, raising=False)


# --- parsing ----------------------------------------------------------------------------------


def test_success() -> None:
    result = tlc.parse_tlc_output(fixture("success.out"), EXIT_SUCCESS)
    assert result.engine == "tlc"
    assert result.result == "success"
    assert result.exit_code == EXIT_SUCCESS
    # The final statistics line, not the earlier progress lines.
    assert result.states_generated == 113763
    assert result.distinct_states == 23600
    assert result.states_left_on_queue == 0
    assert result.depth == 25
    assert result.violated is None
    assert result.trace == []
    assert result.loop_back_to is None
    assert "No error has been found" in result.message


# The actions of fixtures/tlc/safety.out's counterexample (KVOffload_EagerSignal.cfg), in order.
SAFETY_ACTIONS = ["Initial predicate", "Admit", "ComputeChunk", "Finish", "BuildMeta"]


def test_safety_from_text() -> None:
    result = tlc.parse_tlc_output(fixture("safety.out"), EXIT_VIOLATION_SAFETY)
    assert result.result == "safety failure"
    assert result.violated == "NoManagerCallAfterSignal"
    assert (result.states_generated, result.distinct_states, result.states_left_on_queue) == (299, 124, 31)
    assert result.depth == 5
    assert [step.action for step in result.trace] == SAFETY_ACTIONS
    first = result.trace[0].state
    assert list(first) == [
        "sched",
        "computed",
        "storeBuilt",
        "mgr",
        "signals",
        "cpu",
        "jobs",
        "afterSignal",
    ]
    assert first["sched"] == '(r1 :> "waiting" @@ r2 :> "waiting")'
    assert first["cpu"] == "{}"
    assert result.trace[3].state["mgr"] == '(r1 :> "finished" @@ r2 :> "unknown")'
    assert result.trace[4].state["afterSignal"] == '{[req |-> r1, call |-> "prepare_store"]}'
    assert result.loop_back_to is None
    assert "NoManagerCallAfterSignal" in result.message


def test_safety_prefers_dump_trace_json() -> None:
    result = tlc.parse_tlc_output(fixture("safety.out"), EXIT_VIOLATION_SAFETY, trace_json=fixture("safety.json"))
    # The JSON action set is unordered (TLC normalises sets); the trace is in state order.
    assert [step.action for step in result.trace] == SAFETY_ACTIONS
    assert result.trace[0].state["sched"] == '[r1 |-> "waiting", r2 |-> "waiting"]'
    assert result.trace[3].state["signals"] == "[r1 |-> 1, r2 |-> 0]"
    assert result.trace[4].state["afterSignal"] == '<<[req |-> "r1", call |-> "prepare_store"]>>'
    assert result.trace[0].state["cpu"] == "<<>>"  # JSON cannot tell a set from a sequence
    assert result.loop_back_to is None


def test_multi_line_values_and_one_variable_specs() -> None:
    text = (
        "Error: Invariant NoEvictWhileInUse is violated.\n"
        "Error: The behavior up to this point is:\n"
        "State 1: <Initial predicate>\n"
        "/\\ cpu = {}\n"
        '/\\ jobs = { [req |-> r1, kind |-> "store", chunk |-> 1],\n'
        '  [req |-> r1, kind |-> "store", chunk |-> 2] }\n'
        "\n"
        "State 2: <JobDone line 3, col 5 to line 9, col 40 of module KVOffload>\n"
        "/\\ cpu = {[req |-> r1, chunk |-> 1, ready |-> TRUE]}\n"
        '/\\ jobs = {[req |-> r1, kind |-> "store", chunk |-> 2]}\n'
        "\n"
    )
    steps, loop, loop_action = tlc.parse_text_trace(text)
    assert [step.action for step in steps] == ["Initial predicate", "JobDone"]
    assert steps[0].state["jobs"] == (
        '{ [req |-> r1, kind |-> "store", chunk |-> 1], [req |-> r1, kind |-> "store", chunk |-> 2] }'
    )
    assert steps[1].state["cpu"] == "{[req |-> r1, chunk |-> 1, ready |-> TRUE]}"
    assert (loop, loop_action) == (None, None)


def test_dump_trace_json_wrapped_in_array_and_garbage() -> None:
    data = json.loads(fixture("safety.json"))
    steps, loop = tlc.parse_dump_trace_json([data])
    assert len(steps) == 5 and loop is None
    assert tlc.parse_dump_trace_json({"nothing": 1}) == ([], None)
    # A truncated dump falls back to the text.
    result = tlc.parse_tlc_output(fixture("safety.out"), EXIT_VIOLATION_SAFETY, trace_json="{ broken")
    assert len(result.trace) == 5
    assert result.trace[0].state["sched"] == '(r1 :> "waiting" @@ r2 :> "waiting")'


# The lasso of the liveness fixtures (text and -dumpTrace json describe the same behaviour).
LIVENESS_ACTIONS = ["Initial predicate", "Admit", "Abort", "Admit", "Preempt", "Readmit"]


def test_liveness_lasso_from_text() -> None:
    result = tlc.parse_tlc_output(fixture("liveness.out"), EXIT_VIOLATION_LIVENESS, properties=["EventuallyCleaned"])
    assert result.result == "liveness failure"
    assert result.exit_code == EXIT_VIOLATION_LIVENESS
    assert result.violated == "EventuallyCleaned"
    assert [step.action for step in result.trace] == LIVENESS_ACTIONS
    # "Back to state 4" is 1-based in TLC; loop_back_to is 0-based.
    assert result.loop_back_to == 3
    assert "loops back to state 4 by Admit" in result.message
    assert result.trace[5].state["sched"] == '(r1 :> "finished_pending_store" @@ r2 :> "waiting")'
    assert result.distinct_states == 23600


def test_liveness_lasso_from_json() -> None:
    result = tlc.parse_tlc_output(fixture("liveness.out"), EXIT_VIOLATION_LIVENESS, trace_json=fixture("liveness.json"))
    assert [step.action for step in result.trace] == LIVENESS_ACTIONS
    assert result.loop_back_to == 3
    # Without a single named property in the config, TLC's own words are used.
    assert result.violated == "temporal properties"


def test_liveness_stuttering() -> None:
    result = tlc.parse_tlc_output(fixture("liveness_stuttering.out"), EXIT_VIOLATION_LIVENESS)
    assert result.result == "liveness failure"
    assert [step.action for step in result.trace] == ["Initial predicate", "Abort", "Stuttering"]
    assert result.trace[2].state == result.trace[1].state
    assert result.loop_back_to == 2


def test_deadlock_single_variable_states() -> None:
    result = tlc.parse_tlc_output(fixture("deadlock.out"), EXIT_VIOLATION_DEADLOCK)
    assert result.result == "deadlock failure"
    assert result.violated == "Deadlock"
    assert [step.action for step in result.trace] == ["Initial predicate", "Incr", "Incr"]
    assert [step.state for step in result.trace] == [{"x": "0"}, {"x": "1"}, {"x": "2"}]
    assert (result.states_generated, result.distinct_states, result.depth) == (4, 3, 3)


def test_parse_error() -> None:
    result = tlc.parse_tlc_output(fixture("parse_error.out"), EXIT_ERROR_SPEC_PARSE)
    assert result.result == "error"
    assert result.exit_code == EXIT_ERROR_SPEC_PARSE
    assert result.trace == []
    assert result.message.startswith("parse error in module Broken:")
    assert "line 12, column 1" in result.message


def test_semantic_error() -> None:
    result = tlc.parse_tlc_output(fixture("semantic_error.out"), EXIT_ERROR_SPEC_PARSE)
    assert result.result == "error"
    assert result.message == (
        "semantic error at line 14, col 12 to line 14, col 18 of module Broken: Unknown operator: `Missing'."
    )


def test_config_error() -> None:
    result = tlc.parse_tlc_output(fixture("config_error.out"), EXIT_ERROR_CONFIG_PARSE)
    assert result.result == "error"
    assert result.exit_code == EXIT_ERROR_CONFIG_PARSE
    assert result.message == (
        "The invariant NoSuchInvariant specified in the configuration file is not defined in the specification."
    )


def test_unknown_exit_code_reads_the_verdict_from_the_text() -> None:
    # Old TLC versions exit 1 on any violation.
    assert tlc.parse_tlc_output(fixture("safety.out"), 1).result == "safety failure"
    assert tlc.parse_tlc_output(fixture("liveness.out"), 1).result == "liveness failure"
    assert tlc.parse_tlc_output(fixture("deadlock.out"), 1).result == "deadlock failure"
    assert tlc.parse_tlc_output(fixture("success.out"), 1).result == "success"
    assert tlc.parse_tlc_output("garbage", 1).result == "error"


def test_config_properties() -> None:
    assert tlc.config_properties(TLA_DIR / "KVOffload.cfg") == ["EventuallyCleaned"]
    assert tlc.config_properties(TLA_DIR / "KVOffload_EagerSignal.cfg") == []
    assert tlc.config_properties(FIXTURES / "missing.cfg") == []


def test_tla_value_from_json() -> None:
    value = {"a": [1, True, "x"], "b": {}}
    assert tlc.tla_value_from_json(value) == '[a |-> <<1, TRUE, "x">>, b |-> []]'


# --- finding TLC ------------------------------------------------------------------------------


def test_jar_discovery_order(tmp_path: Path, no_tlc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached = touch_jar(no_tlc)
    assert tlc.default_jar_path() == cached
    assert tlc.find_jar() == cached
    from_env = touch_jar(tmp_path / "env")
    monkeypatch.setenv(tlc.JAR_ENV, str(from_env))
    assert tlc.find_jar() == from_env
    explicit = touch_jar(tmp_path / "explicit")
    assert tlc.find_jar(explicit) == explicit
    assert tlc.find_jar(str(explicit)) == explicit


def test_missing_jar_message(no_tlc: Path) -> None:
    with pytest.raises(tlc.TlcNotFound) as info:
        tlc.find_jar()
    message = str(info.value)
    assert "tla2tools.jar" in message
    assert "github.com/tlaplus/tlaplus/releases" in message
    assert "~/.cache/tlacheck/tla2tools.jar" in message
    assert "TLA2TOOLS_JAR" in message
    assert not tlc.tlc_available()


def test_asked_for_jar_that_is_missing_is_an_error(
    tmp_path: Path, no_tlc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    touch_jar(no_tlc)
    with pytest.raises(tlc.TlcNotFound, match="given by --jar"):
        tlc.find_jar(tmp_path / "nope.jar")
    monkeypatch.setenv(tlc.JAR_ENV, str(tmp_path / "nope.jar"))
    with pytest.raises(tlc.TlcNotFound, match=r"TLA2TOOLS_JAR=.*names no file"):
        tlc.find_jar()


def test_missing_java(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tlc.shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(tlc.TlcNotFound, match="java not found"):
        tlc.find_java()


# --- running TLC (subprocess replaced) --------------------------------------------------------


def test_run_tlc_command_line_and_result(fake_jar: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTlc(fixture("safety.out"), EXIT_VIOLATION_SAFETY, trace_json=fixture("safety.json"))
    monkeypatch.setattr(tlc.subprocess, "run", fake)
    result = tlc.run_tlc(TLA_DIR / "KVOffload.tla", TLA_DIR / "KVOffload_EagerSignal.cfg", java="/usr/bin/java")
    command, kwargs = fake.calls[0]
    assert command[0] == "/usr/bin/java"
    assert command[command.index("-cp") + 1] == str(fake_jar)
    assert command[command.index("-cp") + 2] == "tlc2.TLC"
    assert command[command.index("-config") + 1] == str((TLA_DIR / "KVOffload_EagerSignal.cfg").resolve())
    assert command[command.index("-dumpTrace") + 1] == "json"
    assert command[command.index("-workers") + 1] == "1"
    assert "-metadir" in command
    assert "-deadlock" not in command
    assert command[-1] == "KVOffload.tla"
    assert kwargs["cwd"] == TLA_DIR.resolve()
    assert result.engine == "tlc"
    assert result.result == "safety failure"
    assert result.exit_code == EXIT_VIOLATION_SAFETY
    assert result.violated == "NoManagerCallAfterSignal"
    assert result.trace[3].action == "Finish"
    assert result.trace[3].state["sched"] == '[r1 |-> "signaled", r2 |-> "waiting"]'  # from the JSON
    assert result.spec == str((TLA_DIR / "KVOffload.tla").resolve())
    assert result.config.endswith("KVOffload_EagerSignal.cfg")
    assert result.seconds >= 0


def test_run_tlc_defaults_and_options(fake_jar: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTlc(fixture("liveness.out"), EXIT_VIOLATION_LIVENESS)
    monkeypatch.setattr(tlc.subprocess, "run", fake)
    monkeypatch.setattr(tlc, "find_java", lambda: "java")
    result = tlc.run_tlc(TLA_DIR / "KVOffload.tla", check_deadlock=False, workers=4)
    command, _ = fake.calls[0]
    assert command[command.index("-config") + 1] == str((TLA_DIR / "KVOffload.cfg").resolve())
    assert command[command.index("-workers") + 1] == "4"
    assert "-deadlock" in command
    # The cfg names a single temporal property, so the violation is named after it.
    assert result.violated == "EventuallyCleaned"
    assert result.loop_back_to == 3


def test_run_tlc_missing_inputs(fake_jar: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        tlc.run_tlc(tmp_path / "Nope.tla")
    spec = tmp_path / "Lonely.tla"
    spec.write_text("---- MODULE Lonely ----\n====\n")
    with pytest.raises(FileNotFoundError, match=r"Lonely\.cfg"):
        tlc.run_tlc(spec)


def test_run_tlc_without_jar(no_tlc: Path) -> None:
    with pytest.raises(tlc.TlcNotFound, match="TLA2TOOLS_JAR"):
        tlc.run_tlc(TLA_DIR / "KVOffload.tla")


# --- real TLC ---------------------------------------------------------------------------------



@requires_tlc
def test_real_tlc_deadlock(tmp_path: Path) -> None:
    for name in ("Counter.tla", "Counter.cfg"):
        (tmp_path / name).write_text(fixture(name))
    result = tlc.run_tlc(tmp_path / "Counter.tla", jar=REAL_JAR, timeout=300)
    assert result.result == "deadlock failure", result.message
    assert result.exit_code == EXIT_VIOLATION_DEADLOCK
    assert [step.state.get("x") for step in result.trace] == ["0", "1", "2"]
    assert result.distinct_states == 3
    # TLC's metadata went to a temporary directory, not beside the spec.
    assert not (tmp_path / "states").exists()


@requires_tlc
@pytest.mark.slow
def test_real_tlc_project_models() -> None:
    fixed = tlc.run_tlc(TLA_DIR / "KVOffload.tla", TLA_DIR / "KVOffload.cfg", jar=REAL_JAR, timeout=600)
    assert fixed.result == "success", fixed.message
    eager = tlc.run_tlc(TLA_DIR / "KVOffload.tla", TLA_DIR / "KVOffload_EagerSignal.cfg", jar=REAL_JAR, timeout=600)
    assert eager.result == "safety failure"
    assert eager.violated == "NoManagerCallAfterSignal"
    assert [step.action for step in eager.trace][-2:] == ["Finish", "BuildMeta"]


@requires_tlc
def test_real_tlc_finds_proof_and_community_modules_in_the_folders_and_jars_given(tmp_path: Path) -> None:
    (tmp_path / "Proved.tla").write_text(
        "---- MODULE Proved ----\nEXTENDS Naturals, TLAPS, Functions\nVARIABLE x\n"
        "Init == x = 0\nNext == x < 2 /\\ x' = x + 1\nInv == x \\in Range([i \\in 0..2 |-> i])\n====\n")
    (tmp_path / "Proved.cfg").write_text("INIT Init\nNEXT Next\nINVARIANT Inv\n")
    bare = tlc.run_tlc(tmp_path / "Proved.tla", jar=REAL_JAR, check_deadlock=False, timeout=300,
                       options=tlc.TlcOptions())
    assert bare.result == "error" and "TLAPS" in bare.message
    options = tlc.TlcOptions(library_paths=(SHARED_TLC / "tlapm-library", SHARED_TLC / "community-modules"),
                             class_path=(SHARED_TLC / "CommunityModules.jar",))
    found = tlc.run_tlc(tmp_path / "Proved.tla", jar=REAL_JAR, check_deadlock=False, timeout=300, options=options)
    assert found.result == "success", found.message
    assert found.distinct_states == 3


def test_tlc_options_go_before_the_class_and_come_from_the_environment_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tlc.JVM_OPTIONS_ENV, "-Dtlc2.tool.impl.Tool.cdot=true")
    monkeypatch.setenv(tlc.LIBRARY_ENV, os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]))
    monkeypatch.delenv(tlc.CLASS_PATH_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    options = tlc.TlcOptions.from_env(["-Xss4m"], [], ["extra.jar"])
    assert options.jvm_options == ("-Dtlc2.tool.impl.Tool.cdot=true", "-Xss4m")
    assert options.library_paths == (tmp_path / "a", tmp_path / "b")
    assert options.class_path == (tmp_path / "extra.jar",)  # made absolute: TLC runs elsewhere
    command = tlc.build_command("java", tmp_path / "t.jar", tmp_path / "Spec.tla", tmp_path / "a.cfg",
                                tmp_path / "trace.json", options=options)
    cls = command.index("tlc2.TLC")
    assert command[cls - 1] == os.pathsep.join([str(tmp_path / "t.jar"), str(tmp_path / "extra.jar")])
    assert "-Dtlc2.tool.impl.Tool.cdot=true" in command[:cls] and "-Xss4m" in command[:cls]
    assert f"-DTLA-Library={tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}" in command[:cls]
    # Liveness on the complete state space only: its counts then do not depend on timing.
    assert command[command.index("-lncheck") + 1] == "final"
    assert not any(arg.startswith("-DTLA-Library") for arg in tlc.build_command(
        "java", tmp_path / "t.jar", tmp_path / "Spec.tla", tmp_path / "a.cfg", tmp_path / "trace.json"))


def test_an_action_printed_with_its_arguments_is_named_without_them() -> None:
    text = ("State 1: <Initial predicate>\nx = 0\n\n"
            "State 2: <Admit(r1) line 155, col 5 to line 168, col 55 of module KVOffload>\nx = 1\n\n"
            "State 3: <Step line 3, col 1 to line 4, col 2 of module KVOffload>\nx = 2\n")
    steps, _, _ = tlc.parse_text_trace(text)
    assert [step.action for step in steps] == ["Initial predicate", "Admit", "Step"]


def test_run_tlc_through_a_real_subprocess(tmp_path: Path, fake_jar: Path) -> None:
    """The whole subprocess path with a stand-in ``java`` script: arguments, working directory,
    the -dumpTrace file and the exit code."""
    java = tmp_path / "java"
    log = tmp_path / "args.txt"
    java.write_text(
        "#!/bin/sh\n"
        f'pwd > "{log}"\n'
        f'printf "%s\\n" "$@" >> "{log}"\n'
        'while [ "$#" -gt 0 ]; do\n'
        '  if [ "$1" = "-dumpTrace" ]; then cp "' + str(FIXTURES / "safety.json") + '" "$3"; fi\n'
        "  shift\n"
        "done\n"
        f'cat "{FIXTURES / "safety.out"}"\n'
        "exit 12\n"
    )
    java.chmod(0o755)
    result = tlc.run_tlc(TLA_DIR / "KVOffload.tla", TLA_DIR / "KVOffload_EagerSignal.cfg", java=str(java))
    cwd, *args = log.read_text().splitlines()
    assert Path(cwd) == TLA_DIR.resolve()
    assert args[args.index("-cp") + 1 :][:2] == [str(fake_jar), "tlc2.TLC"]
    assert args[-1] == "KVOffload.tla"
    assert result.exit_code == EXIT_VIOLATION_SAFETY
    assert result.violated == "NoManagerCallAfterSignal"
    assert result.trace[0].state["sched"] == '[r1 |-> "waiting", r2 |-> "waiting"]'  # read from the JSON
    # The temporary directory with the trace and TLC's metadata is gone.
    assert not Path(args[args.index("-dumpTrace") + 2]).exists()


def test_relative_jar_is_resolved_before_tlc_changes_directory(
    tmp_path: Path, no_tlc: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = touch_jar(tmp_path / "tools")
    relative = str(jar.relative_to(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert tlc.find_jar(relative) == jar
    monkeypatch.setenv(tlc.JAR_ENV, relative)
    assert tlc.find_jar() == jar
    fake = FakeTlc(fixture("safety.out"), EXIT_VIOLATION_SAFETY, trace_json=fixture("safety.json"))
    monkeypatch.setattr(tlc.subprocess, "run", fake)
    tlc.run_tlc(TLA_DIR / "KVOffload.tla", TLA_DIR / "KVOffload_EagerSignal.cfg", java="java")
    command, kwargs = fake.calls[0]
    assert command[command.index("-cp") + 1] == str(jar)
    assert kwargs["cwd"] != tmp_path


def test_spec_named_like_an_option_is_passed_as_a_path(tmp_path: Path) -> None:
    command = tlc.build_command("java", tmp_path / "t.jar", tmp_path / "-Spec.tla", tmp_path / "a.cfg",
                                tmp_path / "trace.json")
    assert command[-1] == f".{os.sep}-Spec.tla"
    plain = tlc.build_command("java", tmp_path / "t.jar", tmp_path / "Spec.tla", tmp_path / "a.cfg",
                              tmp_path / "trace.json")
    assert plain[-1] == "Spec.tla"


# --- this TLC's formats (2026) ------------------------------------------------------------------

INITIAL_VIOLATION = """Computing initial states...
Error: Invariant Inv0 is violated by the initial state:
/\\ x = 1
/\\ y = 0

Finished in 04s at (2026-12-03 14:22:29)
"""

TWO_PROPERTIES = """Checking 2 branches of temporal properties for the complete state space
Error: Temporal properties Prop0 and Prop1 were violated.

Error: The following behavior constitutes a counter-example:

State 1: <Initial predicate>
/\\ s0 = {p0, p1, p2}
/\\ s1 = <<>>

State 2: Stuttering
32 states generated, 8 distinct states found, 0 states left on queue.
The depth of the complete state graph search is 1.
"""


def test_invariant_broken_by_an_initial_state() -> None:
    result = tlc.parse_tlc_output(INITIAL_VIOLATION, EXIT_VIOLATION_SAFETY)
    assert (result.result, result.violated) == ("safety failure", "Inv0")
    assert [(step.action, step.state) for step in result.trace] == [(tlc.INITIAL_ACTION, {"x": "1", "y": "0"})]
    assert result.states_generated == 0  # TLC prints no statistics after it


def test_temporal_properties_named() -> None:
    result = tlc.parse_tlc_output(TWO_PROPERTIES, EXIT_VIOLATION_LIVENESS, properties=["Prop0", "Prop1"])
    assert result.violated == "Prop0, Prop1"
    assert tlc.violated_properties(result.violated) == ["Prop0", "Prop1"]
    assert tlc.violated_properties("A, B and C") == ["A", "B", "C"]
    assert [step.action for step in result.trace] == [tlc.INITIAL_ACTION, tlc.STUTTERING_ACTION]
    one = tlc.parse_tlc_output("Error: Temporal property Live was violated.\n", EXIT_VIOLATION_LIVENESS)
    assert one.violated == "Live"


@requires_tlc
def test_session_gives_what_one_run_gives(tmp_path: Path) -> None:
    from tlacheck.tlc_batch import TlcSession

    for name in ("Counter.tla", "Counter.cfg"):
        (tmp_path / name).write_text(fixture(name))
    spec, config = tmp_path / "Counter.tla", tmp_path / "Counter.cfg"
    alone = tlc.run_tlc(spec, config, jar=REAL_JAR, timeout=300)
    with TlcSession(REAL_JAR) as session:
        runs = [session.check(spec, config), session.check(spec, config, check_deadlock=False)]
    assert runs[0].to_json() | {"seconds": 0} == alone.to_json() | {"seconds": 0}
    assert (runs[0].result, runs[0].distinct_states, len(runs[0].trace)) == ("deadlock failure", 3, 3)
    assert (runs[1].result, runs[1].distinct_states) == ("success", 3)


def test_a_broken_action_property_is_a_safety_failure_with_tlcs_status() -> None:
    # TLC exits 13 (its status for temporal properties) on "Action property Step0 is violated".
    result = tlc.parse_tlc_output(fixture("action_property.out"), EXIT_VIOLATION_LIVENESS)
    assert (result.result, result.exit_code, result.violated) == ("safety failure", EXIT_VIOLATION_LIVENESS, "Step0")
    assert [step.state for step in result.trace] == [{"x": "0"}, {"x": "1"}, {"x": "3"}]
    assert (result.states_generated, result.distinct_states, result.depth) == (9, 4, 3)
