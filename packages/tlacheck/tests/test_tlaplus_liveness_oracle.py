"""The fair-cycle search against a brute-force oracle on small random graphs.

The oracle enumerates every set S of states that a behaviour could visit infinitely often (S
strongly connected through the edges among its states, or a single stuttering state) and checks
WF/SF directly: WF_k holds iff k is disabled somewhere in S or a k-step lies inside S; SF_k holds
iff k is disabled everywhere in S or a k-step lies inside S. Every lasso the search returns is
also validated step by step.
"""

from __future__ import annotations

import itertools
import random

from tlacheck.liveness import FairInfo, LivenessSearch, tarjan


def strongly_connected(nodes: frozenset[int], succ: list[list[tuple[int, str]]]) -> bool:
    if len(nodes) == 1:
        return True
    comps = tarjan(sorted(nodes), succ, set(nodes))
    return len(comps) == 1


def fair(nodes: frozenset[int], succ: list[list[tuple[int, str]]], fairness: list[FairInfo]) -> bool:
    edges = {(a, b) for a in nodes for b, _ in succ[a] if b in nodes and b != a}
    for f in fairness:
        taken = bool(edges & f.taken)
        disabled = [s for s in nodes if not f.enabled[s]]
        if f.kind == "WF" and not (disabled or taken):
            return False
        if f.kind == "SF" and not (len(disabled) == len(nodes) or taken):
            return False
    return True


def reach(starts: list[int], region: set[int], succ: list[list[tuple[int, str]]]) -> set[int]:
    seen = {s for s in starts if s in region}
    todo = list(seen)
    while todo:
        v = todo.pop()
        for w, _ in succ[v]:
            if w in region and w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def oracle(n: int, succ: list[list[tuple[int, str]]], fairness: list[FairInfo], starts: list[int],
           region: set[int], must: set[int] | None) -> bool:
    reachable = reach(starts, region, succ)
    for size in range(1, n + 1):
        for combo in itertools.combinations(sorted(region), size):
            s = frozenset(combo)
            if not (s & reachable) or (must is not None and not (s & must)):
                continue
            if strongly_connected(s, succ) and fair(s, succ, fairness):
                return True
    return False


def validate(found: tuple[int, list[int], list[int]], succ: list[list[tuple[int, str]]],
             fairness: list[FairInfo], starts: list[int], region: set[int], must: set[int] | None) -> None:
    s, path, cycle = found
    assert s in starts and path[0] == s and all(v in region for v in path + cycle)
    for a, b in itertools.pairwise(path + cycle[1:]):
        assert b in {w for w, _ in succ[a]}
    assert cycle[0] == path[-1] and (len(cycle) == 1 or cycle[-1] == cycle[0])
    visited = set(cycle)
    steps = set(itertools.pairwise(cycle))
    for f in fairness:
        taken = bool(steps & f.taken)
        disabled = [v for v in visited if not f.enabled[v]]
        if f.kind == "WF":
            assert disabled or taken
        else:
            assert len(disabled) == len(visited) or taken
    if must is not None:
        assert visited & must


def test_fair_cycle_search_matches_brute_force() -> None:
    rng = random.Random(7)
    checked = violations = 0
    for _ in range(600):
        n = rng.randint(1, 6)
        succ: list[list[tuple[int, str]]] = [
            [(b, "A") for b in range(n) if rng.random() < 0.35] for _ in range(n)
        ]
        fairness = []
        for _ in range(rng.randint(0, 3)):
            enabled = [rng.random() < 0.6 for _ in range(n)]
            taken = {(a, b) for a in range(n) for b, _ in succ[a] if enabled[a] and a != b and rng.random() < 0.5}
            fairness.append(FairInfo(rng.choice(["WF", "SF"]), enabled, taken))
        region = {v for v in range(n) if rng.random() < 0.75}
        starts = sorted(v for v in region if rng.random() < 0.5)
        must = {v for v in range(n) if rng.random() < 0.4} if rng.random() < 0.3 else None
        expected = oracle(n, succ, fairness, starts, region, must)
        found = LivenessSearch(succ, fairness).search(starts, region, must, depth=[0] * n)
        assert (found is not None) == expected, (succ, fairness, starts, region, must)
        if found is not None:
            validate(found, succ, fairness, starts, region, must)
            violations += 1
        checked += 1
    assert checked == 600 and 50 < violations < 550  # both verdicts are well represented
