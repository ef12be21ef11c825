"""The standard modules (Naturals, Integers, FiniteSets, Sequences, TLC, Bags subset), in Python."""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable
from typing import Any

from .errors import AssertionFailed, EvalError
from .values import (
    INT,
    NAT,
    STRING,
    InfiniteCombination,
    LazySet,
    SeqSet,
    SubsetSet,
    Value,
    apply,
    domain,
    iter_set,
    mkfn,
    render,
    sortkey,
    to_set,
)

# Operator lexemes that mean the same thing.
ALIASES = {
    "\\land": "/\\",
    "\\lor": "\\/",
    "\\lnot": "~",
    "\\neg": "~",
    "\\equiv": "<=>",
    "/=": "#",
    "\\neq": "#",
    "=<": "<=",
    "\\leq": "<=",
    "\\geq": ">=",
    "\\union": "\\cup",
    "\\intersect": "\\cap",
    "\\setminus": "\\",
    "\\circ": "\\o",
    "\\times": "\\X",
}


def _int(v: Value, op: str) -> int:
    if type(v) is not int:
        raise EvalError(f"{op} applied to the non-integer {render(v)}")
    return v


def _div(a: Value, b: Value) -> int:
    if _int(b, "\\div") == 0:
        raise EvalError("division by zero")
    return _int(a, "\\div") // b


def _mod(a: Value, b: Value) -> int:
    if _int(b, "%") <= 0:
        raise EvalError("% with a non-positive divisor")
    return _int(a, "%") % b


def _range(a: Value, b: Value) -> frozenset[int]:
    return frozenset(range(_int(a, ".."), _int(b, "..") + 1))


def _seq(v: Value, op: str) -> tuple[Value, ...]:
    if type(v) is not tuple:
        raise EvalError(f"{op} applied to the non-sequence {render(v)}")
    return v


def _concat(a: Value, b: Value) -> Value:
    if type(a) is str and type(b) is str:
        return a + b  # TLC treats strings as sequences of characters here
    return _seq(a, "\\o") + _seq(b, "\\o")


def _finite_side(a: Value, b: Value) -> tuple[Value, Value] | None:
    """For an operation between a finite and an infinite (lazy) set: (finite, other)."""
    if isinstance(a, LazySet) and a.infinite:
        return (b, a)
    if isinstance(b, LazySet) and b.infinite:
        return (a, b)
    return None


def _cap(a: Value, b: Value) -> Value:
    fo = _finite_side(a, b)
    if fo is not None:
        if isinstance(fo[0], LazySet) and fo[0].infinite:
            # Both infinite (Seq(S) \cap Seq(T)): membership, as TLC; enumerating it fails.
            return InfiniteCombination("\\cap", a, b)
        return frozenset(x for x in iter_set(fo[0]) if x in fo[1])
    return to_set(a) & to_set(b)


def _cup(a: Value, b: Value) -> Value:
    if _finite_side(a, b) is not None:
        return InfiniteCombination("\\cup", a, b)
    return to_set(a) | to_set(b)


def _minus(a: Value, b: Value) -> Value:
    if isinstance(a, LazySet) and a.infinite:
        return InfiniteCombination("\\", a, b)
    # An infinite b (`[1..2 -> S] \ Seq(T)`) is only asked for membership, as by TLC.
    if isinstance(b, LazySet) and (b.infinite or not isinstance(a, LazySet)):
        return frozenset(x for x in iter_set(a) if x not in b)
    return to_set(a) - to_set(b)


def _subseteq(a: Value, b: Value) -> bool:
    if isinstance(b, LazySet) and (b.infinite or not isinstance(a, LazySet)):
        return all(x in b for x in iter_set(a))
    return to_set(a) <= to_set(b)


def _colon_gt(a: Value, b: Value) -> Value:
    return mkfn({a: b})


def _at_at(f: Value, g: Value) -> Value:
    d = {k: apply(g, k) for k in iter_set(domain(g))}
    d.update({k: apply(f, k) for k in iter_set(domain(f))})
    return mkfn(d)


# Binary operators on values (both operands evaluated). The arithmetic ones test for integers
# inline: a call of _int per operand cost as much as the operation.
BINARY: dict[str, Callable[[Value, Value], Value]] = {
    "=": lambda a, b: a == b,
    "#": lambda a, b: a != b,
    "+": lambda a, b: a + b if type(a) is int and type(b) is int else _int(a, "+") + _int(b, "+"),
    "-": lambda a, b: a - b if type(a) is int and type(b) is int else _int(a, "-") - _int(b, "-"),
    "*": lambda a, b: a * b if type(a) is int and type(b) is int else _int(a, "*") * _int(b, "*"),
    "^": lambda a, b: _int(a, "^") ** _int(b, "^"),
    "\\div": _div,
    "%": _mod,
    "<": lambda a, b: a < b if type(a) is int and type(b) is int else _int(a, "<") < _int(b, "<"),
    ">": lambda a, b: a > b if type(a) is int and type(b) is int else _int(a, ">") > _int(b, ">"),
    "<=": lambda a, b: a <= b if type(a) is int and type(b) is int else _int(a, "<=") <= _int(b, "<="),
    ">=": lambda a, b: a >= b if type(a) is int and type(b) is int else _int(a, ">=") >= _int(b, ">="),
    "..": _range,
    "\\in": lambda a, b: a in b,
    "\\notin": lambda a, b: a not in b,
    "\\cup": _cup,
    "\\cap": _cap,
    "\\": _minus,
    "\\subseteq": _subseteq,
    "\\subset": lambda a, b: to_set(a) < to_set(b),
    "\\supseteq": lambda a, b: to_set(a) >= to_set(b),
    "\\supset": lambda a, b: to_set(a) > to_set(b),
    "\\o": _concat,
    ":>": _colon_gt,
    "@@": _at_at,
}


def _union(s: Value) -> frozenset[Value]:
    out: set[Value] = set()
    for x in iter_set(s):
        out |= to_set(x)
    return frozenset(out)


UNARY: dict[str, Callable[[Value], Value]] = {
    "-": lambda a: -_int(a, "-"),
    "SUBSET": lambda a: SubsetSet(a),
    "UNION": _union,
    "DOMAIN": domain,
}


def _head(s: Value) -> Value:
    s = _seq(s, "Head")
    if not s:
        raise EvalError("Head applied to the empty sequence")
    return s[0]


def _tail(s: Value) -> Value:
    s = _seq(s, "Tail")
    if not s:
        raise EvalError("Tail applied to the empty sequence")
    return s[1:]


def _subseq(s: Value, m: Value, n: Value) -> Value:
    s = _seq(s, "SubSeq")
    m, n = _int(m, "SubSeq"), _int(n, "SubSeq")
    if m > n:
        return ()
    if m < 1 or n > len(s):
        raise EvalError(f"SubSeq({render(s)}, {m}, {n}) out of range")
    return s[m - 1 : n]


def _select_seq(c: Any, s: Value, test: Any) -> Value:
    return tuple(x for x in _seq(s, "SelectSeq") if test(c, (x,)))


def _sort_seq(c: Any, s: Value, lt: Any) -> Value:
    import functools

    def cmp(a: Value, b: Value) -> int:
        if lt(c, (a, b)):
            return -1
        if lt(c, (b, a)):
            return 1
        return 0

    return tuple(sorted(_seq(s, "SortSeq"), key=functools.cmp_to_key(cmp)))


def _print(c: Any, a: Value, b: Value) -> Value:
    # TLC prints to its log; we keep stdout clean for --json and print to stderr.
    print(render(a), file=sys.stderr)
    return b


def _printt(c: Any, a: Value) -> Value:
    print(render(a), file=sys.stderr)
    return True


def _assert(c: Any, cond: Value, msg: Value) -> Value:
    if cond is not True:
        raise AssertionFailed(f"Assert failed: {msg if isinstance(msg, str) else render(msg)}")
    return True


def _permutations(c: Any, s: Value) -> Value:
    elems = sorted(to_set(s), key=sortkey)
    return frozenset(mkfn(dict(zip(elems, p, strict=True))) for p in itertools.permutations(elems))


def _to_string(c: Any, v: Value) -> Value:
    return render(v)


def _cardinality(c: Any, s: Value) -> Value:
    return len(to_set(s))


def _is_finite(c: Any, s: Value) -> Value:
    return not (isinstance(s, LazySet) and s.infinite)


def _bag_to_set(c: Any, b: Value) -> Value:
    return frozenset(k for k in iter_set(domain(b)) if apply(b, k) > 0)


def _set_to_bag(c: Any, s: Value) -> Value:
    return mkfn(dict.fromkeys(to_set(s), 1))


def _bag_in(c: Any, e: Value, b: Value) -> Value:
    return e in domain(b) and apply(b, e) > 0


def _copies_in(c: Any, e: Value, b: Value) -> Value:
    return apply(b, e) if e in domain(b) else 0


# Java system properties that TLCGet("-Dname") reads: TLC needs this one set to accept \cdot,
# which the embedded checker always accepts.
SYSTEM_PROPERTIES = {"tlc2.tool.impl.Tool.cdot": "true"}


def _tlc_get(c: Any, key: Value) -> Value:
    if type(key) is str and key.startswith("-D") and key[2:] in SYSTEM_PROPERTIES:
        return SYSTEM_PROPERTIES[key[2:]]
    raise EvalError(f"unsupported construct: TLCGet({render(key)}) (only TLCGet(\"-D<property>\") of "
                    f"{', '.join(sorted(SYSTEM_PROPERTIES))})")


def _atoi(c: Any, s: Value) -> Value:
    if type(s) is not str or not s.strip().lstrip("+-").isdigit():
        raise EvalError(f"atoi of {render(s)}, which is not a decimal integer")
    return int(s)


def _environment() -> Value:
    """IOUtils' IOEnv: the process environment as a record (read once, like TLC at startup)."""
    return mkfn(dict(os.environ)) if os.environ else frozenset()


# name -> (arity, function(c, *args), indices of operator-valued arguments)
FUNCTIONS: dict[str, tuple[int, Callable[..., Value], tuple[int, ...]]] = {
    "Len": (1, lambda c, s: len(_seq(s, "Len")), ()),
    "Append": (2, lambda c, s, x: (*_seq(s, "Append"), x), ()),
    "Head": (1, lambda c, s: _head(s), ()),
    "Tail": (1, lambda c, s: _tail(s), ()),
    "SubSeq": (3, lambda c, s, m, n: _subseq(s, m, n), ()),
    "Seq": (1, lambda c, s: SeqSet(s), ()),
    "SelectSeq": (2, _select_seq, (1,)),
    "SortSeq": (2, _sort_seq, (1,)),
    "Cardinality": (1, _cardinality, ()),
    "IsFiniteSet": (1, _is_finite, ()),
    "Print": (2, _print, ()),
    "PrintT": (1, _printt, ()),
    "Assert": (2, _assert, ()),
    "Permutations": (1, _permutations, ()),
    "ToString": (1, _to_string, ()),
    "BagToSet": (1, _bag_to_set, ()),
    "SetToBag": (1, _set_to_bag, ()),
    "BagIn": (2, _bag_in, ()),
    "CopiesIn": (2, _copies_in, ()),
    "TLCGet": (1, _tlc_get, ()),
    "atoi": (1, _atoi, ()),
}

CONSTANTS: dict[str, Value] = {"Nat": NAT, "Int": INT, "STRING": STRING, "EmptyBag": (), "IOEnv": _environment()}

