"""``kvoffload tla``: engine choice, reports, user errors, ``check-all`` expectations, and the two
project models on the embedded checker."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kvoffload_lab import cli
from tlacheck import cli as tlacheck_cli
from tlacheck import expectation as checker_expectation
from tlacheck.engine import UsageError, format_tla_error
from tlacheck.report import format_report
from tlacheck.result import (
    EXIT_ERROR_CONFIG_PARSE,
    EXIT_ERROR_SPEC_PARSE,
    EXIT_SUCCESS,
    EXIT_VIOLATION_LIVENESS,
    EXIT_VIOLATION_SAFETY,
    CheckResult,
    TraceStep,
)
from tlc_fakes import FakeTlc, fixture

REPO = Path(__file__).parent.parent
TLA_DIR = REPO / "tla"


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("kvoffload tla: error: ")
    return lines[0]


# --- user errors ------------------------------------------------------------------------------


def test_missing_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["tla", "check", str(tmp_path / "Nope.tla")], capsys)
    assert code == 2
    assert "Nope.tla: no such spec file" in assert_one_error_line(err)


def test_missing_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "Alone.tla"
    spec.write_text("---- MODULE Alone ----\n====\n")
    code, _, err = run_cli(["tla", "check", str(spec)], capsys)
    assert code == 2
    assert "Alone.cfg: no such model file" in assert_one_error_line(err)
    code, _, err = run_cli(["tla", "check", str(spec), "--config", str(tmp_path / "Other.cfg")], capsys)
    assert code == 2
    assert "Other.cfg" in assert_one_error_line(err)


def test_engine_tlc_without_jar(no_tlc: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["tla", "check", str(TLA_DIR / "KVOffload.tla"), "--engine", "tlc"], capsys)
    assert code == 2
    line = assert_one_error_line(err)
    assert "tla2tools.jar" in line and "TLA2TOOLS_JAR" in line and "releases" in line
    assert out == ""


def test_explicit_missing_jar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["tla", "check", str(TLA_DIR / "KVOffload.tla"), "--jar", str(tmp_path / "x.jar")], capsys)
    assert code == 2
    assert "given by --jar" in assert_one_error_line(err)


def test_tlc_config_error_is_one_line(
    tmp_path: Path, fake_tlc: FakeTlc, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_tlc.output = fixture("config_error.out")
    fake_tlc.exit_code = EXIT_ERROR_CONFIG_PARSE
    code, _, err = run_cli(["tla", "check", str(TLA_DIR / "KVOffload.tla"), "--engine", "tlc"], capsys)
    assert code == EXIT_ERROR_CONFIG_PARSE
    line = assert_one_error_line(err)
    assert "KVOffload.cfg" in line and "NoSuchInvariant" in line
    # TLC names no line for config errors; the CLI finds the name in the cfg.
    spec = tmp_path / "KVOffload.tla"
    spec.write_text((TLA_DIR / "KVOffload.tla").read_text())
    (tmp_path / "KVOffload.cfg").write_text(
        "\\* NoSuchInvariant in a comment\nINVARIANTS\n    TypeOK\n    NoSuchInvariant\n"
    )
    code, _, err = run_cli(["tla", "check", str(spec), "--engine", "tlc"], capsys)
    assert code == EXIT_ERROR_CONFIG_PARSE
    assert f"{tmp_path / 'KVOffload.cfg'}:4: The invariant NoSuchInvariant" in assert_one_error_line(err)


def test_tlc_parse_error_is_one_line(fake_tlc: FakeTlc, capsys: pytest.CaptureFixture[str]) -> None:
    fake_tlc.output = fixture("parse_error.out")
    fake_tlc.exit_code = EXIT_ERROR_SPEC_PARSE
    code, out, err = run_cli(["tla", "check", str(TLA_DIR / "KVOffload.tla"), "--engine", "tlc", "--json"], capsys)
    assert code == EXIT_ERROR_SPEC_PARSE and out == ""
    line = assert_one_error_line(err)
    assert "KVOffload.tla: parse error in module Broken" in line and "line 12, column 1" in line


# --- engine choice and reports ----------------------------------------------------------------


def _fake_result(**changes: Any) -> CheckResult:
    result = CheckResult(
        engine="embedded",
        result="safety failure",
        distinct_states=124,
        states_generated=299,
        depth=5,
        violated="NoManagerCallAfterSignal",
        trace=[
            TraceStep("Initial predicate", {"x": "0", "y": "a"}),
            TraceStep("Step", {"x": "1", "y": "a"}),
            TraceStep("Other", {"x": "1", "y": "b"}),
        ],
        exit_code=EXIT_VIOLATION_SAFETY,
    )
    for name, value in changes.items():
        setattr(result, name, value)
    return result


def test_auto_falls_back_to_embedded_and_says_so_on_stderr(
    no_tlc: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str] = []

    def fake_run_engine(engine: str, spec: Path, config: Path, **kwargs: Any) -> CheckResult:
        seen.append(engine)
        return _fake_result()

    monkeypatch.setattr(tlacheck_cli, "run_engine", fake_run_engine)
    code, out, err = run_cli(["tla", "check", str(TLA_DIR / "KVOffload.tla"), "--json"], capsys)
    assert seen == ["embedded"]
    assert code == EXIT_VIOLATION_SAFETY
    assert "using the embedded checker" in err
    # One line: where it looked, and how to get the jar.
    note = [line for line in err.splitlines() if "tla2tools.jar" in line]
    assert len(note) == 1
    assert f"{no_tlc}/.cache/tlacheck/tla2tools.jar (missing)" in note[0] and "$TLA2TOOLS_JAR (unset)" in note[0]
    assert "https://github.com/tlaplus/tlaplus/releases" in note[0]
    data = json.loads(out)  # stdout is clean JSON
    assert data["engine"] == "embedded"
    assert data["result"] == "safety failure"
    assert data["violated"] == "NoManagerCallAfterSignal"
    assert data["distinct_states"] == 124 and data["states_generated"] == 299 and data["depth"] == 5
    assert data["trace"][1] == {"action": "Step", "state": {"x": "1", "y": "a"}}
    assert data["config"].endswith("KVOffload.cfg")


def test_human_report_lists_changed_variables(
    no_tlc: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(tlacheck_cli, "run_engine", lambda *a, **k: _fake_result())
    code, out, _ = run_cli(["tla", "check", str(TLA_DIR / "KVOffload.tla")], capsys)
    assert code == EXIT_VIOLATION_SAFETY
    assert "Error: Invariant NoManagerCallAfterSignal is violated." in out
    assert re.search(r"^1: Initial predicate\n     x = 0\n     y = a$", out, re.MULTILINE)
    assert re.search(r"^2: Step\n     x = 1\n3: Other\n     y = b$", out, re.MULTILINE)
    assert "299 states generated, 124 distinct states found, 0 states left on queue." in out
    assert "The depth of the complete state graph search is 5." in out


def test_human_report_lasso() -> None:
    report = format_report(
        _fake_result(result="liveness failure", violated="EventuallyCleaned", loop_back_to=1)
    )
    assert "Temporal property EventuallyCleaned is violated." in report
    assert "2: Step   <- loop starts here" in report
    assert "Back to state 2" in report


def test_check_with_tlc_engine(fake_tlc: FakeTlc, capsys: pytest.CaptureFixture[str]) -> None:
    fake_tlc.output = fixture("liveness.out")
    fake_tlc.exit_code = EXIT_VIOLATION_LIVENESS
    code, out, err = run_cli(["tla", "check", str(TLA_DIR / "KVOffload.tla")], capsys)
    assert code == EXIT_VIOLATION_LIVENESS
    assert err == ""  # auto found TLC: nothing to say
    assert "(engine: tlc)" in out
    assert "Temporal property EventuallyCleaned is violated." in out
    assert "Back to state 4" in out
    code, out, _ = run_cli(["tla", "check", str(TLA_DIR / "KVOffload.tla"), "--json"], capsys)
    data = json.loads(out)
    assert data["engine"] == "tlc" and data["loop_back_to"] == 3 and data["exit_code"] == 13
    assert fake_tlc.calls[0][0][-1] == "KVOffload.tla"


# --- check-all --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "result", "violated"),
    [
        ("success", "success", None),
        ("safety failure NoManagerCallAfterSignal", "safety failure", "NoManagerCallAfterSignal"),
        ("safety   failure   TypeOK", "safety failure", "TypeOK"),
        ("liveness failure", "liveness failure", None),
        ("liveness failure EventuallyCleaned", "liveness failure", "EventuallyCleaned"),
        ("deadlock failure", "deadlock failure", None),
        ("error", "error", None),
    ],
)
def test_parse_expectation(text: str, result: str, violated: str | None) -> None:
    expectation = checker_expectation.parse_expectation(text)
    assert (expectation.result, expectation.violated) == (result, violated)


@pytest.mark.parametrize("text", ["succes", "success TypeOK", "safety failure A B", "crash"])
def test_parse_expectation_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="unknown expectation"):
        checker_expectation.parse_expectation(text)


def test_expectation_met_by() -> None:
    expectation = checker_expectation.parse_expectation("safety failure NoManagerCallAfterSignal")
    assert expectation.met_by(_fake_result())
    assert not expectation.met_by(_fake_result(violated="TypeOK"))
    assert not expectation.met_by(_fake_result(result="success", violated=None))
    assert checker_expectation.parse_expectation("safety failure").met_by(_fake_result(violated="TypeOK"))


# The models of KVOffload.tla and of its refinement of the declared lifecycles (the tier models of
# KVOffloadTiers.tla: tests/tiers/test_tier_tla.py).
PROTOCOL_CFGS = [TLA_DIR / "KVOffload.cfg", *TLA_DIR.glob("KVOffload_*.cfg"), TLA_DIR / "KVOffloadRefinement.cfg"]


def test_project_models_state_their_expectations() -> None:
    assert str(checker_expectation.read_expectation(TLA_DIR / "KVOffload.cfg")) == "success"
    assert (
        str(checker_expectation.read_expectation(TLA_DIR / "KVOffload_EagerSignal.cfg"))
        == "safety failure NoManagerCallAfterSignal"
    )
    for config in PROTOCOL_CFGS:
        spec = checker_expectation.spec_for_config(config)
        # The refinement of the declared lifecycles extends KVOffload.tla.
        assert spec in (TLA_DIR / "KVOffload.tla", TLA_DIR / "KVOffloadRefinement.tla")
        assert "EXTENDS KVOffload\n" in spec.read_text() or spec.name == "KVOffload.tla"


def test_project_cfgs_name_only_defined_operators() -> None:
    spec = (TLA_DIR / "KVOffload.tla").read_text() + (TLA_DIR / "KVOffloadRefinement.tla").read_text()
    defined = set(re.findall(r"^([A-Za-z_]\w*)(?:\([^)]*\))? ==", spec, re.MULTILINE))
    required = {
        "TypeOK", "SignalAfterFinalStore", "NoManagerCallAfterSignal", "SignalExactlyOnce",
        "CleanOnlyWhenDrained", "JobsExclusive", "NoEvictWhileInUse", "GpuBlockFence", "NoLeak",
        "EventuallyCleaned", "Spec",
    }  # fmt: skip
    assert required <= defined
    for config in PROTOCOL_CFGS:
        text = re.sub(r"\\\*.*", "", config.read_text())
        section = None
        for token in text.split():
            if token in {"INVARIANT", "INVARIANTS", "PROPERTY", "PROPERTIES", "SPECIFICATION"}:
                section = token
            elif token.isupper() and token.isalpha():
                section = None
            elif section is not None:
                assert token in defined, f"{config.name}: {token} is not defined in KVOffload(Refinement).tla"


def test_spec_for_config_resolution(tmp_path: Path) -> None:
    (tmp_path / "A.tla").write_text("")
    (tmp_path / "B.tla").write_text("")
    named = tmp_path / "X_1.cfg"
    named.write_text("\\* spec: B.tla\n")
    assert checker_expectation.spec_for_config(named) == tmp_path / "B.tla"
    by_prefix = tmp_path / "A_variant.cfg"
    by_prefix.write_text("")
    assert checker_expectation.spec_for_config(by_prefix) == tmp_path / "A.tla"
    ambiguous = tmp_path / "C.cfg"
    ambiguous.write_text("")
    with pytest.raises(UsageError, match=r"spec: X\.tla"):
        checker_expectation.spec_for_config(ambiguous)
    (tmp_path / "B.tla").unlink()
    assert checker_expectation.spec_for_config(ambiguous) == tmp_path / "A.tla"  # the only .tla


def _model_dir(tmp_path: Path) -> Path:
    (tmp_path / "M.tla").write_text("---- MODULE M ----\n====\n")
    (tmp_path / "M.cfg").write_text("\\* expect: success\nSPECIFICATION Spec\n")
    (tmp_path / "M_Bug.cfg").write_text("\\* expect: safety failure Inv\nSPECIFICATION Spec\n")
    return tmp_path


def test_check_all_all_met(
    tmp_path: Path, no_tlc: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _model_dir(tmp_path)

    def fake(engine: str, spec: Path, config: Path, **kwargs: Any) -> CheckResult:
        assert spec == directory / "M.tla"
        if config.name == "M.cfg":
            return CheckResult(engine="embedded", result="success", distinct_states=10, seconds=0.5)
        return CheckResult(engine="embedded", result="safety failure", violated="Inv", exit_code=12)

    monkeypatch.setattr(checker_expectation, "run_engine", fake)
    code, out, err = run_cli(["tla", "check-all", str(directory)], capsys)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("M.cfg") and "expected: success" in lines[0] and lines[0].endswith("ok")
    assert "10 states" in lines[0] and "0.50s" in lines[0]
    assert lines[1].startswith("M_Bug.cfg") and "got: safety failure Inv" in lines[1]
    assert "2/2 models met their expectation" in out
    assert "embedded" in err
    code, out, _ = run_cli(["tla", "check-all", str(directory), "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    assert [model["model"] for model in data["models"]] == ["M.cfg", "M_Bug.cfg"]


def test_check_all_unmet_and_errors(
    tmp_path: Path, no_tlc: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _model_dir(tmp_path)
    (directory / "M_NoExpect.cfg").write_text("SPECIFICATION Spec\n")
    (directory / "M_Odd.cfg").write_text("\\* expect: exploded\n")
    monkeypatch.setattr(
        checker_expectation,
        "run_engine",
        lambda *a, **k: CheckResult(engine="embedded", result="success", exit_code=EXIT_SUCCESS),
    )
    code, out, _ = run_cli(["tla", "check-all", str(directory)], capsys)
    assert code == 1
    by_model = {line.split()[0]: line for line in out.splitlines()[:-1]}
    assert by_model["M.cfg"].endswith("ok")
    assert by_model["M_Bug.cfg"].endswith("UNEXPECTED")
    assert "no '\\* expect: ...' line" in by_model["M_NoExpect.cfg"]
    assert "unknown expectation" in by_model["M_Odd.cfg"]
    assert "1/4 models met their expectation" in out


def test_check_all_bad_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["tla", "check-all", str(tmp_path / "none")], capsys)
    assert code == 2
    assert "no such directory" in assert_one_error_line(err)
    code, _, err = run_cli(["tla", "check-all", str(tmp_path)], capsys)
    assert code == 2
    assert "no .cfg models" in assert_one_error_line(err)


def test_format_tla_error() -> None:
    class Located(Exception):
        def __init__(self) -> None:
            super().__init__("Unknown operator Foo\n(in an invariant)")
            self.file, self.line, self.column = "M.cfg", 3, 5

    assert format_tla_error(Located()) == "M.cfg:3:5: Unknown operator Foo (in an invariant)"


# --- the project models on the embedded checker ----------------------------------------------


def test_embedded_fixed_model_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["tla", "check", str(TLA_DIR / "KVOffload.tla"), "--engine", "embedded", "--json"], capsys)
    data = json.loads(out)
    assert code == EXIT_SUCCESS, data["message"]
    assert data["result"] == "success"
    assert data["engine"] == "embedded"
    assert 1_000 <= data["distinct_states"] <= 50_000


def test_embedded_eager_signal_reference_crash(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        [
            "tla", "check", str(TLA_DIR / "KVOffload.tla"),
            "--config", str(TLA_DIR / "KVOffload_EagerSignal.cfg"),
            "--engine", "embedded", "--json",
        ],
        capsys,
    )  # fmt: skip
    data = json.loads(out)
    assert code == EXIT_VIOLATION_SAFETY
    assert data["result"] == "safety failure"
    assert data["violated"] == "NoManagerCallAfterSignal"
    trace = data["trace"]
    actions = [step["action"] for step in trace]
    # finish -> the manager is signaled -> prepare_store (BuildMeta) for the dropped request.
    finish = next(i for i, a in enumerate(actions) if a.startswith(("Finish", "Abort")))
    assert "finished" in trace[finish]["state"]["mgr"]  # signaled inside request_finished
    assert '"signaled"' in trace[finish]["state"]["sched"]
    assert actions[-1].startswith("BuildMeta") and len(actions) - 1 > finish
    assert "prepare_store" in trace[-1]["state"]["afterSignal"]
    assert trace[finish]["state"]["afterSignal"] == "{}"


def test_embedded_cfg_naming_missing_invariant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "KVOffload.tla"
    spec.write_text((TLA_DIR / "KVOffload.tla").read_text())
    config = tmp_path / "KVOffload.cfg"
    config.write_text(
        (TLA_DIR / "KVOffload_EagerSignal.cfg").read_text().replace("    TypeOK\n", "    TypeOK\n    NoSuchInv\n")
    )
    code, _, err = run_cli(["tla", "check", str(spec), "--engine", "embedded"], capsys)
    assert code != 0
    line = assert_one_error_line(err)
    assert "NoSuchInv" in line
    assert re.search(r"KVOffload\.cfg:\d+", line), line


# Each mutant drops one guard of the spec; the named invariant must then fail, which shows the
# invariants have teeth (a spec whose invariants cannot fail would pass for the wrong reason).
SPEC_MUTANTS = [
    pytest.param(
        "Evictable == {e \\in cpu : e.ready /\\ ~InUse(e)}",
        "Evictable == {e \\in cpu : e.ready}",
        "safety failure",
        "NoEvictWhileInUse",
        id="evict-block-in-use",
    ),
    pytest.param(
        '    /\\ sched[r] = "preempted"\n    /\\ NoJobs(r)',
        '    /\\ sched[r] = "preempted"',
        "safety failure",
        "JobsExclusive",
        id="readmit-with-jobs-in-flight",
    ),
    pytest.param(
        'IF drained THEN "cleaned" ELSE "signaled"',
        '"cleaned"',
        "safety failure",
        "CleanOnlyWhenDrained",
        id="clean-undrained",
    ),
    pytest.param(
        "    /\\ jobs = {}\n    /\\ \\E r \\in Requests : sched[r]",
        "    /\\ \\E r \\in Requests : sched[r]",
        "safety failure",
        "NoEvictWhileInUse",
        id="reset-with-jobs-in-flight",
    ),
    pytest.param(
        '    /\\ jobs\' = {IF j.req = r /\\ j.kind = "store" THEN Flushed(j) ELSE j : j \\in jobs}\n'
        "    /\\ UNCHANGED <<storeBuilt, mgr, signals, cpu, afterSignal>>",
        "    /\\ UNCHANGED <<storeBuilt, mgr, signals, cpu, jobs, afterSignal>>",
        "safety failure",
        "GpuBlockFence",
        id="preempt-without-flush",
    ),
    pytest.param(
        "Fairness == \\A r \\in Requests : WF_vars(BuildMeta(r)) /\\ WF_vars(JobDoneOf(r))",
        "Fairness == \\A r \\in Requests : WF_vars(BuildMeta(r))",
        "liveness failure",
        "EventuallyCleaned",
        id="no-job-fairness",
    ),
]


@pytest.mark.parametrize(("old", "new", "result", "violated"), SPEC_MUTANTS)
def test_spec_mutants_are_caught(tmp_path: Path, old: str, new: str, result: str, violated: str) -> None:
    from tlacheck import check_model

    text = (TLA_DIR / "KVOffload.tla").read_text()
    assert text.count(old) == 1, old
    (tmp_path / "KVOffload.tla").write_text(text.replace(old, new))
    (tmp_path / "KVOffload.cfg").write_text((TLA_DIR / "KVOffload.cfg").read_text())
    outcome = check_model(tmp_path / "KVOffload.tla", tmp_path / "KVOffload.cfg")
    assert (outcome.result, outcome.violated) == (result, violated), outcome.message


def test_check_all_both_fails_when_the_engines_disagree(
    tmp_path: Path, fake_tlc: FakeTlc, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _model_dir(tmp_path)

    def fake(engine: str, spec: Path, config: Path, **kwargs: Any) -> CheckResult:
        if config.name == "M.cfg":  # the embedded checker finds two states fewer
            return CheckResult(engine=engine, result="success", distinct_states=12 if engine == "tlc" else 10)
        return CheckResult(engine=engine, result="safety failure", violated="Inv", exit_code=12, distinct_states=3)

    monkeypatch.setattr(checker_expectation, "run_engine", fake)
    code, out, _ = run_cli(["tla", "check-all", str(directory), "--both"], capsys)
    assert code == 1
    assert re.search(r"^M\.cfg +ENGINES DISAGREE: distinct states: TLC 12 / embedded 10$", out, re.MULTILINE)
    assert not re.search(r"^M_Bug\.cfg +ENGINES DISAGREE", out, re.MULTILINE)
    assert "the engines agree on 1/2" in out


def test_check_all_both_without_tlc_is_one_line(
    tmp_path: Path, no_tlc: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(["tla", "check-all", str(_model_dir(tmp_path)), "--both"], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "tla2tools.jar" in err


def test_kvoffload_tla_is_the_tlacheck_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "Wrap.tla"
    spec.write_text("---- MODULE Wrap ----\nEXTENDS Naturals\nVARIABLE x\nInit == x = 0\nNext == x' = (x + 1) % 5\n"
                    "Small == x < 3\n====\n")
    (tmp_path / "Wrap.cfg").write_text("INIT Init\nNEXT Next\nINVARIANT Small\n")
    answers = []
    for run in (lambda args: cli.main(["tla", *args]), tlacheck_cli.main):
        code = run(["check", str(spec), "--engine", "embedded", "--json", "--quiet"])
        answer = json.loads(capsys.readouterr().out)
        answer.pop("seconds")
        missing = run(["check", str(tmp_path / "Nope.tla")])
        answers.append((code, answer, missing, capsys.readouterr().err))
    (code, answer, missing, err), (tlacheck_code, tlacheck_answer, tlacheck_missing, tlacheck_err) = answers
    assert (code, answer["violated"], len(answer["trace"])) == (EXIT_VIOLATION_SAFETY, "Small", 4)
    assert (code, answer, missing) == (tlacheck_code, tlacheck_answer, tlacheck_missing) == (
        EXIT_VIOLATION_SAFETY, answer, 2)
    assert err == f"kvoffload tla: error: {tmp_path / 'Nope.tla'}: no such spec file\n"
    assert tlacheck_err == err.replace("kvoffload tla:", "tlacheck:")
