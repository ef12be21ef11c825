"""Plain-Python enumerations of the conformance specs' state spaces.

They are written independently of the checker (no TLA+ involved): each model lists its initial
states and, for a state, its successors in the multiset TLC generates (one per enabled action
instance, duplicates included). :func:`explore` then applies TLC's counting rules: every
generated state counts as generated; a state outside CONSTRAINT/ACTION_CONSTRAINT is neither
stored nor expanded; distinct states are the stored ones (after symmetry canonicalisation).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

S = Any


@dataclass
class Explored:
    distinct: int
    generated: int
    depth: int
    parent: dict[Hashable, Hashable | None] = field(default_factory=dict)
    level: dict[Hashable, int] = field(default_factory=dict)
    deadlocks: list[Hashable] = field(default_factory=list)
    edges: dict[Hashable, list[Hashable]] = field(default_factory=dict)


def explore(
    inits: Iterable[S],
    succ: Callable[[S], list[S]],
    *,
    constraint: Callable[[S], bool] = lambda s: True,
    action_constraint: Callable[[S, S], bool] = lambda s, t: True,
    canon: Callable[[S], Hashable] = lambda s: s,
) -> Explored:
    out = Explored(0, 0, 0)
    queue: deque[S] = deque()
    for s in inits:
        out.generated += 1
        if not constraint(s):
            continue
        k = canon(s)
        if k not in out.parent:
            out.parent[k] = None
            out.level[k] = 1
            queue.append(s)
    while queue:
        s = queue.popleft()
        ks = canon(s)
        nxt = succ(s)
        if not nxt:
            out.deadlocks.append(ks)
        out.edges[ks] = []
        for t in nxt:
            out.generated += 1
            if not (constraint(t) and action_constraint(s, t)):
                continue
            kt = canon(t)
            out.edges[ks].append(kt)
            if kt not in out.parent:
                out.parent[kt] = ks
                out.level[kt] = out.level[ks] + 1
                queue.append(t)
    out.distinct = len(out.parent)
    out.depth = max(out.level.values(), default=0)
    return out


def shortest_to(ex: Explored, bad: Callable[[Hashable], bool]) -> int | None:
    """Number of states on a shortest path from an initial state to a bad state."""
    levels = [ex.level[k] for k in ex.parent if bad(k)]
    return min(levels) if levels else None


# ---- DieHard -------------------------------------------------------------------------------

def diehard_succ(s: tuple[int, int]) -> list[tuple[int, int]]:
    small, big = s
    pour_sb = min(big + small, 5)
    pour_bs = min(big + small, 3)
    return [
        (3, big),  # FillSmall
        (small, 5),  # FillBig
        (0, big),  # EmptySmall
        (small, 0),  # EmptyBig
        (small - (pour_sb - big), pour_sb),  # SmallToBig
        (pour_bs, big - (pour_bs - small)),  # BigToSmall
    ]


# ---- TwoPhase -----------------------------------------------------------------------------

RMS = ("r1", "r2", "r3")


def twophase_init() -> list[S]:
    return [(tuple("working" for _ in RMS), "init", frozenset(), frozenset())]


def twophase_succ(s: S) -> list[S]:
    rm_state, tm_state, tm_prepared, msgs = s
    out = []

    def with_rm(i: int, v: str) -> tuple[str, ...]:
        lst = list(rm_state)
        lst[i] = v
        return tuple(lst)

    if tm_state == "init" and tm_prepared == frozenset(RMS):
        out.append((rm_state, "done", tm_prepared, msgs | {("Commit",)}))
    if tm_state == "init":
        out.append((rm_state, "done", tm_prepared, msgs | {("Abort",)}))
    for i, rm in enumerate(RMS):
        if tm_state == "init" and ("Prepared", rm) in msgs:
            out.append((rm_state, tm_state, tm_prepared | {rm}, msgs))
        if rm_state[i] == "working":
            out.append((with_rm(i, "prepared"), tm_state, tm_prepared, msgs | {("Prepared", rm)}))
        if rm_state[i] == "working":
            out.append((with_rm(i, "aborted"), tm_state, tm_prepared, msgs))
        if ("Commit",) in msgs:
            out.append((with_rm(i, "committed"), tm_state, tm_prepared, msgs))
        if ("Abort",) in msgs:
            out.append((with_rm(i, "aborted"), tm_state, tm_prepared, msgs))
    return out


# ---- Peterson -----------------------------------------------------------------------------

def peterson_succ(s: S) -> list[S]:
    pc, flag, turn = s
    out = []
    for p in (0, 1):
        o = 1 - p

        def upd(t: tuple[Any, Any], v: Any, p: int = p) -> tuple[Any, Any]:
            return (v, t[1]) if p == 0 else (t[0], v)

        if pc[p] == "idle":
            out.append((upd(pc, "setturn"), upd(flag, True), turn))
        if pc[p] == "setturn":
            out.append((upd(pc, "wait"), flag, o))
        if pc[p] == "wait" and (flag[o] is False or turn == p):
            out.append((upd(pc, "cs"), flag, turn))
        if pc[p] == "cs":
            out.append((upd(pc, "idle"), upd(flag, False), turn))
    return out


PETERSON_INIT = [(("idle", "idle"), (False, False), 0)]


# ---- Channel ------------------------------------------------------------------------------

def channel_succ(s: S, data: tuple[str, ...] = ("d1", "d2"), cap: int = 3) -> list[S]:
    queue, last, sent = s
    out = []
    for d in data:
        if len(queue) < cap:
            out.append(((*queue, d), last, (sent + 1) % 3))
    if queue:
        out.append((queue[1:], queue[0], sent))
    return out


# ---- InstanceSpec -------------------------------------------------------------------------

def instance_succ(s: tuple[int, int], n: int = 2) -> list[tuple[int, int]]:
    x, y = s
    out = []
    # A!CNext: Inc \/ Reset on x with Limit N
    if x < n:
        out.append((x + 1, y))
    if x == n:
        out.append((0, y))
    if y < n + 1:
        out.append((x, y + 1))
    if y == n + 1:
        out.append((x, 0))
    return out


# ---- Symmetric ----------------------------------------------------------------------------

def symmetric_succ(s: tuple[str, ...]) -> list[tuple[str, ...]]:
    out = []
    busy = sum(1 for v in s if v == "busy")
    for i, v in enumerate(s):
        nv = {"idle": "busy" if busy < 2 else None, "busy": "done", "done": "idle"}[v]
        if nv is not None:
            out.append((*s[:i], nv, *s[i + 1:]))
    return out


def symmetric_canon(s: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(s))


# ---- Constrained ---------------------------------------------------------------------------

def constrained_succ(s: tuple[int, int]) -> list[tuple[int, int]]:
    x, y = s
    return [(x + 1, y), (x + 2, 1 - y), (x - 1, y)]


# ---- Deadlock ------------------------------------------------------------------------------

def deadlock_succ(s: tuple[str, str]) -> list[tuple[str, str]]:
    a, b = s
    out = []
    if a == "free":
        out.append(("p1", b))
    if a == "p1" and b == "free":
        out.append((a, "p1"))
    if a == "p1" and b == "p1":
        out.append(("free", "free"))
    if b == "free":
        out.append((a, "p2"))
    if b == "p2" and a == "free":
        out.append(("p2", b))
    if a == "p2" and b == "p2":
        out.append(("free", "free"))
    return out


def all_assignments(domain: Iterable[Any], values: Iterable[Any]) -> list[tuple[Any, ...]]:
    d = list(domain)
    return list(itertools.product(list(values), repeat=len(d)))
