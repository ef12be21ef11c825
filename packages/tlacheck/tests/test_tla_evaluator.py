"""The evaluator's fast paths give the answers of the plain definitions: memoised pure operators,
symmetry representatives, the native canonical order, and located errors for recursion past the
evaluator's stack."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tlacheck import check_model
from tlacheck.order import canonical, least
from tlacheck.result import EXIT_FAILURE_SPEC_EVAL
from tlacheck.symmetry import Canonicaliser
from tlacheck.values import BOOLEAN, Fn, FnSet, ModelValue, ProductSet, SubsetSet, sortkey


def model(tmp_path: Path, name: str, text: str, cfg: str = "INIT Init\nNEXT Next\n") -> Path:
    spec = tmp_path / f"{name}.tla"
    spec.write_text(text)
    (tmp_path / f"{name}.cfg").write_text(cfg)
    return spec


@pytest.mark.parametrize(("call", "where", "what"), [
    ("Sum(x - 1)", ":5:1:", "recursion of the operator Sum"),
    ("Cnt(x - 1, {})", ":7:1:", "recursion of the operator Cnt"),
    ("f[x - 1]", ":3:1:", "recursion of the function f"),
])
def test_recursion_without_base_case_is_one_located_line(tmp_path: Path, call: str, where: str, what: str) -> None:
    # Sum is memoised (pure); Cnt reads the variable x, so it is not: both paths are located.
    spec = model(tmp_path, "Deep", "---- MODULE Deep ----\nEXTENDS Integers\n"
                 "f[n \\in Int] == IF n = 0 THEN 0 ELSE 1 + f[n - 1]\nRECURSIVE Sum(_), Cnt(_, _)\n"
                 "Sum(n) == IF n = 0 THEN 0 ELSE n + Sum(n - 1)\nVARIABLE x\n"
                 "Cnt(n, s) == IF n = 0 THEN x ELSE Cnt(n - 1, s)\n"
                 f"Init == x = 0\nNext == x < 1 /\\ x' = {call}\n====\n")
    result = check_model(spec)
    assert result.exit_code == EXIT_FAILURE_SPEC_EVAL
    error = result.message.splitlines()[0]
    assert f"{spec}{where} {what} is deeper than the evaluator's stack allows" in error
    assert error.count(str(spec)) == 1, error


def test_builtin_error_is_located_once(tmp_path: Path) -> None:
    spec = model(tmp_path, "Hd", "---- MODULE Hd ----\nEXTENDS Sequences\nVARIABLE x\nInit == x = 0\n"
                 "Next == x' = Head(<<>>)\n====\n")
    result = check_model(spec)
    assert result.exit_code == EXIT_FAILURE_SPEC_EVAL
    assert f"{spec}:5:14 (Head): Head applied to the empty sequence" in result.message
    assert result.message.count(f"{spec}:5:14") == 1


def test_memoised_operators_see_each_state(tmp_path: Path) -> None:
    # Reach reads the variable edges (through Succ), so it must not be memoised on its argument
    # alone; Closure is pure and memoised. Both must give the plain definitions' values in every
    # state: the invariant compares them.
    spec = model(tmp_path, "Memo", "---- MODULE Memo ----\nEXTENDS Naturals, FiniteSets\nVARIABLE edges\n"
                 "N == 1..3\nSucc(v) == {w \\in N : <<v, w>> \\in edges}\nRECURSIVE Reach(_)\n"
                 "Reach(S) == LET T == S \\cup UNION {Succ(v) : v \\in S} IN IF T = S THEN S ELSE Reach(T)\n"
                 "RECURSIVE Closure(_, _)\n"
                 "Closure(E, S) == LET T == S \\cup {w \\in N : \\E v \\in S : <<v, w>> \\in E} IN\n"
                 "    IF T = S THEN S ELSE Closure(E, T)\n"
                 "Init == edges = {}\nNext == \\E v, w \\in N : edges' = edges \\cup {<<v, w>>}\n"
                 "Inv == \\A v \\in N : Reach({v}) = Closure(edges, {v})\n"
                 "Grow == Cardinality(Reach({1})) <= 2\n====\n", "INIT Init\nNEXT Next\nINVARIANT Inv\n")
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 2 ** 9)
    (spec.parent / "Memo.cfg").write_text("INIT Init\nNEXT Next\nINVARIANT Grow\n")
    assert check_model(spec).result == "safety failure"


def test_symmetry_representative_is_constant_on_each_orbit() -> None:
    a, b, c = (ModelValue(n) for n in ("a", "b", "c"))
    perms = [dict(zip((a, b, c), p, strict=True)) for p in itertools.permutations((a, b, c))]
    canon = Canonicaliser(perms)
    state = (Fn({a: 1, b: 2, c: 2}), frozenset({(a, b), (b, c)}), a)
    images = {tuple(_permute(v, p) for v in state) for p in perms}
    assert len({canon(t) for t in images}) == 1
    other = (Fn({a: 1, b: 1, c: 2}), frozenset({(a, b), (b, c)}), a)
    assert canon(other) != canon(state)


def _permute(v: object, perm: dict[ModelValue, ModelValue]) -> object:
    if type(v) is ModelValue:
        return perm.get(v, v)
    if type(v) is tuple:
        return tuple(_permute(x, perm) for x in v)
    if type(v) is frozenset:
        return frozenset(_permute(x, perm) for x in v)
    if type(v) is Fn:
        return Fn({_permute(k, perm): _permute(x, perm) for k, x in v.d.items()})
    return v


@pytest.mark.parametrize("values", [
    frozenset({3, -1, 10, 0}),
    frozenset({"b", "a", "ab"}),
    frozenset(ModelValue(n) for n in ("n2", "n10", "n1")),
    frozenset({(2, 1), (1, 5), (1, -3)}),
    frozenset({(2, 1), (1,), ()}),
    frozenset({1, "a", (1, 2), frozenset({1})}),
])
def test_native_order_is_the_canonical_order(values: frozenset[object]) -> None:
    assert canonical(values) == sorted(values, key=sortkey)
    assert least(values) == min(values, key=sortkey)


@pytest.mark.parametrize("lazy", [
    FnSet(frozenset({1, 2, 3}), frozenset({"x", 0, True})),
    FnSet(frozenset({ModelValue("p"), ModelValue("q")}), frozenset({(1, 2), (0,), frozenset()})),
    FnSet(frozenset(), BOOLEAN),
    ProductSet([frozenset({2, 1}), frozenset({"b", "a"}), BOOLEAN]),
    SubsetSet(frozenset({3, 1, 2, "a"})),
])
def test_lazy_sets_are_generated_in_the_canonical_order(lazy: object) -> None:
    assert canonical(lazy) == sorted(lazy.mat(), key=sortkey)  # type: ignore[attr-defined]


def test_functions_on_one_to_n_enumerate_as_tuples_and_others_as_functions() -> None:
    assert list(FnSet(frozenset({2, 1}), frozenset({0, 1})).enumerate()) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # TRUE == 1 in Python: a function on {TRUE} is no sequence.
    assert list(FnSet(frozenset({True}), frozenset({7})).enumerate()) == [Fn({True: 7})]


def test_binding_a_non_tuple_to_a_tuple_of_names_is_an_evaluation_error(tmp_path: Path) -> None:
    spec = model(tmp_path, "Bind", "---- MODULE Bind ----\nVARIABLE x\n"
                 "Init == x = {a + b : <<a, b>> \\in {<<1, 2>>, 3}}\nNext == UNCHANGED x\n====\n")
    result = check_model(spec)
    assert result.exit_code == EXIT_FAILURE_SPEC_EVAL
    assert "cannot bind 3 to a tuple of 2 names" in result.message


def test_a_constant_bound_is_enumerated_in_the_canonical_order_by_init_and_invariant(tmp_path: Path) -> None:
    # SortedPairs is compiled for Init (primed) and for the invariant, sharing its value.
    spec = model(tmp_path, "Pairs", "---- MODULE Pairs ----\nEXTENDS Naturals\nVARIABLE x\n"
                 "SortedPairs == {p \\in [1..2 -> 0..3] : p[1] <= p[2]}\n"
                 "Init == x \\in SortedPairs\nNext == UNCHANGED x\nInv == x \\in SortedPairs\n====\n",
                 "INIT Init\nNEXT Next\nINVARIANT Inv\n")
    result = check_model(spec)
    assert result.result == "success" and result.distinct_states == 10


# ChooseOne of CigaretteSmokers: the operator argument reads the variable, so the LET definition
# over the call is no constant (folded once, it pointed at the first smoker forever: 12 states).
@pytest.mark.parametrize("argument", ["LAMBDA x : on[x]", "IsOn"])
def test_an_operator_argument_that_reads_a_variable_is_no_constant(tmp_path: Path, argument: str) -> None:
    spec = model(tmp_path, "Chooser", "---- MODULE Chooser ----\nVARIABLE on\n"
                 "ChooseOne(S, P(_)) == CHOOSE x \\in S : P(x) /\\ \\A y \\in S : P(y) => y = x\n"
                 "IsOn(x) == on[x]\n"
                 "Init == on \\in {[i \\in {1, 2, 3} |-> i = j] : j \\in {1, 2, 3}}\n"
                 f"Next == LET r == ChooseOne({{1, 2, 3}}, {argument}) IN on' = [on EXCEPT ![r] = FALSE]\n"
                 "Inv == \\E i \\in {1, 2, 3} : on[i]\n====\n",
                 "INIT Init\nNEXT Next\nINVARIANT Inv\n")
    result = check_model(spec)
    # TLC: from each of the 3 initial states, the one on is switched off (a violation at depth 2).
    assert (result.result, result.violated, len(result.trace)) == ("safety failure", "Inv", 2), result.message


# TLC's answers to each (SANY applies SUBSET and UNION before the set operators that follow).
@pytest.mark.parametrize(("expression", "tlc"), [
    ("{{1}} \\cup UNION {{{2}}} \\cup UNION {{{3}}}", "{{1}, {2}, {3}}"),
    ("UNION {{2}} \\cup {3}", "{2, 3}"),
    ("UNION {{2}} \\union UNION {{3}} \\cup {4}", "{2, 3, 4}"),
    ("SUBSET {1} \\cup {{2}}", "{{}, {1}, {2}}"),
    ("SUBSET {1} \\cap {{}}", "{{}}"),
    ("{{1}} \\cup SUBSET {2} \\cup {{3}}", "{{}, {1}, {2}, {3}}"),
    ("UNION {{1}} \\ {1}", "{}"),
    ("SUBSET (({1} \\cup {2}))", "{{}, {1}, {2}, {1, 2}}"),
    ("UNION {{2}} = {2}", "TRUE"),
    ("[1..2 -> {1, 2}] \\ Seq({1})", "{<<1, 2>>, <<2, 1>>, <<2, 2>>}"),
    ("[1..2 -> {1, 2}] \\subseteq Seq({1})", "FALSE"),
    ("<<1>> \\in Seq({1}) \\cap Seq({1, 2})", "TRUE"),
    ("Seq({1}) \\cap [1..2 -> {1, 2}]", "{<<1, 1>>}"),
])
def test_set_operators_as_tlc_reads_and_evaluates_them(tmp_path: Path, expression: str, tlc: str) -> None:
    spec = model(tmp_path, "Sets", "---- MODULE Sets ----\nEXTENDS Sequences, TLC\n"
                 f'ASSUME ToString({expression}) = "{tlc}"\n====\n', "")
    result = check_model(spec)
    assert result.result == "success", result.message


def test_an_override_of_a_standard_operator_reaches_an_instanced_module(tmp_path: Path) -> None:
    # MCMajority: `Seq <- BoundedSeq` in the config, Seq read by the module it INSTANCEs.
    (tmp_path / "Inner.tla").write_text("---- MODULE Inner ----\nEXTENDS Sequences\nVARIABLE s\n"
                                        "Init == s \\in Seq({0, 1})\nNext == UNCHANGED s\n====\n")
    spec = model(tmp_path, "Outer", "---- MODULE Outer ----\nEXTENDS Naturals\nVARIABLE s\n"
                 "Bounded(S) == UNION {[1..n -> S] : n \\in 0..2}\nINSTANCE Inner\n====\n",
                 "INIT Init\nNEXT Next\nCONSTANT Seq <- Bounded\n")
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 7), result.message
