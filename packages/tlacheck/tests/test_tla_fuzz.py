"""Differential fuzzing, fast profile: a few random specs (``specgen``) under TLC and the
embedded checker, which must agree; and the specs earlier disagreements were found on
(``fuzz_regressions/``), each with the answer TLC gives in its ``\\* expect:`` line. The long
profile is ``make tla-fuzz`` (``tla_fuzz.py``)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from specgen import GeneratedSpec, specs
from tla_fuzz import LASSO, RENAMED, run_both
from tlacheck import check_model, tlc
from tlacheck.cli import main
from tlacheck.result import CheckResult
from tlacheck.tlc_batch import TlcSession
from tlc_fakes import REAL_JAR, requires_tlc

REGRESSIONS = Path(__file__).parent / "fuzz_regressions"


def test_regressions_meet_tlcs_answers_embedded(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-all", str(REGRESSIONS), "--engine", "embedded", "--quiet"]) == 0
    assert f"{len(list(REGRESSIONS.glob('*.cfg')))}/" in capsys.readouterr().out


@pytest.mark.parametrize("config", sorted(REGRESSIONS.glob("*.cfg")), ids=lambda path: path.stem)
def test_regressions_meet_tlcs_counts_embedded(config: Path) -> None:
    """The counts TLC gave (its ``\\* tlc:`` line: distinct states, depth, states in the trace)."""
    recorded = re.search(r"^\\\* tlc: (.+)$", config.read_text(), re.MULTILINE)
    if recorded is None:
        assert "expect: error" in config.read_text()  # TLC refuses these: there are no counts
        return
    result = check_model(config.with_suffix(".tla"), config, max_memory_mb=None)
    got = {"distinct": result.distinct_states, "depth": result.depth,
           "trace": sum(step.action != tlc.STUTTERING_ACTION for step in result.trace)}
    expected = {name: int(number) for name, number in re.findall(r"(\w+) (\d+)", recorded.group(1))}
    assert {name: got[name] for name in expected} == expected


@requires_tlc
def test_regressions_both_engines_agree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-all", str(REGRESSIONS), "--both", "--jar", REAL_JAR, "--quiet"]) == 0
    assert "the engines agree on" in capsys.readouterr().out


@pytest.fixture(scope="module")
def session() -> Iterator[TlcSession]:
    if shutil.which("javac") is None:
        pytest.skip("javac not found: the TLC session needs it (make tla-fuzz runs without one, slower)")
    with TlcSession(REAL_JAR) as running:
        yield running


@requires_tlc
# Derandomised (the same specs every run) and unshrunk (shrinking takes minutes of TLC runs): the
# failure message holds the whole spec, to be kept in fuzz_regressions/.
@settings(max_examples=6, deadline=None, database=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(spec=specs())
def test_random_specs_both_engines_agree(session: TlcSession, tmp_path_factory: pytest.TempPathFactory,
                                         spec: GeneratedSpec) -> None:
    verdict = run_both(spec, session, tmp_path_factory.mktemp("fuzz"))
    assert not verdict.rejected, verdict.tlc.message
    assert verdict.differences in ([], [LASSO], [RENAMED]), spec.module + spec.config


# TLC: 1 initial state, then from x = 0 and x = 1 one successor per witness of the guard (3 and 3),
# or per true disjunct (3, then 1). The embedded checker: one successor per state either way.
GUARD_BRANCHES = {"Exists": (7, 3), "Or": (5, 3), "Plain": (3, 3)}


@pytest.mark.parametrize("next_action", sorted(GUARD_BRANCHES))
def test_states_generated_counts_guard_branches_under_tlc_only(next_action: str) -> None:
    spec = Path(__file__).parent / "specs" / "GuardBranches.tla"
    config = spec.with_name(f"GuardBranches_{next_action}.cfg")
    tlc_count, embedded_count = GUARD_BRANCHES[next_action]
    embedded = check_model(spec, config, max_memory_mb=None)
    assert (embedded.distinct_states, embedded.states_generated) == (2, embedded_count)
    if tlc.tlc_available(REAL_JAR):
        answer = tlc.run_tlc(spec, config, jar=REAL_JAR, timeout=300)
        assert (answer.distinct_states, answer.states_generated) == (2, tlc_count)


# Two properties, both violated (without fairness x may stop at 0, or at 2): the embedded checker
# names the first in the config's order.
TWO_VIOLATED = GeneratedSpec(
    module="---- MODULE Fuzz ----\nEXTENDS Naturals\nVARIABLE x\nInit == x = 0\nNext == x < 2 /\\ x' = x + 1\n"
           "Spec == Init /\\ [][Next]_x\nProp0 == [](x = 2 => <>(x = 0))\nProp1 == <>(x = 1)\n====\n",
    config="SPECIFICATION Spec\nPROPERTY Prop1\nPROPERTY Prop0\nCHECK_DEADLOCK FALSE\n",
)


class _NamingTlc:
    """A TLC session that answers the embedded checker's result, naming ``other`` as the violated
    property for the whole config, and ``alone`` for a config with one property."""

    def __init__(self, other: str, alone: CheckResult | None) -> None:
        self.other, self.alone = other, alone

    def check(self, module: Path, config: Path) -> CheckResult:
        embedded = check_model(module, config, max_memory_mb=None)
        if config.name == "FuzzAlone.cfg":
            return self.alone or embedded
        return dataclasses.replace(embedded, engine="tlc", violated=self.other)


def test_another_violated_property_confirmed_alone_is_counted_apart(tmp_path: Path) -> None:
    verdict = run_both(TWO_VIOLATED, _NamingTlc("Prop0", None), tmp_path)  # type: ignore[arg-type]
    assert verdict.embedded.violated == "Prop1"
    assert verdict.differences == [RENAMED]
    assert (tmp_path / "FuzzAlone.cfg").read_text().count("PROPERTY") == 1


def test_another_violated_property_tlc_does_not_confirm_is_a_disagreement(tmp_path: Path) -> None:
    holds = CheckResult(engine="tlc", result="success", distinct_states=3, depth=3)
    verdict = run_both(TWO_VIOLATED, _NamingTlc("Prop0", holds), tmp_path)  # type: ignore[arg-type]
    assert any(d.startswith("violated:") for d in verdict.differences)
