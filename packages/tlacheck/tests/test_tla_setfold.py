"""Evaluation shortcuts that must not change a value: a recursion over a set by CHOOSE runs as a
loop (``setfold``), a LET definition that reads no enclosing name is one constant, and a small
constant lazy set is enumerated once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tlacheck
from tlacheck import check_model, load_model, setfold
from tlacheck.check import Checker
from tlacheck.result import EXIT_FAILURE_SPEC_EVAL
from tlacheck.syntax import NEXT, Local, fold
from tlacheck.values import BOOLEAN, NAT, FilteredSet, FnSet, ProductSet, SubsetSet, size_bound

# Ups's terms are lazy sets (a filter of a SUBSET that is not a constant) that read x when they
# are enumerated, after the next term is evaluated.
# Each fold twice: as the matcher recognises it, and spelled so that it does not (the recursive
# call's set is `(S \ {x}) \cup {}`), which evaluates the definition as written.
FOLDS = r"""
RECURSIVE Asc(_), AscW(_), Desc(_), DescW(_), Alt(_), AltW(_), Sum(_, _), SumW(_, _), Ups(_), UpsW(_)
Asc(S) == IF S = {} THEN <<>> ELSE LET x == CHOOSE x \in S : TRUE IN <<x>> \o Asc(S \ {x})
AscW(S) == IF S = {} THEN <<>> ELSE LET x == CHOOSE x \in S : TRUE IN <<x>> \o AscW((S \ {x}) \cup {})
Desc(S) == IF {} = S THEN <<>> ELSE LET y == CHOOSE z \in S : TRUE IN (Desc(S \ {y})) \o <<y>>
DescW(S) == IF {} = S THEN <<>> ELSE LET y == CHOOSE z \in S : TRUE IN (DescW((S \ {y}) \cup {})) \o <<y>>
Alt(S) == IF S = {} THEN 0 ELSE LET x == CHOOSE x \in S : TRUE IN x - Alt(S \ {x})
AltW(S) == IF S = {} THEN 0 ELSE LET x == CHOOSE x \in S : TRUE IN x - AltW((S \ {x}) \cup {})
Sum(f, S) == IF S = {} THEN 0 ELSE LET x == CHOOSE x \in S : TRUE IN f[x] + Sum(f, S \ {x})
SumW(f, S) == IF S = {} THEN 0 ELSE LET x == CHOOSE x \in S : TRUE IN f[x] + SumW(f, (S \ {x}) \cup {})
Ups(S) == IF S = {} THEN {} ELSE LET x == CHOOSE x \in S : TRUE IN
    {T \in SUBSET (x..3) : x \in T} \cup Ups(S \ {x})
UpsW(S) == IF S = {} THEN {} ELSE LET x == CHOOSE x \in S : TRUE IN
    {T \in SUBSET (x..3) : x \in T} \cup UpsW((S \ {x}) \cup {})
"""


def _module(name: str, body: str, cfg: str, tmp_path: Path) -> Path:
    spec = tmp_path / f"{name}.tla"
    spec.write_text(f"---- MODULE {name} ----\nEXTENDS Integers, Sequences, FiniteSets\n{body}\n====\n")
    (tmp_path / f"{name}.cfg").write_text(cfg)
    return spec


def test_the_recognised_folds_are_those_written_to_be(tmp_path: Path) -> None:
    spec = _module("Folds", FOLDS + "VARIABLE v\nInit == v = 0\nNext == UNCHANGED v\n", "INIT Init\nNEXT Next\n",
                   tmp_path)
    defs = load_model(spec).comp.root.defs
    matched = {name for name in ("Asc", "AscW", "Desc", "DescW", "Alt", "AltW", "Sum", "SumW", "Ups", "UpsW")
               if setfold.match(defs[name], lambda op: True) is not None}
    assert matched == {"Asc", "Desc", "Alt", "Sum", "Ups"}
    assert setfold.match(defs["Desc"], lambda op: True).term_first is False  # type: ignore[union-attr]


@pytest.mark.parametrize("sets", [
    "SUBSET {3, 1, 2, -4}",
    "{{}, {\"b\", \"a\"}, {<<2, 1>>, <<1, 2>>, <<1>>}, {1, \"a\", <<1>>, {1}, TRUE}}",
])
def test_a_fold_has_the_value_of_the_recursion_as_written(tmp_path: Path, sets: str) -> None:
    body = FOLDS + (
        f"Sets == {sets}\n"
        "ASSUME \\A S \\in Sets : Asc(S) = AscW(S) /\\ Desc(S) = DescW(S)\n"
        "ASSUME \\A S \\in Sets : (\\A x \\in S : x \\in Int) => (Alt(S) = AltW(S) /\\ "
        "Sum([y \\in S |-> 2 * y], S) = SumW([y \\in S |-> 2 * y], S))\n"
        "ASSUME Asc({3, 1, 2}) = <<1, 2, 3>> /\\ Desc({3, 1, 2}) = <<3, 2, 1>>\n"
        "ASSUME Ups({1, 3}) = UpsW({1, 3}) /\\ Ups({1, 3}) = {T \\in SUBSET 1..3 : 1 \\in T} \\cup {{3}}\n"
        "ASSUME Alt({1, 2, 3}) = 1 - (2 - (3 - 0)) /\\ Sum([y \\in 1..4 |-> y * y], 1..4) = 30\n"
        "VARIABLE v\nInit == v = 0\nNext == UNCHANGED v\n"
    )
    result = check_model(_module("Values", body, "INIT Init\nNEXT Next\n", tmp_path))
    assert result.result == "success", result.message


def test_a_fold_fails_where_the_recursion_as_written_fails(tmp_path: Path) -> None:
    # f is defined on 1 and 3 only: both spellings fail on 2, the least element outside.
    messages = []
    for name, op in (("Folded", "Sum"), ("Written", "SumW")):
        body = FOLDS + f"VARIABLE v\nInit == v = 0\nNext == v' = {op}((1 :> 10) @@ (3 :> 30), {{1, 2, 3, 4}})\n"
        result = check_model(_module(name, body, "INIT Init\nNEXT Next\n", tmp_path))
        assert result.exit_code == EXIT_FAILURE_SPEC_EVAL
        messages.append(result.message.splitlines()[0].replace(name, "M"))
    assert messages[0] == messages[1]
    assert messages[0].endswith("applied to 2 outside its domain")


@pytest.mark.parametrize(("definition", "why"), [
    (r"Op(S) == IF S = {} THEN 0 ELSE LET x == CHOOSE x \in S : TRUE IN Cardinality(S) + Op(S \ {x})",
     "the term reads S"),
    (r"Op(S) == IF S = {} THEN 0 ELSE LET x == CHOOSE x \in S : x > 0 IN x + Op(S \ {x})",
     "CHOOSE with a predicate"),
    (r"Op(S) == IF S = {} THEN 0 ELSE LET x == CHOOSE x \in S : TRUE  y == 1 IN x + Op(S \ {x})",
     "two LET definitions"),
    (r"Op(S) == IF S = {} THEN 0 ELSE LET x == CHOOSE x \in S : TRUE IN x + Op(S \ {1})",
     "another element removed"),
    (r"Op(S) == IF S # {} THEN 0 ELSE LET x == CHOOSE x \in S : TRUE IN x + Op(S \ {x})",
     "another test"),
    (r"Op(S) == IF S = {} THEN 0 ELSE LET x == CHOOSE x \in S : TRUE IN x + Op(S \ {x}) + Op(S \ {x})",
     "the recursion twice"),
])
def test_other_recursions_are_evaluated_as_written(tmp_path: Path, definition: str, why: str) -> None:
    body = f"RECURSIVE Op(_)\n{definition}\nVARIABLE v\nInit == v = 0\nNext == UNCHANGED v\n"
    spec = _module(f"Other{abs(hash(why)) % 1000}", body, "INIT Init\nNEXT Next\n", tmp_path)
    assert setfold.match(load_model(spec).comp.root.defs["Op"], lambda op: True) is None, why


def test_a_let_constant_inside_an_operator_is_one_value(tmp_path: Path) -> None:
    body = ("VARIABLE v\nInit == v = 0\nNext == UNCHANGED v\n"
            "Near(p) == LET nbrs == {d \\in {-1, 0, 1} \\X {-1, 0, 1} : d # <<0, 0>>}\n"
            "               mine == {d \\in {-1, 0, 1} : d # p}\n"
            "           IN Cardinality(nbrs) + Cardinality(mine)\n")
    model = load_model(_module("Near", body, "INIT Init\nNEXT Next\n", tmp_path))
    comp, near = model.comp, model.comp.root.defs["Near"]
    let = near.body
    locals_ = {"p": Local("val", "p")}
    nbrs, mine = (d.definiens for d in let.definitions)
    fn, deps = comp.expr(nbrs, near.scope, locals_, False)
    assert deps == 0
    assert fn(None, {}) == frozenset((x, y) for x in (-1, 0, 1) for y in (-1, 0, 1)) - {(0, 0)}  # type: ignore[arg-type]
    assert comp.expr(mine, near.scope, locals_, False)[1] != 0  # it reads p


def test_size_bounds_of_lazy_sets() -> None:
    three = frozenset({1, 2, 3})
    assert size_bound(ProductSet([three, BOOLEAN])) == 6
    assert size_bound(FilteredSet(ProductSet([three, three]), lambda v: False)) == 9
    assert size_bound(SubsetSet(three)) == 8
    assert size_bound(FnSet(three, BOOLEAN)) == 8
    assert size_bound(NAT) is None
    assert size_bound(SubsetSet(NAT)) is None


def test_small_constant_lazy_sets_are_enumerated_once() -> None:
    calls = []

    def odd(v: object) -> bool:
        calls.append(v)
        return v[0] % 2 == 1  # type: ignore[index]

    small = fold(lambda c, e: FilteredSet(ProductSet([frozenset(range(8)), BOOLEAN]), odd), 0)
    value = small(None, {})  # type: ignore[arg-type]
    assert value.materialised and len(calls) == 16
    assert sorted(value) == sorted((x, b) for x in range(1, 8, 2) for b in (False, True))
    assert len(calls) == 16  # enumerating again costs no predicate
    large = fold(lambda c, e: FilteredSet(ProductSet([frozenset(range(100)), frozenset(range(100))]), odd), 0)
    assert not large(None, {}).materialised  # type: ignore[arg-type]


# Doubling(40) re-evaluated at each of the two reads of r would take 2^40 calls.
DOUBLING = r"""
RECURSIVE Doubling(_)
Doubling(n) == IF n = 0 THEN 1 ELSE LET r == Doubling(n - 1) IN r + r
Nested(n) == LET RECURSIVE D(_)
                 D(k) == IF k = 0 THEN 1 ELSE LET r == D(k - 1) IN r + r
             IN D(n)
"""


@pytest.mark.timeout(60)
def test_a_let_definition_over_a_recursive_call_is_evaluated_once_per_entry(tmp_path: Path) -> None:
    body = DOUBLING + ("VARIABLE v\nInit == v = 0\nNext == UNCHANGED v\n"
                       "ASSUME Doubling(40) = 2^40 /\\ Nested(40) = 2^40\n")
    model = load_model(_module("Doubling", body, "INIT Init\nNEXT Next\n", tmp_path))
    comp = model.comp
    assert comp.op_body(comp.root.defs["Doubling"], False)[1] & NEXT == 0


def test_a_recursive_operator_that_reads_a_primed_variable_is_compiled_as_one(tmp_path: Path) -> None:
    body = ("VARIABLES x, y\nInit == x = 0 /\\ y = 0\n"
            "RECURSIVE Late(_)\n"
            "Late(n) == IF n = 0 THEN x' ELSE LET r == Late(n - 1) IN r\n"
            "Next == x' \\in {0, 1, 2} /\\ y' = Late(3)\n"
            "Same == x = y\n")
    spec = _module("Late", body, "INIT Init\nNEXT Next\nINVARIANT Same\n", tmp_path)
    comp = load_model(spec).comp
    assert comp.op_body(comp.root.defs["Late"], False)[1] & NEXT
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 3)


# Around(p) memoises `near` on p; Shifted's `moved` reads the variable v through `base`, and
# `Guarded`'s `pick` reads `inverse` only where it is defined: keyed on p, not on inverse's value.
MEMOISED_LETS = r"""
VARIABLE v
Init == v = 0
Next == v' = (v + 1) % 4
Around(p) == LET near == {<<p + x, x>> : x \in {-1, 0, 1}} IN near
Shifted(p) == LET base == v + p
                  moved == {x \in 0..base : x >= p}
              IN Cardinality(moved)
Guarded(p) == LET inverse == 12 \div p
                  pick == IF p = 0 THEN {} ELSE {x \in 1..inverse : x = 1}
              IN pick
Ok == /\ \A p \in 0..5 : Around(p) = {<<p - 1, -1>>, <<p, 0>>, <<p + 1, 1>>}
      /\ \A p \in 0..3 : Shifted(p) = v + 1
      /\ Guarded(0) = {} /\ Guarded(3) = {1}
"""


def test_a_let_definition_that_reads_no_variable_is_memoised_on_what_it_reads(tmp_path: Path) -> None:
    spec = _module("Memoised", MEMOISED_LETS, "INIT Init\nNEXT Next\nINVARIANT Ok\n", tmp_path)
    result = check_model(spec)
    assert (result.result, result.distinct_states) == ("success", 4)
    # Checked over 4 states with `moved` memoised on p alone, Shifted(p) would stay v + 1 of v = 0.
    model = load_model(spec)
    Checker(model).run()
    memos = [m for m in model.comp.op_memos.values() if m and all(type(k) is tuple and len(k) == 1 for k in m)]
    near = {k[0]: v for m in memos for k, v in m.items() if len(v) == 3}
    assert near[2] == frozenset({(1, -1), (2, 0), (3, 1)}) and set(near) == set(range(6))
    assert {k[0]: v for m in memos for k, v in m.items() if len(v) < 3} == {0: frozenset(), 3: frozenset({1})}


# Each LET entry is compiled afresh (closures, then generated code), and its definitions' compile-
# time records died with it: a record found by a dead one's id() lent `moved` the keys of another
# definition (p alone), and which address was reused depended on the hash seed (9 seeds of 40).
RUN_TWICE = ("import json, sys; from tlacheck import check_model; "
             "print(json.dumps([[r.result, r.distinct_states, r.violated] "
             "for r in (check_model(sys.argv[1]), check_model(sys.argv[1]))]))")


@pytest.mark.parametrize("seed", [0, 1, 2, 5, 19, 23])
def test_memoised_lets_give_tlcs_answer_under_every_hash_seed(tmp_path: Path, seed: int) -> None:
    spec = _module("Memoised", MEMOISED_LETS, "INIT Init\nNEXT Next\nINVARIANT Ok\n", tmp_path)
    env = {**os.environ, "PYTHONHASHSEED": str(seed),
           "PYTHONPATH": os.pathsep.join([str(Path(tlacheck.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", RUN_TWICE, str(spec)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    # TLC: 4 distinct states, no error.
    assert json.loads(done.stdout) == [["success", 4, None], ["success", 4, None]]
