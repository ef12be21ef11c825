"""The community modules shipped in tlacheck/library, each operator against a Python
reference of its definition (random small inputs, compared through ASSUME)."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from tlacheck import check_model
from tlacheck.result import EXIT_SUCCESS, EXIT_VIOLATION_ASSUMPTION

RNG = random.Random(13)


def tla(v: object) -> str:
    """A Python value as a TLA+ literal (sets, tuples as sequences, ints, bools)."""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, frozenset | set):
        return "{" + ", ".join(tla(x) for x in sorted(v, key=repr)) + "}"
    if isinstance(v, tuple):
        return "<<" + ", ".join(tla(x) for x in v) + ">>"
    raise TypeError(v)


def sets(n: int) -> list[frozenset[int]]:
    return [frozenset(RNG.sample(range(-3, 8), RNG.randint(1, 5))) for _ in range(n)]


def seqs(n: int) -> list[tuple[int, ...]]:
    return [tuple(RNG.choice(range(4)) for _ in range(RNG.randint(0, 5))) for _ in range(n)]


def is_prefix(s: tuple[int, ...], t: tuple[int, ...]) -> bool:
    return t[: len(s)] == s


def component(start: int, edges: set[frozenset[int]]) -> set[int]:
    """The nodes reachable from ``start`` along undirected edges."""
    seen, todo = {start}, [start]
    while todo:
        a = todo.pop()
        for e in edges:
            if a in e:
                for b in e - {a}:
                    if b not in seen:
                        seen.add(b)
                        todo.append(b)
    return seen


def cases(module: str) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    if module == "FiniteSetsExt":
        for s in sets(6):
            out += [(f"Max({tla(s)})", max(s)), (f"Min({tla(s)})", min(s)), (f"Sum({tla(s)})", sum(s)),
                    (f"Product({tla(s)})", eval("*".join(map(str, s)) or "1")),
                    (f"Quantify({tla(s)}, LAMBDA x : x % 2 = 0)", sum(1 for x in s if x % 2 == 0)),
                    (f"Cardinality(kSubset(2, {tla(s)}))", len(list(itertools.combinations(s, 2)))),
                    (f"FoldSet(LAMBDA x, y : x + 2 * y, 0, {{{min(s)}}})", min(s))]
        a, b = sets(2)
        out += [(f"SymDiff({tla(a)}, {tla(b)})", a ^ b), (f"Flatten({{{tla(a)}, {tla(b)}}})", a | b),
                (f"Choose({tla(a)}) \\in {tla(a)}", True)]
    elif module == "SequencesExt":
        for s, t in zip(seqs(6), seqs(6), strict=True):
            out += [(f"ToSet({tla(s)})", frozenset(s)), (f"Reverse({tla(s)})", s[::-1]),
                    (f"IsPrefix({tla(s)}, {tla(s + t)})", True), (f"IsPrefix({tla(s)}, {tla(t)})", is_prefix(s, t)),
                    (f"Cons(9, {tla(s)})", (9, *s)), (f"Contains({tla(s)}, 2)", 2 in s),
                    (f"Remove({tla(s)}, 1)", tuple(x for x in s if x != 1)),
                    (f"ReplaceAll({tla(s)}, 1, 7)", tuple(7 if x == 1 else x for x in s)),
                    (f"FoldLeft(LAMBDA a, b : a - b, 0, {tla(s)})", -sum(s)),
                    (f"Zip({tla(s)}, {tla(s)})", tuple((x, x) for x in s))]
            if s:
                out += [(f"Last({tla(s)})", s[-1]), (f"Front({tla(s)})", s[:-1]),
                        (f"RemoveAt({tla(s)}, 1)", s[1:]), (f"InsertAt({tla(s)}, 1, 5)", (5, *s)),
                        (f"ReplaceAt({tla(s)}, 1, 5)", (5, *s[1:]))]
    elif module == "Functions":
        for s in sets(5):
            f = {x: x * x % 5 for x in s}
            fn = "[x \\in " + tla(s) + " |-> (x * x) % 5]"
            out += [(f"Range({fn})", frozenset(f.values())),
                    (f"IsInjective({fn})", len(set(f.values())) == len(f)),
                    (f"Restrict({fn}, {tla(frozenset([min(s)]))}) = [x \\in {{{min(s)}}} |-> {f[min(s)]}]", True),
                    (f"FoldFunction(LAMBDA x, y : x + y, 0, {fn})", sum(f.values())),
                    (f"DOMAIN RestrictValues({fn}, LAMBDA y : y > 0)", frozenset(x for x in s if f[x] > 0))]
        out += [("Cardinality(Bijection(1..3, 1..3))", 6), ("ExistsInjection(1..3, 1..2)", False),
                ("ExistsSurjection(1..3, 1..2)", True)]
    elif module == "UndirectedGraphs":
        nodes = frozenset(range(1, 5))
        all_edges = [frozenset(e) for e in itertools.combinations(nodes, 2)]
        for _ in range(8):
            edges = {e for e in all_edges if RNG.random() < 0.4}
            g = f"[node |-> {tla(nodes)}, edge |-> {tla(frozenset(edges))}]"
            out += [(f"IsStronglyConnected({g})", component(1, edges) == set(nodes)),
                    (f"IsUndirectedGraph({g})", True), (f"IsLoopFreeUndirectedGraph({g})", True),
                    (f"AreConnectedIn(1, 2, {g})", 2 in component(1, edges))]
        out += [("IsUndirectedGraph([node |-> {1}, edge |-> {{1, 2}}])", False),
                ("IsLoopFreeUndirectedGraph([node |-> {1}, edge |-> {{1}}])", False)]
    elif module == "Bitwise":
        for _ in range(12):
            a, b = RNG.randrange(0, 300), RNG.randrange(0, 300)
            out += [(f"{a} & {b}", a & b), (f"{a} | {b}", a | b), (f"{a} ^^ {b}", a ^ b),
                    (f"shiftR({a}, 2)", a >> 2), (f"shiftL({a}, 3)", a << 3),
                    (f"Not({a})", (~a) & ((1 << a.bit_length()) - 1))]
    return out


@pytest.mark.parametrize("module", ["FiniteSetsExt", "SequencesExt", "Functions", "UndirectedGraphs", "Bitwise"])
def test_community_module_operators_match_their_definitions(module: str, tmp_path: Path) -> None:
    checks = cases(module)
    assert checks
    body = "\n".join(f"ASSUME {expr} = {tla(expected)}" for expr, expected in checks)
    (tmp_path / "M.tla").write_text(f"---- MODULE M ----\nEXTENDS Integers, Sequences, FiniteSets, {module}\n"
                                    f"{body}\n====\n")
    (tmp_path / "M.cfg").write_text("")
    result = check_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert result.exit_code == EXIT_SUCCESS, result.message


def test_a_wrong_expectation_is_reported_on_its_line(tmp_path: Path) -> None:
    (tmp_path / "M.tla").write_text("---- MODULE M ----\nEXTENDS FiniteSetsExt\nASSUME Max({1, 5}) = 5\n"
                                    "ASSUME Min({1, 5}) = 5\n====\n")
    (tmp_path / "M.cfg").write_text("")
    result = check_model(tmp_path / "M.tla", tmp_path / "M.cfg")
    assert result.exit_code == EXIT_VIOLATION_ASSUMPTION
    assert "M.tla:4:" in result.message


def test_a_module_beside_the_spec_wins_over_the_library(tmp_path: Path) -> None:
    (tmp_path / "Functions.tla").write_text("---- MODULE Functions ----\nRange(f) == 42\n====\n")
    (tmp_path / "M.tla").write_text("---- MODULE M ----\nEXTENDS Functions\nASSUME Range(<<1>>) = 42\n====\n")
    (tmp_path / "M.cfg").write_text("")
    assert check_model(tmp_path / "M.tla", tmp_path / "M.cfg").exit_code == EXIT_SUCCESS
