"""The generated actions (codegen.py) against the closures they replace: same successors in the
same order with the same labels, same invariant values, same located errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tlacheck.action as action_mod
import tlacheck.check as check_mod
from tlacheck import TlaError, check_model, load_model
from tlacheck.check import Checker
from tlacheck.monitor import Monitor
from tlacheck.syntax import EMPTY, UNSET, Ctx

ROOT = Path(__file__).resolve().parents[3]
KV = ROOT / "tla" / "KVOffload.tla"
KV_CFG = ROOT / "tla" / "KVOffload.cfg"


def use_closures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compile actions and invariants as closures only (the generator answers "cannot")."""
    monkeypatch.setattr(action_mod, "generate", lambda *a: None)
    monkeypatch.setattr(check_mod, "generate_expr", lambda *a: None)


@pytest.fixture
def closures_only(monkeypatch: pytest.MonkeyPatch) -> None:
    use_closures(monkeypatch)


def successors(model: Any, states: list[tuple[Any, ...]]) -> list[list[tuple[str | None, tuple[Any, ...]]]]:
    nv = len(model.variables)
    out = []
    for s in states:
        c = Ctx(s, [UNSET] * nv)
        out.append([(lab, tuple(c.n)) for lab in model.next(c, EMPTY)])  # type: ignore[arg-type]
    return out


def test_kvoffload_next_is_generated_and_agrees_with_the_closures(monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model(KV, KV_CFG)
    cells = dict(zip(model.next.__code__.co_freevars, model.next.__closure__ or (), strict=True))
    assert cells["next_gen"].cell_contents.__code__.co_filename == "<tla action>"
    checker = Checker(model, monitor=Monitor(None, None))
    checker.run()
    states = checker.states[::7]
    generated = successors(model, states)
    invariants = [[fn(Ctx(s, None), env) for _n, fn, env in model.invariants] for s in states]

    use_closures(monkeypatch)
    plain = load_model(KV, KV_CFG)
    assert successors(plain, states) == generated
    assert [[fn(Ctx(s, None), env) for _n, fn, env in plain.invariants] for s in states] == invariants
    assert sum(len(x) for x in generated) > len(states)


BAD = """---- MODULE M ----
EXTENDS Naturals
VARIABLES x, f
Init == x = 0 /\\ f = [i \\in {1, 2} |-> 0]
Step(i) == /\\ x < 3
           /\\ x' = x + 1
           /\\ f' = [f EXCEPT ![i] = f[i + x] + 1]
Next == \\E i \\in {1, 2} : Step(i)
====
"""


def run_bad(tmp_path: Path) -> tuple[str, str, list[str]]:
    (tmp_path / "M.tla").write_text(BAD)
    (tmp_path / "M.cfg").write_text("INIT Init\nNEXT Next\n")
    r = check_model(tmp_path / "M.tla")
    return r.result, r.message, [step.action for step in r.trace]


def test_errors_are_located_as_by_the_closures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    generated = run_bad(tmp_path)
    assert generated[0] == "error"
    assert "M.tla:8:27 (Step): function <<1, 0>> applied to 3 outside its domain" in generated[1]
    use_closures(monkeypatch)
    assert run_bad(tmp_path) == generated


@pytest.mark.parametrize("mode", ["generated", "closures"])
def test_kvoffload_counts(mode: str, request: pytest.FixtureRequest) -> None:
    if mode == "closures":
        request.getfixturevalue("closures_only")
    r = check_model(KV, KV_CFG)
    assert (r.result, r.distinct_states, r.states_generated, r.depth) == ("success", 12448, 58979, 25)


def test_an_unsupported_construct_in_an_operator_is_reported_by_the_closures(tmp_path: Path) -> None:
    spec = """---- MODULE M ----
VARIABLE x
F(a) == 1.5
Init == x = 0
Next == x' = F(x)
====
"""
    (tmp_path / "M.tla").write_text(spec)
    (tmp_path / "M.cfg").write_text("INIT Init\nNEXT Next\n")
    with pytest.raises(TlaError) as info:
        load_model(tmp_path / "M.tla")
    assert "M.tla:3:9: unsupported construct: real numbers" in str(info.value)


def test_calls_with_assigned_variables_run_the_closures_and_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated code assumes no variable is assigned on entry; a call with some assigned
    (as a composition makes) must give the closures' successors, which test the assignments."""
    model = load_model(KV, KV_CFG)
    checker = Checker(model, monitor=Monitor(None, None))
    checker.run()
    states = checker.states[::11]
    nv = len(model.variables)

    def partly_assigned(m: Any) -> list[list[tuple[str | None, tuple[Any, ...]]]]:
        out = []
        for s in states:
            for i in range(nv):
                n = [UNSET] * nv
                n[i] = s[i]  # the variable keeps its value: only steps that leave it unchanged
                c = Ctx(s, n)
                out.append([(lab, tuple(c.n)) for lab in m.next(c, EMPTY)])  # type: ignore[arg-type]
        return out

    generated = partly_assigned(model)
    use_closures(monkeypatch)
    assert partly_assigned(load_model(KV, KV_CFG)) == generated
    assert any(generated) and not all(generated)


def test_fairness_of_the_same_action_per_request_is_generated_once() -> None:
    model = load_model(KV, KV_CFG)
    gens = [gen for _kind, gen, _v, _vp, _env in model.fairness]
    assert len(gens) == 4  # WF of BuildMeta(r) and JobDoneOf(r) for r1 and r2
    assert all(g.__code__.co_filename == "<tla action>" for g in gens)
    assert len({id(g) for g in gens}) == 2


def test_calls_nested_past_pythons_block_limit_are_generated_without_inlining(tmp_path: Path) -> None:
    """Calls generated in place nest a ``try`` and a ``for`` per level: deeper than Python's 20
    nested blocks, the action is generated again with one generator per call."""
    ops = [f"Op{k}(i) == \\E j{k} \\in {{i, i + 1}} : Op{k + 1}(j{k})" for k in range(1, 12)]
    spec = "\n".join(["---- MODULE M ----", "EXTENDS Naturals", "VARIABLE x", "Op12(i) == x' = (x + i) % 5",
                      *reversed(ops), "Init == x = 0", "Next == Op1(x)", "===="])
    (tmp_path / "M.tla").write_text(spec)
    (tmp_path / "M.cfg").write_text("INIT Init\nNEXT Next\n")
    model = load_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    cells = dict(zip(model.next.__code__.co_freevars, model.next.__closure__ or (), strict=True))
    assert cells["next_gen"].cell_contents.__code__.co_filename == "<tla action>"
    r = check_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert (r.result, r.distinct_states) == ("success", 5)


MEMO_AFTER_ASSIGNMENT = """---- MODULE M ----
EXTENDS Naturals
VARIABLES x, y
vars == <<x, y>>
Init == x = 0 /\\ y = 0
Pick == \\E v \\in 0..2 : x' = v
Bump == y' = (y + 1) % 3
Next == Pick /\\ Bump
Spec == Init /\\ [][Next]_vars /\\ WF_vars(Next)
Live == <>(y = 2)
====
"""


@pytest.mark.parametrize("mode", ["generated", "closures"])
def test_a_memoised_call_after_an_assignment_is_not_replayed(
    mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Bump's successors are memoised (WF_vars(Next) makes Next's operator actions fairness
    actions); called after Pick assigned x', they must not be replayed from the first x'."""
    if mode == "closures":
        request.getfixturevalue("closures_only")
    (tmp_path / "M.tla").write_text(MEMO_AFTER_ASSIGNMENT)
    (tmp_path / "M.cfg").write_text("SPECIFICATION Spec\nPROPERTY Live\n")
    r = check_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert (r.result, r.distinct_states, r.states_generated) == ("success", 9, 28)


CHANNELS = """---- MODULE M ----
EXTENDS Naturals, Sequences
VARIABLES net, r
Init == /\\ net = [p \\in 1..2 |-> [q \\in 1..2 |-> <<>>]]
        /\\ r = [a \\in {"x", "y"} |-> [n |-> 0, s |-> <<>>]]
Send(p, q) == /\\ Len(net[p][q]) < 2
              /\\ net' = [net EXCEPT ![p][q] = Append(@, p + q), ![q][5] = <<9>>]
              /\\ UNCHANGED r
Recv(p, q) == /\\ net[p][q] # <<>>
              /\\ LET m == Head(net[p][q])
                      k == m + Len(net[q][p])
                 IN /\\ m > 2
                    /\\ net' = [net EXCEPT ![p][q] = Tail(@), ![q][p] = @]
                    /\\ r' = [r EXCEPT !["x"].n = (@ + k) % 3, !["y"].s = <<m>>, !["z"].n = 7]
Lazy(p) == LET m == Head(net[p][p]) IN /\\ net[p][p] # <<>>
                                       /\\ m = 1
                                       /\\ UNCHANGED <<net, r>>
Next == \\E p, q \\in 1..2 : Send(p, q) \\/ Recv(p, q) \\/ Lazy(p)
====
"""


def test_nested_except_sequences_and_let_entries_agree_with_the_closures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two-level EXCEPT paths over sequences of sequences and functions of records (keys outside
    the domain leave the value unchanged), the sequence operators, and a LET whose first
    conjunct reads ``m`` first (bound on entry) next to one whose first conjunct does not
    (``Lazy``: ``m`` is the head of an empty sequence in most states and must not be evaluated)."""
    (tmp_path / "M.tla").write_text(CHANNELS)
    (tmp_path / "M.cfg").write_text("INIT Init\nNEXT Next\n")
    model = load_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    checker = Checker(model, monitor=Monitor(None, None))
    checker.run()
    generated = successors(model, checker.states)
    counts = check_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert counts.result == "success"
    use_closures(monkeypatch)
    plain = load_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert successors(plain, checker.states) == generated
    again = check_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert (again.result, again.distinct_states, again.states_generated, again.depth) == (
        counts.result, counts.distinct_states, counts.states_generated, counts.depth)
    assert counts.distinct_states > 20
    assert {lab for succ in generated for lab, _t in succ} == {"Send", "Recv"}
    assert any(t[1].d["x"].d["n"] > 0 and t[1].d["y"].d["s"] for succ in generated for _lab, t in succ)


EMPTY_HEAD = """---- MODULE M ----
EXTENDS Naturals, Sequences
VARIABLE s
Init == s = <<1>>
Next == LET m == Head(s) IN m = 1 /\\ s' = Tail(s)
====
"""


def test_a_let_definition_evaluated_on_entry_fails_as_in_the_closures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "M.tla").write_text(EMPTY_HEAD)
    (tmp_path / "M.cfg").write_text("INIT Init\nNEXT Next\n")
    generated = check_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert generated.result == "error"
    assert "M.tla:5:18 (Head): Head applied to the empty sequence" in generated.message
    use_closures(monkeypatch)
    plain = check_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert (plain.result, plain.message, [st.action for st in plain.trace]) == (
        generated.result, generated.message, [st.action for st in generated.trace])
