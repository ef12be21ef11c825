"""The canonical order of values (:func:`~tlacheck.values.sortkey`), fast for the common
homogeneous sets: for integers, strings, model values and same-length tuples of integers
Python's own order is the canonical one, and comparing without building sortkeys is several
times faster (CHOOSE over a set, quantifiers enumerated in canonical order); sets of functions,
tuples and subsets are generated in that order."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

from .values import (
    Fn,
    FnSet,
    ModelValue,
    ProductSet,
    SubsetSet,
    Value,
    iter_set,
    model_value_key,
    remember,
    sortkey,
)


def _native_key(items: Iterable[Value]) -> tuple[bool, Callable[[Value], Any] | None]:
    """(whether a native order equals the canonical one for ``items``, the key to use)."""
    # Sets built by map over builtins: much cheaper than all() over a generator (or a set
    # comprehension) for the small sets met here.
    types = set(map(type, items))
    if len(types) != 1:
        return False, None
    t = types.pop()
    if t is int or t is str:
        return True, None
    if t is ModelValue:
        return True, model_value_key
    if t is tuple:
        return len(set(map(len, items))) == 1 and set(map(type, chain.from_iterable(items))) <= _INT_ONLY, None
    return False, None


_INT_ONLY = frozenset({int})


# sortkeys of records and functions enumerated canonically (the messages of a set of messages
# recur in many states' sets): memoised by value, dropped when the memo reaches this many entries.
_KEY_MEMO_LIMIT = 200_000
_key_memo: dict[Value, tuple[Any, ...]] = {}


# Sets of records or functions in canonical order, memoised by value: a set variable (the
# messages sent) is iterated by several actions of each state, and most successors leave it
# unchanged. Dropped when it reaches this many entries.
_ORDER_MEMO_LIMIT = 50_000
_order_memo: dict[frozenset[Value], tuple[Value, ...]] = {}


def forget_sortkeys() -> None:
    """Drop the memoised sortkeys and orders (they hold model values' places, which a new model
    may change)."""
    _key_memo.clear()
    _order_memo.clear()


def _memo_sortkey(v: Value) -> tuple[Any, ...]:
    if type(v) is not Fn:
        return sortkey(v)
    k = _key_memo.get(v)
    if k is None:
        if len(_key_memo) >= _KEY_MEMO_LIMIT:
            _key_memo.clear()
        k = _key_memo[v] = sortkey(v)
    return k


def least(s: Value) -> Value:
    """The least element of a non-empty set in the canonical order (ValueError when empty)."""
    items = s if type(s) is frozenset else list(iter_set(s))
    native, key = _native_key(items)
    if native:
        return min(items, key=key) if key is not None else min(items)
    return min(items, key=sortkey)


# Lazy sets whose enumeration is already in the canonical order: their factors are enumerated
# sorted, and sortkey compares their elements (functions on one domain, tuples of one length,
# subsets by size and then sorted elements) lexicographically in the same order.
_ENUMERATED_IN_ORDER = (FnSet, ProductSet, SubsetSet)


def canonical(s: Value) -> list[Value]:
    """The elements of a set, sorted in the canonical order."""
    if type(s) in _ENUMERATED_IN_ORDER:
        return list(s.enumerate())
    items = list(iter_set(s))
    if len(items) > 1:
        native, key = _native_key(items)
        if native:
            items.sort(key=key)
        elif type(s) is frozenset:
            known = _order_memo.get(s)
            if known is None:
                items.sort(key=_memo_sortkey)
                remember(_order_memo, s, tuple(items), _ORDER_MEMO_LIMIT)
            else:
                items = list(known)
        else:
            items.sort(key=_memo_sortkey)
    return items
