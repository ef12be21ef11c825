"""Inputs that must never give a traceback, a hang without output or a silent pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from tlacheck import check_model, cli
from tlacheck.monitor import EXIT_INTERRUPTED, Halt, Monitor
from tlacheck.result import (
    EXIT_ERROR_SPEC_PARSE,
    EXIT_ERROR_STATESPACE_TOO_LARGE,
    EXIT_VIOLATION_ASSUMPTION,
)

COUNTER = "---- MODULE {name} ----\nEXTENDS Naturals\nVARIABLE x\nInit == x = 0\nNext == x' = x + 1\n====\n"


def model(tmp_path: Path, name: str, text: str | bytes, cfg: str | bytes = "INIT Init\nNEXT Next\n") -> Path:
    spec = tmp_path / f"{name}.tla"
    spec.write_bytes(text if isinstance(text, bytes) else text.encode())
    (tmp_path / f"{name}.cfg").write_bytes(cfg if isinstance(cfg, bytes) else cfg.encode())
    return spec


def test_non_utf8_module_is_one_located_error_with_exit_2(tmp_path: Path) -> None:
    spec = model(tmp_path, "Bin", b"---- MODULE Bin ----\nVARIABLE x\n\xe9\xff Init == x = 0\n====\n")
    result = check_model(spec)
    assert result.result == "error" and result.exit_code == 2
    assert f"{spec}:3:1: not UTF-8 text (byte 0xE9)" in result.message


def test_latin1_byte_in_a_comment_is_accepted_like_tlc(tmp_path: Path) -> None:
    spec = model(tmp_path, "Caf", b"---- MODULE Caf ----\nVARIABLE x\n\\* caf\xe9\nInit == x = 0\n"
                                  b"Next == x' = x\n====\n")
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 1)


def test_binary_config_is_located(tmp_path: Path) -> None:
    spec = model(tmp_path, "C", COUNTER.format(name="C"), b"INIT Init\x00\xff\xfe\n")
    result = check_model(spec)
    assert result.exit_code == 2 and "C.cfg:1:" in result.message and "not UTF-8" in result.message


def test_module_name_must_match_file_name(tmp_path: Path) -> None:
    spec = model(tmp_path, "Other", COUNTER.format(name="Counter"))
    result = check_model(spec)
    assert result.exit_code == EXIT_ERROR_SPEC_PARSE
    assert "file name Other.tla does not match the name Counter" in result.message


def test_empty_init_warns(tmp_path: Path) -> None:
    spec = model(tmp_path, "E", "---- MODULE E ----\nVARIABLE x\nInit == x = 0 /\\ x = 1\nNext == UNCHANGED x\n====\n")
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 0)
    assert result.message.startswith("Warning: no state satisfies the initial predicate")


def test_deep_recursion_evaluates(tmp_path: Path) -> None:
    spec = model(tmp_path, "D", "---- MODULE D ----\nEXTENDS Naturals\nRECURSIVE Sum(_)\n"
                                "Sum(n) == IF n = 0 THEN 0 ELSE n + Sum(n - 1)\n"
                                "f[n \\in Nat] == IF n = 0 THEN 0 ELSE 1 + f[n - 1]\nVARIABLE x\n"
                                "Init == x = Sum(10000) + f[5000]\nNext == UNCHANGED x\n"
                                "Inv == x = 50005000 + 5000\n====\n", "INIT Init\nNEXT Next\nINVARIANT Inv\n")
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 1), result.message


def test_infinite_state_space_stops_at_the_memory_limit_with_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = model(tmp_path, "Inf", COUNTER.format(name="Inf"))
    result = check_model(spec, max_memory_mb=1, progress=True)
    assert result.exit_code == EXIT_ERROR_STATESPACE_TOO_LARGE
    assert "passed --max-memory 1 MiB" in result.message and result.distinct_states >= 256
    err = capsys.readouterr().err
    assert "Running breadth-first search" in err and "Computing initial states" in err


def test_monitor_interrupt_and_progress_lines(capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monitor = Monitor(sys.stderr, max_memory_mb=None, interval=0.0)
    monitor.tick(10, 5, 2, 3)
    assert "10 states generated" in capsys.readouterr().err
    monitor.interrupt()
    with pytest.raises(Halt) as info:
        monitor.tick(11, 5, 2, 3)
    assert info.value.exit_code == EXIT_INTERRUPTED == 130


def test_config_without_behaviour_evaluates_assumes_only(tmp_path: Path) -> None:
    ok = model(tmp_path, "A", "---- MODULE A ----\nEXTENDS Naturals\nCONSTANT N\nASSUME N > 2\n====\n",
               "CONSTANT N = 3\n")
    assert (check_model(ok).result, check_model(ok).distinct_states) == ("success", 0)
    bad = model(tmp_path, "B", "---- MODULE B ----\nEXTENDS Naturals\nCONSTANT N\nASSUME N > 2\n====\n",
                "CONSTANT N = 1\n")
    assert check_model(bad).exit_code == EXIT_VIOLATION_ASSUMPTION


@pytest.mark.parametrize("value", ["0", "-1", "x"])
def test_max_states_must_be_positive(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = model(tmp_path, "C", COUNTER.format(name="C"))
    with pytest.raises(SystemExit) as info:
        cli.main(["check", str(spec), "--engine", "embedded", f"--max-states={value}"])
    assert info.value.code == 2
    assert "--max-states" in capsys.readouterr().err


def test_cli_reports_non_utf8_as_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = model(tmp_path, "Bin", b"---- MODULE Bin ----\n\xff\xfe\n====\n")
    code = cli.main(["check", str(spec), "--engine", "embedded"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Bin.tla:2:1: not UTF-8" in err


def test_eval_error_report_has_one_error_prefix_and_one_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = model(tmp_path, "V", "---- MODULE V ----\nEXTENDS Naturals\nVARIABLE x\nInit == x = 0\n"
                                "Next == x' = x + {1}\n====\n")
    code = cli.main(["check", str(spec), "--engine", "embedded", "--quiet"])
    out = capsys.readouterr().out
    assert code == 75
    assert "Error: Error:" not in out and out.count("states generated") == 1


def test_product_of_three_or_more_factors(tmp_path: Path) -> None:
    spec = model(tmp_path, "X3", "---- MODULE X3 ----\nEXTENDS Naturals\nVARIABLE x\n"
                                 "Init == x \\in {1} \\X {2, 3} \\X {4}\n"
                                 "Next == x' \\in (1..2) \\X (1..2) \\X (1..2) \\X {0}\n"
                                 "Inv == Len(x) \\in {3, 4}\n====\n", "INIT Init\nNEXT Next\nINVARIANT Inv\n")
    spec.write_text(spec.read_text().replace("EXTENDS Naturals", "EXTENDS Naturals, Sequences"))
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 2 + 8), result.message


HOUR_CLOCK = """---- MODULE LiveHourClock ----
EXTENDS Naturals
VARIABLE hr
HCini == hr \\in (1 .. 12)
HCnxt == hr' = IF hr # 12 THEN hr + 1 ELSE 1
HC == HCini /\\ [][HCnxt]_hr
LSpec == HC /\\ WF_hr(HCnxt)
AlwaysTick == []<><<HCnxt>>_hr
AllTimes == \\A n \\in 1..12 : []<>(hr = n)
====
"""


@pytest.mark.parametrize(("spec", "outcome"), [("LSpec", "success"), ("HC", "liveness failure")])
def test_live_hour_clock(spec: str, outcome: str, tmp_path: Path) -> None:
    path = model(tmp_path, "LiveHourClock", HOUR_CLOCK, f"SPECIFICATION {spec}\nPROPERTIES AlwaysTick AllTimes\n")
    result = check_model(path)
    assert (result.result, result.distinct_states) == (outcome, 12), result.message
    if outcome != "success":
        assert result.violated == "AlwaysTick"


def test_membership_in_infinite_sets_without_enumerating(tmp_path: Path) -> None:
    facts = [r"3 \in Nat", r"-1 \notin Nat", r"-1 \in Int", r"<<1, 2>> \in Seq(Nat)", r"<<-1>> \notin Seq(Nat)",
             r"[x \in {1} |-> 3] \in [{1} -> Nat]", r'"a" \in STRING', r"{1, 2} \in SUBSET Nat",
             r"0 \notin Nat \ {0}", r"{-1} \notin SUBSET Nat", r"7 \in {n \in Nat : n > 5}"]
    assumes = "\n".join(f"ASSUME {f}" for f in facts)
    spec = model(tmp_path, "I", f"---- MODULE I ----\nEXTENDS Integers, Sequences\n{assumes}\nVARIABLE x\n"
                                "Init == x \\in {0, 1}\nNext == UNCHANGED x\nTypeOK == x \\in Nat /\\ [v |-> x] \\in "
                                "[v : Nat]\n====\n", "INIT Init\nNEXT Next\nINVARIANT TypeOK\n")
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 2), result.message


ABSTRACT = """---- MODULE Abs ----
EXTENDS Naturals
VARIABLE y
Init == y = 0
Next == y' = (y + 1) % 2
Spec == Init /\\ [][Next]_y /\\ WF_y(Next)
====
"""


@pytest.mark.parametrize(("fair", "outcome"), [("/\\ WF_x(Next)", "success"), ("", "liveness failure")])
def test_refinement_property_with_fairness(fair: str, outcome: str, tmp_path: Path) -> None:
    (tmp_path / "Abs.tla").write_text(ABSTRACT)
    spec = model(tmp_path, "Conc", "---- MODULE Conc ----\nEXTENDS Naturals\nVARIABLE x\n"
                                   "Init == x = 0\nNext == x' = (x + 1) % 4\n"
                                   f"Spec == Init /\\ [][Next]_x {fair}\n"
                                   "A == INSTANCE Abs WITH y <- x % 2\nAbsSpec == A!Spec\n====\n",
                 "SPECIFICATION Spec\nPROPERTY AbsSpec\n")
    result = check_model(spec)
    assert (result.result, result.distinct_states) == (outcome, 4), result.message
    if outcome != "success":
        assert result.violated == "AbsSpec"


def test_refinement_property_catches_a_wrong_step(tmp_path: Path) -> None:
    (tmp_path / "Abs.tla").write_text(ABSTRACT)
    spec = model(tmp_path, "Conc", "---- MODULE Conc ----\nEXTENDS Naturals\nVARIABLE x\n"
                                   "Init == x = 0\nNext == x' = (x + 2) % 4\nSpec == Init /\\ [][Next]_x\n"
                                   "A == INSTANCE Abs WITH y <- x % 3\nAbsSpec == A!Spec\n====\n",
                 "SPECIFICATION Spec\nPROPERTY AbsSpec\n")
    result = check_model(spec)
    assert result.result == "safety failure" and result.violated == "AbsSpec", result.message


def test_recursive_function_of_two_arguments_and_alias(tmp_path: Path) -> None:
    spec = model(tmp_path, "R", "---- MODULE R ----\nEXTENDS Naturals\n"
                                "binom[n \\in 0..6, k \\in 0..6] == IF k = 0 \\/ k = n THEN 1 ELSE IF k > n THEN 0\n"
                                "    ELSE binom[n - 1, k - 1] + binom[n - 1, k]\n"
                                "VARIABLE x\nInit == x = binom[6, 3]\nNext == UNCHANGED x\nInv == x = 20\n"
                                "Alias == [x |-> x, twice |-> 2 * x]\n====\n",
                 "INIT Init\nNEXT Next\nINVARIANT Inv\nALIAS Alias\n")
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 1), result.message
    (tmp_path / "R.cfg").write_text("INIT Init\nNEXT Next\nALIAS NoSuchAlias\n")
    bad = check_model(spec)
    assert bad.result == "error" and "R.cfg:3:" in bad.message and "NoSuchAlias" in bad.message
