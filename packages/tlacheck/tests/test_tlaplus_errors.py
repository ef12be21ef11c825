"""Error paths: every static problem is a located, named error, never a wrong verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from tlacheck import TlaError, check_model, load_model
from tlacheck.result import (
    EXIT_ERROR_CONFIG_PARSE,
    EXIT_ERROR_SPEC_PARSE,
    EXIT_ERROR_STATESPACE_TOO_LARGE,
    EXIT_FAILURE_SPEC_EVAL,
    EXIT_VIOLATION_ASSUMPTION,
)

GOOD = """---- MODULE M ----
EXTENDS Naturals
VARIABLE x
Init == x = 0
Next == x' = (x + 1) % 3
Inv == x < 3
====
"""


def write(tmp_path: Path, tla: str, cfg: str = "INIT Init\nNEXT Next\n", name: str = "M") -> Path:
    (tmp_path / f"{name}.tla").write_text(tla)
    (tmp_path / f"{name}.cfg").write_text(cfg)
    return tmp_path / f"{name}.tla"


def test_good_spec_default_config(tmp_path: Path) -> None:
    r = check_model(write(tmp_path, GOOD, "INIT Init NEXT Next INVARIANT Inv"))
    assert r.result == "success" and r.distinct_states == 3 and r.states_generated == 4
    assert r.config.endswith("M.cfg")


def test_parse_error_is_located(tmp_path: Path) -> None:
    spec = write(tmp_path, "---- MODULE M ----\nVARIABLE x\nInit == x = = 1\nNext == x' = x\n====\n")
    with pytest.raises(TlaError) as info:
        load_model(spec)
    err = info.value
    assert err.file == str(spec) and err.line == 3 and err.column is not None and err.column > 1
    assert f"{spec}:3:" in str(err) and "parse error" in str(err)
    r = check_model(spec)
    assert r.result == "error" and r.exit_code == EXIT_ERROR_SPEC_PARSE and f"{spec}:3:" in r.message


def test_parse_error_does_not_touch_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, "---- MODULE M ----\nVARIABLE x\nInit == (x = \n====\n")
    check_model(spec)
    assert capsys.readouterr().out == ""


def test_unsupported_construct_is_named_and_located(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("Next == x' = (x + 1) % 3", "Next == x' = 1.5"))
    with pytest.raises(TlaError) as info:
        load_model(spec)
    assert "unsupported construct: real numbers" in str(info.value)
    assert f"{spec}:5:" in str(info.value)
    assert check_model(spec).exit_code == EXIT_ERROR_SPEC_PARSE


def test_temporal_invariant_is_rejected(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("Inv == x < 3", "Inv == <>(x = 2)"), "INIT Init\nNEXT Next\nINVARIANT Inv")
    with pytest.raises(TlaError, match="temporal formula; list it under PROPERTY"):
        load_model(spec)


def test_unsupported_temporal_property(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("Inv == x < 3", "Inv == [](x = 0 => [](x = 0))"),
                 "INIT Init\nNEXT Next\nPROPERTY Inv")
    with pytest.raises(TlaError, match="unsupported temporal formula") as info:
        load_model(spec)
    assert f"{spec}:6:" in str(info.value)


def test_unbounded_quantifier_is_unsupported(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("Inv == x < 3", "Inv == \\E y : y = x"), "INIT Init\nNEXT Next\nINVARIANT Inv")
    with pytest.raises(TlaError, match=r"unsupported construct: unbounded quantifier"):
        load_model(spec)


def test_config_names_missing_invariant(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD, "INIT Init\nNEXT Next\n\\* comment\nINVARIANT Inv Missing\n")
    with pytest.raises(TlaError) as info:
        load_model(spec)
    err = info.value
    assert "Missing" in str(err) and err.file == str(tmp_path / "M.cfg") and err.line == 4
    r = check_model(spec)
    assert r.result == "error" and r.exit_code == EXIT_ERROR_CONFIG_PARSE and "Missing" in r.message


def test_config_syntax_error(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD, "INIT Init\nNEXT Next\nFOO Bar\n")
    r = check_model(spec)
    assert r.exit_code == EXIT_ERROR_CONFIG_PARSE and ":3:" in r.message


def test_unassigned_constant(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("VARIABLE x", "CONSTANT N\nVARIABLE x"))
    with pytest.raises(TlaError, match="constant N is not assigned"):
        load_model(spec)


def test_assume_false(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("VARIABLE x", "CONSTANT N\nASSUME N > 5\nVARIABLE x"),
                 "CONSTANT N = 3\nINIT Init\nNEXT Next\n")
    r = check_model(spec)
    assert r.result == "error" and r.exit_code == EXIT_VIOLATION_ASSUMPTION
    assert "ASSUME" in r.message and f"{spec}:4:" in r.message


def test_evaluation_error(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("Inv == x < 3", "Inv == <<1, 2>>[x + 1] > 0"),
                 "INIT Init\nNEXT Next\nINVARIANT Inv\n")
    r = check_model(spec)
    assert r.result == "error" and r.exit_code == EXIT_FAILURE_SPEC_EVAL
    assert "outside its domain" in r.message


def test_incomplete_successor(tmp_path: Path) -> None:
    tla = GOOD.replace("VARIABLE x", "VARIABLES x, y").replace("Init == x = 0", "Init == x = 0 /\\ y = 0")
    spec = write(tmp_path, tla)
    r = check_model(spec)
    assert r.result == "error" and "y' is not assigned" in r.message


def test_unknown_module(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("EXTENDS Naturals", "EXTENDS Naturals, NoSuchModule"))
    with pytest.raises(TlaError, match="module NoSuchModule not found"):
        load_model(spec)


def test_progress_goes_to_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = check_model(write(tmp_path, GOOD), progress=True)
    assert r.result == "success"
    assert capsys.readouterr().out == ""


def test_max_states(tmp_path: Path) -> None:
    r = check_model(write(tmp_path, GOOD), max_states=2)
    # A truncated search is never reported as a success.
    assert r.result == "error" and r.exit_code == EXIT_ERROR_STATESPACE_TOO_LARGE
    assert r.distinct_states == 2 and "max_states" in r.message


def test_max_states_counts_initial_states(tmp_path: Path) -> None:
    # A spec whose states are all initial (an inductive-invariant check) stops at the limit too.
    spec = write(tmp_path, GOOD.replace("Init == x = 0", "Init == x \\in 0..2"))
    r = check_model(spec, max_states=2)
    assert r.result == "error" and r.exit_code == EXIT_ERROR_STATESPACE_TOO_LARGE
    assert r.distinct_states == 2 and r.states_generated == 2 and "max_states" in r.message


def test_evaluation_error_in_next_has_a_trace(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("Next == x' = (x + 1) % 3", "Next == x' = <<1, 2>>[x + 1]"))
    r = check_model(spec)
    assert r.result == "error" and r.exit_code == EXIT_FAILURE_SPEC_EVAL
    assert [s.state["x"] for s in r.trace] == ["0", "1", "2"]


def test_extends_user_module_and_local(tmp_path: Path) -> None:
    (tmp_path / "Base.tla").write_text(
        "---- MODULE Base ----\nEXTENDS Naturals\nVARIABLE x\nLOCAL Two == 2\nStep == Two\n====\n"
    )
    spec = write(tmp_path, "---- MODULE M ----\nEXTENDS Base\nInit == x = 0\nNext == x' = (x + Step) % 6\n====\n")
    r = check_model(spec)
    assert r.result == "success" and r.distinct_states == 3


def test_unknown_identifier_is_located(tmp_path: Path) -> None:
    spec = write(tmp_path, GOOD.replace("Next == x' = (x + 1) % 3", "Next == x' = y"))
    with pytest.raises(TlaError, match="unknown identifier y") as info:
        load_model(spec)
    assert info.value.line == 5


def test_state_predicate_property_is_checked_on_initial_states(tmp_path: Path) -> None:
    tla = GOOD.replace("Inv == x < 3", "Inv == x < 3\nStartsAt0 == x = 0\nStartsAt1 == x = 1\nConj(a, b) == a /\\ b")
    spec = write(tmp_path, tla, "INIT Init\nNEXT Next\nPROPERTY StartsAt0\n")
    assert check_model(spec).result == "success"
    (tmp_path / "M.cfg").write_text("INIT Init\nNEXT Next\nPROPERTY StartsAt1\n")
    r = check_model(spec)
    assert r.result == "safety failure" and r.violated == "StartsAt1"
    assert [s.state["x"] for s in r.trace] == ["0"]


def test_forall_over_actions_is_a_conjunction(tmp_path: Path) -> None:
    tla = (
        "---- MODULE M ----\nEXTENDS Naturals\nVARIABLES a, b\nInit == a = 0 /\\ b = 0\n"
        "Set(v) == IF v = \"a\" THEN a' = (a + 1) % 2 ELSE b' = (b + 1) % 2\n"
        "Next == \\A v \\in {\"a\", \"b\"} : Set(v)\n====\n"
    )
    r = check_model(write(tmp_path, tla))
    assert r.result == "success" and r.distinct_states == 2 and r.states_generated == 3


def test_operator_constant_substitution(tmp_path: Path) -> None:
    tla = (
        "---- MODULE M ----\nEXTENDS Naturals\nCONSTANT F(_), N\nVARIABLE x\n"
        "MyF(a) == (a + N) % 4\nInit == x = 0\nNext == x' = F(x)\n====\n"
    )
    spec = write(tmp_path, tla, "CONSTANTS N = 1\n  F <- MyF\nINIT Init\nNEXT Next\n")
    r = check_model(spec)
    assert r.result == "success" and r.distinct_states == 4
    (tmp_path / "M.cfg").write_text("CONSTANTS N = 1\nINIT Init\nNEXT Next\n")
    r = check_model(spec)
    assert r.exit_code == EXIT_ERROR_CONFIG_PARSE and "F <- Def" in r.message and f"{spec}:3:" in r.message


# Each rebinds p inside the scope of an earlier p (SANY: "Multiply-defined symbol 'p'"); the line
# and column of the second declaration, and of the first. Siblings (P(p) /\ \A p ...) are fine.
REBINDINGS = {
    "nested quantifier": ("Inv == \\A p \\in {1, 2} : \\E p \\in {3} : x >= 0", (6, 29), (6, 11)),
    "operator parameter": ("Op(p) == \\E p \\in {1} : p > 0\nInv == Op(1)", (6, 13), (6, 4)),
    "set filter": ("Inv == {p \\in {1} : \\A p \\in {2} : TRUE} # {}", (6, 24), (6, 9)),
    "function": ("Inv == [p \\in {1} |-> CHOOSE p \\in {1} : TRUE][1] = 1", (6, 30), (6, 9)),
}


@pytest.mark.parametrize("case", sorted(REBINDINGS))
def test_rebinding_a_bound_name_is_refused_as_sany_does(tmp_path: Path, case: str) -> None:
    definition, (line, column), (first_line, first_column) = REBINDINGS[case]
    spec = write(tmp_path, GOOD.replace("Inv == x < 3", definition), "INIT Init NEXT Next INVARIANT Inv")
    r = check_model(spec)
    assert r.result == "error" and r.exit_code == EXIT_ERROR_SPEC_PARSE
    assert r.message == (f"{spec}:{line}:{column}: multiply-defined symbol 'p': this declaration conflicts "
                         f"with the one at line {first_line}, column {first_column}")


def test_same_name_in_sibling_binders_is_accepted(tmp_path: Path) -> None:
    definition = "Inv == (\\A p \\in {1} : p > 0) /\\ (\\E p \\in {2} : p > 0) /\\ {p \\in {1} : TRUE} # {}"
    r = check_model(write(tmp_path, GOOD.replace("Inv == x < 3", definition), "INIT Init NEXT Next INVARIANT Inv"))
    assert r.result == "success" and r.distinct_states == 3
