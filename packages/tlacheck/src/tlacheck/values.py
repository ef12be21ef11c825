"""Canonical, hashable TLA+ values.

Representation (chosen so that Python equality and hashing ARE TLA+ equality, which makes state
fingerprints exact):

- integers -> ``int``; booleans -> ``bool``; strings -> ``str``;
- model values -> :class:`ModelValue` (equal only to themselves);
- finite sets -> ``frozenset``;
- functions whose domain is ``1..n`` (n >= 0) -> ``tuple``: in TLA+ ``<<a, b>>`` IS
  ``[i \\in 1..2 |-> ...]``, so every such function is normalised to a tuple on construction;
- every other function (records included: a record is a function on strings) -> :class:`Fn`.

Infinite or large sets that are mostly used for membership (``Nat``, ``Int``, ``STRING``,
``Seq(S)``, ``SUBSET S``, ``[S -> T]``, record sets, ``\\X``) are :class:`LazySet` objects that
answer ``in`` without enumerating and materialise to a ``frozenset`` only when needed.

Known limitation: Python treats ``True == 1``; TLA+ considers comparing a boolean with an
integer an error, so a well-typed spec never observes the difference.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .errors import EvalError

Value = Any


_MV_MARK = object()


class ModelValue(tuple):
    """A TLC model value: an uninterpreted constant equal only to itself.

    Implemented as the tuple ``(marker, name)`` with a private marker object so that hashing
    and equality run in C (model values are the commonest function keys and set elements);
    no TLA+ value can contain the marker, so a model value never equals any other value.
    Instances are interned by name.
    """

    __slots__ = ()
    _interned: dict[str, ModelValue] = {}  # noqa: RUF012

    def __new__(cls, name: str) -> ModelValue:
        mv = cls._interned.get(name)
        if mv is None:
            mv = super().__new__(cls, (_MV_MARK, name))
            cls._interned[name] = mv
        return mv

    @property
    def name(self) -> str:
        return self[1]  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # Unpickled (from a worker process) as the interned value of this process.
        return (ModelValue, (self.name,))

    def __repr__(self) -> str:
        return self[1]  # type: ignore[no-any-return]


class Fn:
    """A finite function whose domain is not ``1..n`` (records included). Immutable."""

    __slots__ = ("_h", "d")

    def __init__(self, d: dict[Value, Value]) -> None:
        self.d = d
        self._h: int | None = None

    def __eq__(self, other: object) -> bool:
        return type(other) is Fn and self.d == other.d

    def __hash__(self) -> int:
        h = self._h
        if h is None:
            h = self._h = hash(frozenset(self.d.items()))
        return h

    def __repr__(self) -> str:
        return render(self)


def mkfn(d: dict[Value, Value]) -> Value:
    """Build the canonical function value for the mapping ``d`` (tuple when domain is 1..n)."""
    n = len(d)
    if n == 0:
        return ()
    # The first key decides most cases (records, functions on model values) without a generator.
    if type(next(iter(d))) is int and all(type(k) is int for k in d) and min(d) == 1 and max(d) == n:
        return tuple(d[i] for i in range(1, n + 1))
    return Fn(d)


class LazySet:
    """A set answered by membership; enumerated / materialised only on demand."""

    __slots__ = ("_mat",)
    infinite = False
    label = "set"

    def __init__(self) -> None:
        self._mat: frozenset[Value] | None = None

    @property
    def materialised(self) -> bool:
        """Whether the elements are already held (then enumerating costs nothing)."""
        return self._mat is not None

    def contains(self, v: Value) -> bool:
        raise NotImplementedError

    def enumerate(self) -> Iterator[Value]:
        raise EvalError(f"cannot enumerate the infinite set {self.label}")

    def size_bound(self) -> int | None:
        """At least the number of elements, where that is known without enumerating; else None."""
        return None

    def __contains__(self, v: object) -> bool:
        return self.contains(v)

    def __iter__(self) -> Iterator[Value]:
        if self._mat is not None:
            return iter(self._mat)
        return self.enumerate()

    def mat(self) -> frozenset[Value]:
        if self._mat is None:
            if self.infinite:
                raise EvalError(f"cannot enumerate the infinite set {self.label}")
            self._mat = frozenset(self.enumerate())
        return self._mat

    def __len__(self) -> int:
        return len(self.mat())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazySet):
            other = other.mat()
        return self.mat() == other

    def __hash__(self) -> int:
        return hash(self.mat())

    def __repr__(self) -> str:
        return self.label


class NatSet(LazySet):
    __slots__ = ()
    infinite = True
    label = "Nat"

    def contains(self, v: Value) -> bool:
        return type(v) is int and v >= 0


class IntSet(LazySet):
    __slots__ = ()
    infinite = True
    label = "Int"

    def contains(self, v: Value) -> bool:
        return type(v) is int


class StringSet(LazySet):
    __slots__ = ()
    infinite = True
    label = "STRING"

    def contains(self, v: Value) -> bool:
        return type(v) is str


class SeqSet(LazySet):
    """``Seq(S)``: all finite sequences over S."""

    __slots__ = ("base",)
    infinite = True

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"Seq({render(self.base)})"

    def __init__(self, base: Value) -> None:
        super().__init__()
        self.base = base

    def contains(self, v: Value) -> bool:
        return type(v) is tuple and all(x in self.base for x in v)


class InfiniteCombination(LazySet):
    """``A \\cup B``, ``A \\cap B`` or ``A \\ B`` where ``A`` (or ``B`` for a union, both for an
    intersection) is infinite, as in ``Nat \\ {0}``: answered by membership in the operands."""

    __slots__ = ("a", "b", "op")
    infinite = True

    def __init__(self, op: str, a: Value, b: Value) -> None:
        super().__init__()
        self.op, self.a, self.b = op, a, b

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"{render(self.a)} {self.op} {render(self.b)}"

    def contains(self, v: Value) -> bool:
        if self.op == "\\cup":
            return v in self.a or v in self.b
        if self.op == "\\cap":
            return v in self.a and v in self.b
        return v in self.a and v not in self.b


class FilteredSet(LazySet):
    """``{x \\in S : P}`` over a lazy S (``SUBSET SUBSET 1..4``, ``[S -> T]``, ``Nat``):
    membership tests ``x \\in S /\\ P(x)`` without enumerating S, like TLC."""

    __slots__ = ("base", "pred")
    label = "{x \\in S : P}"

    def __init__(self, base: LazySet, pred: Callable[[Value], bool]) -> None:
        super().__init__()
        self.base, self.pred = base, pred

    @property
    def infinite(self) -> bool:  # type: ignore[override]
        return self.base.infinite

    def contains(self, v: Value) -> bool:
        return v in self.base and self.pred(v)

    def size_bound(self) -> int | None:
        return size_bound(self.base)

    def enumerate(self) -> Iterator[Value]:
        return (v for v in self.base if self.pred(v))


class SubsetSet(LazySet):
    """``SUBSET S``."""

    __slots__ = ("base",)
    label = "SUBSET S"

    def __init__(self, base: Value) -> None:
        super().__init__()
        self.base = base

    def contains(self, v: Value) -> bool:
        if isinstance(v, LazySet):
            v = v.mat()
        return type(v) is frozenset and all(x in self.base for x in v)

    def size_bound(self) -> int | None:
        n = size_bound(self.base)
        return None if n is None or n > 64 else 2 ** n

    def enumerate(self) -> Iterator[Value]:
        elems = sorted(to_set(self.base), key=sortkey)
        for r in range(len(elems) + 1):
            for combo in itertools.combinations(elems, r):
                yield frozenset(combo)


class FnSet(LazySet):
    """``[S -> T]``."""

    __slots__ = ("cod", "dom")
    label = "[S -> T]"

    def __init__(self, dom: Value, cod: Value) -> None:
        super().__init__()
        self.dom = dom
        self.cod = cod

    def contains(self, v: Value) -> bool:
        dom = to_set(self.dom)
        if type(v) is tuple:
            if dom != frozenset(range(1, len(v) + 1)):
                return False
            return all(x in self.cod for x in v)
        if type(v) is Fn:
            return v.d.keys() == dom and all(x in self.cod for x in v.d.values())
        return False

    def size_bound(self) -> int | None:
        n, m = size_bound(self.dom), size_bound(self.cod)
        return None if n is None or m is None or n > 64 else m ** n

    def enumerate(self) -> Iterator[Value]:
        dom = sorted(to_set(self.dom), key=sortkey)
        cod = sorted(to_set(self.cod), key=sortkey)
        if dom == list(range(1, len(dom) + 1)) and all(type(k) is int for k in dom):
            # Functions on 1..n are tuples (mkfn's normal form): the combinations themselves.
            return itertools.product(cod, repeat=len(dom))
        return self._functions(dom, cod)

    @staticmethod
    def _functions(dom: list[Value], cod: list[Value]) -> Iterator[Value]:
        for combo in itertools.product(cod, repeat=len(dom)):
            yield mkfn(dict(zip(dom, combo, strict=True)))


class RecordSet(LazySet):
    """``[a : S, b : T]``."""

    __slots__ = ("fields",)
    label = "[a : S, ...]"

    def __init__(self, fields: dict[str, Value]) -> None:
        super().__init__()
        self.fields = fields

    def contains(self, v: Value) -> bool:
        if type(v) is not Fn or v.d.keys() != self.fields.keys():
            return False
        return all(v.d[k] in s for k, s in self.fields.items())

    def size_bound(self) -> int | None:
        return _product_bound(list(self.fields.values()))

    def enumerate(self) -> Iterator[Value]:
        names = list(self.fields)
        sets = [sorted(to_set(self.fields[k]), key=sortkey) for k in names]
        for combo in itertools.product(*sets):
            yield Fn(dict(zip(names, combo, strict=True)))


class ProductSet(LazySet):
    """``S1 \\X S2 \\X ...``."""

    __slots__ = ("sets",)
    label = "S \\X T"

    def __init__(self, sets: list[Value]) -> None:
        super().__init__()
        self.sets = sets

    def contains(self, v: Value) -> bool:
        return (
            type(v) is tuple
            and len(v) == len(self.sets)
            and all(x in s for x, s in zip(v, self.sets, strict=True))
        )

    def size_bound(self) -> int | None:
        return _product_bound(self.sets)

    def enumerate(self) -> Iterator[Value]:
        return iter(itertools.product(*[sorted(to_set(s), key=sortkey) for s in self.sets]))


class LazyFn:
    """A recursively defined function ``f[x \\in S] == ...`` (domain possibly infinite): values
    are computed on application and memoised."""

    __slots__ = ("body", "dom", "memo")

    def __init__(self, dom: Value, body: Callable[[Value], Value]) -> None:
        self.dom = dom
        self.body = body
        self.memo: dict[Value, Value] = {}

    def apply(self, x: Value) -> Value:
        try:
            return self.memo[x]
        except KeyError:
            pass
        if x not in self.dom:
            raise EvalError(f"function applied to {render(x)} outside its domain")
        v = self.body(x)
        self.memo[x] = v
        return v

    def materialise(self) -> Value:
        return mkfn({x: self.apply(x) for x in to_set(self.dom)})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyFn):
            other = other.materialise()
        return self.materialise() == other

    def __hash__(self) -> int:
        return hash(self.materialise())


NAT = NatSet()
INT = IntSet()
STRING = StringSet()
BOOLEAN = frozenset({False, True})


def to_set(v: Value) -> frozenset[Value]:
    """The value as a finite frozenset, or an EvalError."""
    if type(v) is frozenset:
        return v
    if isinstance(v, LazySet):
        return v.mat()
    raise EvalError(f"expected a set, got {render(v)}")


def norm(v: Value) -> Value:
    """Canonical form of a value about to be stored in a state (lazy values materialised)."""
    if type(v) in PLAIN_TYPES:
        return v
    if isinstance(v, LazySet):
        return v.mat()
    if isinstance(v, LazyFn):
        return v.materialise()
    return v


PLAIN_TYPES = frozenset({int, bool, str, tuple, frozenset, Fn, ModelValue})


def domain(f: Value) -> Value:
    t = type(f)
    if t is tuple:
        return frozenset(range(1, len(f) + 1))
    if t is Fn:
        return frozenset(f.d)
    if t is LazyFn:
        return f.dom
    raise EvalError(f"DOMAIN applied to a non-function {render(f)}")


def apply(f: Value, x: Value) -> Value:
    """``f[x]``."""
    t = type(f)
    if t is tuple:
        if type(x) is int and 0 < x <= len(f):
            return f[x - 1]
    elif t is Fn:
        try:
            return f.d[x]
        except KeyError:
            pass
    elif t is LazyFn:
        return f.apply(x)
    else:
        raise EvalError(f"applying {render(f)} which is not a function")
    raise EvalError(f"function {render(f)} applied to {render(x)} outside its domain")


def update(f: Value, x: Value, v: Value) -> Value:
    """``[f EXCEPT ![x] = v]``; a key outside the domain leaves f unchanged (TLA+ semantics)."""
    t = type(f)
    if t is tuple:
        if type(x) is int and 0 < x <= len(f):
            lst = list(f)
            lst[x - 1] = v
            return tuple(lst)
        return f
    if t is Fn:
        if x in f.d:
            d = dict(f.d)
            d[x] = v
            return Fn(d)
        return f
    if t is LazyFn:
        return update(f.materialise(), x, v)
    raise EvalError(f"EXCEPT applied to a non-function {render(f)}")


_TYPE_ORDER = {bool: 0, int: 1, str: 2, ModelValue: 3, tuple: 4, Fn: 5, frozenset: 6}


# TLC orders model values by when the model made them, which is the order its config first names
# them in (``Proc = {p1, p0}``: p1 comes first), not by name: CHOOSE and every enumeration follow it.
_model_value_rank: dict[str, int] = {}


def rank_model_values(names: list[str]) -> None:
    """Order model values as a config naming ``names`` (in this order) makes TLC order them; the
    model loaded last in a process sets the order (worker processes fork after loading)."""
    _model_value_rank.clear()
    _model_value_rank.update((name, index) for index, name in enumerate(dict.fromkeys(names)))


def model_value_key(v: ModelValue) -> tuple[int, str]:
    """A model value's place in TLC's order (names the config does not give come after, by name)."""
    name: str = v[1]
    return _model_value_rank.get(name, len(_model_value_rank)), name


def sortkey(v: Value) -> tuple[Any, ...]:
    """A total order over values (used for CHOOSE, rendering and symmetry canonical forms)."""
    t = type(v)
    if t is int or t is bool:
        return (_TYPE_ORDER[t], v)
    if t is str:
        return (2, v)
    if t is ModelValue:
        return (3, model_value_key(v))
    if t is tuple:
        return (4, len(v), tuple(sortkey(x) for x in v))
    if t is Fn:
        return (5, len(v.d), tuple(sorted((sortkey(k), sortkey(x)) for k, x in v.d.items())))
    if t is frozenset:
        return (6, len(v), tuple(sorted(sortkey(x) for x in v)))
    return sortkey(norm(v))


def _render_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render(v: Value) -> str:
    """The value as TLC prints it."""
    t = type(v)
    if t is bool:
        return "TRUE" if v else "FALSE"
    if t is int:
        return str(v)
    if t is str:
        return _render_str(v)
    if t is ModelValue:
        return v.name
    if t is tuple:
        return "<<" + ", ".join(render(x) for x in v) + ">>"
    if t is frozenset:
        return "{" + ", ".join(render(x) for x in sorted(v, key=sortkey)) + "}"
    if t is Fn:
        keys = sorted(v.d, key=sortkey)
        if all(type(k) is str and k.isidentifier() for k in keys):
            return "[" + ", ".join(f"{k} |-> {render(v.d[k])}" for k in keys) + "]"
        return "(" + " @@ ".join(f"{render(k)} :> {render(v.d[k])}" for k in keys) + ")"
    if isinstance(v, LazySet):
        if v.infinite:
            return v.label
        return render(v.mat())
    if isinstance(v, LazyFn):
        return render(v.materialise())
    if callable(v):
        return "<operator>"
    return repr(v)


def permute(v: Value, perm: dict[Value, Value]) -> Value:
    """Apply a model-value permutation to a value (for SYMMETRY)."""
    t = type(v)
    if t is ModelValue:
        return perm.get(v, v)
    if t is tuple:
        return tuple(permute(x, perm) for x in v)
    if t is frozenset:
        return frozenset(permute(x, perm) for x in v)
    if t is Fn:
        return Fn({permute(k, perm): permute(x, perm) for k, x in v.d.items()})
    return v


def size_bound(s: Value) -> int | None:
    """An upper bound on the size of the set ``s`` known without enumerating it, else None."""
    if type(s) is frozenset:
        return len(s)
    if isinstance(s, LazySet):
        return len(s._mat) if s._mat is not None else None if s.infinite else s.size_bound()
    return None


def _product_bound(sets: list[Value]) -> int | None:
    n = 1
    for s in sets:
        m = size_bound(s)
        if m is None:
            return None
        n *= m
    return n


def iter_set(v: Value) -> Iterable[Value]:
    """Iterate over a set value (lazy sets enumerate; infinite ones raise)."""
    if type(v) is frozenset:
        return v
    if isinstance(v, LazySet):
        return v
    raise EvalError(f"expected a set, got {render(v)}")


def remember(memo: dict[Any, Value], key: Any, value: Value, limit: int) -> None:
    """Store ``value`` under ``key`` in a bounded memo: a full memo is emptied first (values
    recur within a search's neighbourhood, so starting over costs little and bounds memory)."""
    if len(memo) >= limit:
        memo.clear()
    memo[key] = value
