"""Value canonicity (exact fingerprints) and expression semantics, checked through ASSUMEs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tlacheck import check_model
from tlacheck.order import canonical
from tlacheck.values import (
    Fn,
    FnSet,
    ModelValue,
    SubsetSet,
    mkfn,
    permute,
    render,
    sortkey,
    update,
)


def test_sequences_are_functions_on_1_to_n() -> None:
    assert mkfn({1: "a", 2: "b"}) == ("a", "b")
    assert hash(mkfn({2: "b", 1: "a"})) == hash(("a", "b"))
    assert mkfn({}) == ()
    assert isinstance(mkfn({0: "a", 1: "b"}), Fn)
    assert update(("a", "b"), 2, "c") == ("a", "c")
    assert update(("a", "b"), 3, "c") == ("a", "b")  # outside the domain: unchanged


def test_records_are_functions_on_strings() -> None:
    r1 = Fn({"a": 1, "b": frozenset({1, 2})})
    r2 = mkfn({"b": frozenset({2, 1}), "a": 1})
    assert r1 == r2 and hash(r1) == hash(r2)
    assert render(r1) == "[a |-> 1, b |-> {1, 2}]"


def test_model_values_and_rendering() -> None:
    a, b = ModelValue("a"), ModelValue("b")
    assert a == ModelValue("a") and a != b and a != "a"
    assert render(frozenset({b, a})) == "{a, b}"
    assert render(Fn({a: 1, b: 2})) == "(a :> 1 @@ b :> 2)"
    assert permute(Fn({a: 1, b: 2}), {a: b, b: a}) == Fn({b: 1, a: 2})


def test_lazy_sets() -> None:
    s = SubsetSet(frozenset({1, 2}))
    assert frozenset({1}) in s and len(s) == 4 and s == frozenset(SubsetSet(frozenset({1, 2})))
    fs = FnSet(frozenset({1, 2}), frozenset({"x"}))
    assert ("x", "x") in fs and len(fs) == 1


ASSUMES = r"""
<<1, 2>> = [i \in 1..2 |-> i]
[a |-> 1, b |-> 2] = [k \in {"a", "b"} |-> IF k = "a" THEN 1 ELSE 2]
<<>> = [i \in {} |-> i]
DOMAIN <<"x", "y">> = {1, 2}
[[a |-> <<1, 2>>] EXCEPT !.a[2] = @ + 10] = [a |-> <<1, 12>>]
[f \in [{1, 2} -> {3}] |-> 0] = [g \in {<<3, 3>>} |-> 0]
{<<x, y>> : x \in {1, 2}, y \in {3}} = {1, 2} \X {3}
{x \in 1..10 : x % 3 = 0} = {3, 6, 9}
Cardinality(SUBSET {1, 2, 3}) = 8
UNION {{1}, {2, 3}} = 1..3
{1, 2} \subseteq {1, 2, 3} /\ ~({4} \subseteq {1})
Len(Append(<<1>>, 2)) = 2 /\ Head(<<5, 6>>) = 5 /\ Tail(<<5, 6>>) = <<6>>
SubSeq(<<1, 2, 3, 4>>, 2, 3) = <<2, 3>> /\ <<1>> \o <<2>> = <<1, 2>>
<<1, 2>> \in Seq({1, 2}) /\ <<3>> \notin Seq({1, 2})
SelectSeq(<<1, 2, 3, 4>>, LAMBDA x : x % 2 = 0) = <<2, 4>>
(1 :> "a" @@ 2 :> "b") = <<"a", "b">>
(CHOOSE x \in {3, 1, 2} : x > 1) \in {2, 3}
\A x \in {1, 2} : \E y \in {2, 3} : y > x
CASE FALSE -> 1 [] OTHER -> 2 = 2
LET F(x) == x * x  G == F(3) IN G = 9
(-7) \div 2 = -4 /\ (-7) % 2 = 1 /\ -7 \div 2 = -3 /\ 2^10 = 1024
[r \in {"a"} |-> 1] \in [a : {1}]
ToString(<<1, "a">>) = "<<1, \"a\">>"
Permutations({1, 2}) = {<<1, 2>>, <<2, 1>>}
Nat \cap {-1, 0, 1} = {0, 1} /\ -1 \in Int /\ "s" \in STRING
"""


@pytest.mark.parametrize("expr", [ln for ln in ASSUMES.strip().splitlines() if ln.strip()])
def test_expression_semantics(tmp_path: Path, expr: str) -> None:
    spec = (
        "---- MODULE V ----\nEXTENDS Integers, Sequences, FiniteSets, TLC\nVARIABLE x\n"
        f"ASSUME {expr}\nInit == x = 0\nNext == x' = x\n====\n"
    )
    (tmp_path / "V.tla").write_text(spec)
    (tmp_path / "V.cfg").write_text("INIT Init\nNEXT Next\n")
    r = check_model(tmp_path / "V.tla")
    assert r.result == "success", r.message


def test_state_fingerprints_identify_equal_values(tmp_path: Path) -> None:
    # x alternates between two spellings of the same value: one distinct state only.
    spec = (
        "---- MODULE W ----\nEXTENDS Naturals\nVARIABLE x\n"
        "Init == x = <<1, 2>>\n"
        "Next == x' = IF x = <<1, 2>> THEN [i \\in 1..2 |-> i] ELSE (1 :> 1 @@ 2 :> 2)\n====\n"
    )
    (tmp_path / "W.tla").write_text(spec)
    (tmp_path / "W.cfg").write_text("INIT Init\nNEXT Next\n")
    r = check_model(tmp_path / "W.tla")
    assert r.result == "success" and r.distinct_states == 1 and r.states_generated == 2


def test_a_set_of_records_is_sorted_once_and_handed_out_as_a_copy() -> None:
    records = frozenset(Fn({"n": i, "b": i % 2 == 0}) for i in range(6))
    first = canonical(records)
    first.reverse()  # the caller's list: the memoised order must not change with it
    assert canonical(records) == sorted(records, key=sortkey)
    assert canonical(records) is not canonical(records)
