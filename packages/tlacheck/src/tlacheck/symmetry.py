"""Symmetry reduction: the representative of a state's orbit under the SYMMETRY permutations.

Any representative that depends on the orbit only gives the same distinct-state count, so the
one chosen is the image of least hash (ties broken by :func:`~tlacheck.values.sortkey`):
hashes are far cheaper than sortkeys, which sort every set and function of every image.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .values import Fn, ModelValue, Value, remember, sortkey

# Permuted images of compound values are memoised per permutation (messages and records recur
# in many states); the memo is dropped when it reaches this many entries, bounding its memory.
_MEMO_LIMIT = 200_000


def _permuter(perm: dict[Value, Value]) -> Callable[[Value], Value]:
    memo: dict[Value, Value] = {}

    def pm(v: Value) -> Value:
        t = type(v)
        if t is ModelValue:
            return perm.get(v, v)
        if t is int or t is str or t is bool:
            return v
        r = memo.get(v)
        if r is not None:
            return r
        if t is tuple:
            r = tuple([pm(x) for x in v])
        elif t is frozenset:
            r = frozenset([pm(x) for x in v])
        elif t is Fn:
            r = Fn({pm(k): pm(x) for k, x in v.d.items()})
        else:
            return v
        remember(memo, v, r, _MEMO_LIMIT)
        return r

    return pm


class Canonicaliser:
    """``canon(state)``: one fixed member of the state's orbit under ``perms`` (the
    permutations of SYMMETRY, identity included or not)."""

    def __init__(self, perms: list[dict[Value, Value]]) -> None:
        self.permuters = [_permuter(p) for p in perms]
        # One object per value of a variable, shared by the permuters' memos: each permuter then
        # finds a value by identity, and only this lookup compares a new object structurally.
        self.pool: dict[Value, Value] = {}

    def __call__(self, t: tuple[Value, ...]) -> Any:
        pool = self.pool
        if len(pool) >= _MEMO_LIMIT:
            pool.clear()
        t = tuple([pool.setdefault(v, v) for v in t])
        best, best_h, tied = t, hash(t), False
        images = []
        for pm in self.permuters:
            cand = tuple([pm(v) for v in t])
            images.append(cand)
            h = hash(cand)
            if h < best_h:
                best, best_h, tied = cand, h, False
            elif h == best_h and cand != best:
                tied = True
        if tied:
            return min((c for c in [t, *images] if hash(c) == best_h), key=sortkey)
        return best
