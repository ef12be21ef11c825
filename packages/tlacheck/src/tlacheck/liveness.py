"""Liveness checking on the explicit reachable state graph.

A property is violated when some fair behaviour of the spec falsifies it. Each supported form
reduces to finding, in a region of the graph, a *fair* strongly connected component reachable
from a set of start states:

============  ===================  ==========================  ===================
property      start states          region (prefix + cycle)    cycle must visit
============  ===================  ==========================  ===================
``<>P``       initial, ``~P``       ``~P``                      -
``[]<>P``     reachable, ``~P``     ``~P``                      -
``<>[]P``     reachable             all                         a ``~P`` state
``P ~> Q``    reachable, ``P/\\~Q``  ``~Q``                      -
============  ===================  ==========================  ===================

Every state may stutter (TLA+ behaviours are stuttering-closed), so a single state is a cycle.
A component C is fair when for every ``WF_v(A)`` either ``<<A>>_v`` is disabled in some state
of C or an ``<<A>>_v`` step lies inside C, and for every ``SF_v(A)`` either such a step lies
inside C or ``<<A>>_v`` is disabled in all of C; when only an SF condition fails, the states
where A is enabled are removed and the rest is decomposed again (the standard refinement, since
a behaviour confined to a sub-component can avoid enabling A).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


@dataclass
class FairInfo:
    """Per fairness condition: where ``<<A>>_v`` is enabled and which edges take it."""

    kind: str  # "WF" | "SF"
    enabled: list[bool]
    taken: set[tuple[int, int]]


def tarjan(nodes: Sequence[int] | set[int], succ: list[list[tuple[int, str]]], allowed: set[int]) -> list[list[int]]:
    """Strongly connected components of the subgraph induced by ``allowed`` (iterative). Nodes
    are the state indices 0..len(succ)-1, so the per-node tables are flat lists, and each node
    on the DFS path keeps an iterator over its edges."""
    n = len(succ)
    index = [-1] * n
    low = [0] * n
    on = bytearray(n)
    inside = bytearray(n)
    for v in allowed:
        inside[v] = 1
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in nodes:
        if index[root] >= 0:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = 1
        work: list[tuple[int, Iterator[tuple[int, str]]]] = [(root, iter(succ[root]))]
        while work:
            v, edges = work[-1]
            for w, _label in edges:
                if not inside[w]:
                    continue
                if index[w] < 0:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = 1
                    work.append((w, iter(succ[w])))
                    break  # descend into w; v's iterator resumes after it
                if on[w] and index[w] < low[v]:
                    low[v] = index[w]
            else:
                work.pop()
                if work:
                    u = work[-1][0]
                    if low[v] < low[u]:
                        low[u] = low[v]
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on[w] = 0
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)
    return out


def reachable(succ: list[list[tuple[int, str]]], starts: list[int], region: set[int] | None = None) -> set[int]:
    """The states reachable from ``starts`` (those inside ``region``, when given), within it."""
    seen = set(starts) if region is None else {s for s in starts if s in region}
    stack = list(seen)
    while stack:
        for w, _ in succ[stack.pop()]:
            if w not in seen and (region is None or w in region):
                seen.add(w)
                stack.append(w)
    return seen


class LivenessSearch:
    def __init__(
        self,
        succ: list[list[tuple[int, str]]],
        fair: list[FairInfo],
        cycle_succ: list[list[tuple[int, str]]] | None = None,
    ) -> None:
        self.succ = succ
        self.fair = fair
        # The edges a cycle may use (all of them, unless the spec says <>[][A]_v).
        self.cycle_succ = cycle_succ if cycle_succ is not None else succ

    def fair_components(
        self, region: set[int], must: set[int] | None
    ) -> list[tuple[set[int], list[tuple[str, object]]]]:
        """Fair (sub)components inside ``region``, each with the witnesses a cycle must visit."""
        found: list[tuple[set[int], list[tuple[str, object]]]] = []
        todo = [set(region)]
        while todo:
            nodes = todo.pop()
            for comp_list in tarjan(sorted(nodes), self.cycle_succ, nodes):
                if len(comp_list) == 1 and must is None:
                    # Most components are single states (cycles only by stuttering): fair where
                    # every <<A>>_v is disabled, which each WF condition takes as its witness.
                    v = comp_list[0]
                    if not any(f.enabled[v] for f in self.fair):
                        found.append(({v}, [("node", v) for f in self.fair if f.kind == "WF"]))
                    continue
                comp = set(comp_list)
                if must is not None and not (comp & must):
                    continue
                res = self.check(comp)
                if res is None:
                    continue
                ok, witnesses, shrink = res
                if ok:
                    if must is not None:
                        witnesses.append(("node", min(comp & must)))
                    found.append((comp, witnesses))
                elif shrink is not None and shrink:
                    todo.append(shrink)
        return found

    def check(self, comp: set[int]) -> tuple[bool, list[tuple[str, object]], set[int] | None] | None:
        witnesses: list[tuple[str, object]] = []
        shrink: set[int] | None = None
        inner_edges = [(a, b) for a in comp for b, _ in self.cycle_succ[a] if b in comp and b != a]
        for f in self.fair:
            taken = next((ed for ed in inner_edges if ed in f.taken), None)
            if taken is not None:
                witnesses.append(("edge", taken))
                continue
            disabled = [s for s in comp if not f.enabled[s]]
            if f.kind == "WF":
                if disabled:
                    witnesses.append(("node", min(disabled)))
                    continue
                return None  # enabled everywhere, never taken: no sub-component helps
            if len(disabled) == len(comp):
                continue
            shrink = set(disabled) if shrink is None else shrink & set(disabled)
        if shrink is not None:
            return (False, [], shrink)
        return (True, witnesses, None)

    def path(
        self, src: int, targets: set[int], allowed: set[int], cycle: bool = False
    ) -> list[int] | None:
        """Shortest path src -> any target, within ``allowed`` (src included); with ``cycle``
        along the edges a cycle may use."""
        succ = self.cycle_succ if cycle else self.succ
        if src in targets:
            return [src]
        prev: dict[int, int] = {src: src}
        q = deque([src])
        while q:
            v = q.popleft()
            for w, _ in succ[v]:
                if w in allowed and w not in prev:
                    prev[w] = v
                    if w in targets:
                        out = [w]
                        while out[-1] != src:
                            out.append(prev[out[-1]])
                        return out[::-1]
                    q.append(w)
        return None

    def search(
        self, starts: list[int], region: set[int], must: set[int] | None, depth: list[int]
    ) -> tuple[int, list[int], list[int]] | None:
        """Find start s, a path s -> u inside region and a fair cycle u -> ... -> u."""
        # Only the part of the region reachable from the starts matters: it holds each component
        # of the region entirely or not at all (cycle edges are edges), and every path from a start.
        region = reachable(self.succ, starts, region)
        comps = self.fair_components(region, must)
        if not comps:
            return None
        comp_of: dict[int, int] = {}
        for k, (comp, _) in enumerate(comps):
            for v in comp:
                comp_of[v] = k
        # Backward reachability (within the region) from the fair components.
        pred: dict[int, list[int]] = {}
        for a in region:
            for b, _ in self.succ[a]:
                if b in region:
                    pred.setdefault(b, []).append(a)
        reach = set(comp_of)
        q = deque(reach)
        while q:
            v = q.popleft()
            for a in pred.get(v, ()):
                if a not in reach:
                    reach.add(a)
                    q.append(a)
        cands = [s for s in starts if s in reach]
        if not cands:
            return None
        s = min(cands, key=lambda x: (depth[x], x))
        to_comp = self.path(s, set(comp_of), region)
        assert to_comp is not None
        u = to_comp[-1]
        comp, witnesses = comps[comp_of[u]]
        cycle = [u]
        cur = u
        for kind, w in witnesses:
            if kind == "node":
                seg = self.path(cur, {w}, comp, cycle=True)  # type: ignore[arg-type]
                assert seg is not None
                cycle += seg[1:]
                cur = w  # type: ignore[assignment]
            else:
                a, b = w  # type: ignore[misc]
                seg = self.path(cur, {a}, comp, cycle=True)
                assert seg is not None
                cycle += [*seg[1:], b]
                cur = b
        if cur != u:
            back = self.path_nonempty(cur, u, comp)
            cycle += back[1:]
        return s, to_comp, cycle

    def path_nonempty(self, src: int, dst: int, allowed: set[int]) -> list[int]:
        p = self.path(src, {dst}, allowed, cycle=True)
        assert p is not None
        return p
