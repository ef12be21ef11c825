"""Shared vocabulary of the TLA+ compilers: evaluation context, compiled-closure types,
dependency masks, and small helpers on syntax trees and compiled closures.

Every expression becomes ``f(c, e) -> value`` where ``c`` is a :class:`Ctx` (current state tuple
``c.s`` and the next state being built ``c.n``) and ``e`` a dict of bound names (quantified
variables, operator parameters, LET definitions). Nothing walks the syntax tree per state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from . import builtins as B
from .errors import EvalError
from .modules import Scope
from .order import canonical
from .values import LazySet, RecordSet, Value, render, size_bound

UNSET: Any = type("Unset", (), {"__repr__": lambda self: "<unassigned>"})()
STATE, NEXT, ENV = 1, 2, 4
# Reading unprimed variable i also sets bit VAR0 << i (with STATE): an expression whose deps
# are STATE and a few variable bits only is a function of those variables' values.
VAR0 = 8
ALLVARS = ~(VAR0 - 1)
# Side effects (Print, Assert): never memoised (state_memo). Above every variable bit.
IMPURE = 1 << 4096
EMPTY: dict[str, Value] = {}

Fun = Callable[["Ctx", dict[str, Value]], Value]
Gen = Callable[["Ctx", dict[str, Value]], Iterator[str | None]]


class Ctx:
    """The evaluation context: current state ``s`` and next state ``n`` (a list with UNSET)."""

    __slots__ = ("n", "s")

    def __init__(self, s: tuple[Value, ...] | None, n: list[Value] | None) -> None:
        self.s = s
        self.n = n


class Thunk:
    """A zero-arity LET definition, evaluated at most once per LET entry (unless it reads
    primed variables, which may change while an action is being enumerated)."""

    __slots__ = ("c", "e", "fn", "memo", "v")
    # The value of a thunk not evaluated yet (generated code tests it to read the value in place).
    NO = object()

    def __init__(self, fn: Fun, c: Ctx, e: dict[str, Value], memo: bool) -> None:
        self.fn, self.c, self.e, self.memo, self.v = fn, c, e, memo, Thunk.NO

    def get(self) -> Value:
        v = self.v
        if v is Thunk.NO:
            v = self.fn(self.c, self.e)
            if self.memo:
                self.v = v
        return v


class Local:
    """Compile-time information about a bound name."""

    __slots__ = ("body", "kind", "locals", "name", "params", "scope", "stateless")

    def __init__(
        self,
        kind: str,
        name: str = "",
        params: list[tuple[str, int]] | None = None,
        body: Any = None,
        scope: Scope | None = None,
        locals_: dict[str, Local] | None = None,
    ) -> None:
        # kind: "val" (value in e), "thunk" (Thunk in e), "letop" (LET operator with params),
        # "opparam" (higher-order parameter: a callable(c, args) in e), "subst" (a parameter whose
        # argument is an action: ``body`` is the argument node, compiled in ``scope``/``locals``
        # of the call site wherever the parameter is used)
        self.kind = kind
        self.name = name
        self.params = params or []
        self.body = body
        self.scope = scope
        self.locals = locals_ or {}
        # For a LET definition that reads no variable, directly or through another definition:
        # the bound names its value depends on (ExprCompiler.let_memoised). Held here, not in a
        # table keyed by id(): Locals are made afresh for each compilation of a LET and die
        # with it, and a later one at a reused address would inherit a dead one's entry.
        self.stateless: frozenset[str] | None = None


def tname(node: Any) -> str:
    n = type(node).__name__
    # Synthetic identifier nodes (implicit INSTANCE substitutions, eta-expansions) behave as
    # the parser's nullary OperatorApplication.
    return "OperatorApplication" if n in ("_Ident", "VarRef") else n


def unescape(s: str) -> str:
    body = s[1:-1]
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def as_bool(v: Value, what: str) -> bool:
    if v is True or v is False:
        return v
    raise EvalError(f"{what} evaluated to the non-boolean {render(v)}")


def all_of(fns: list[Fun]) -> Fun:
    """A conjunction of compiled predicates: stops at the first FALSE, rejects non-booleans."""
    return _short_circuit(fns, False, "conjunct")


def any_of(fns: list[Fun]) -> Fun:
    """A disjunction of compiled predicates: stops at the first TRUE, rejects non-booleans."""
    return _short_circuit(fns, True, "disjunct")


def _short_circuit(fns: list[Fun], decisive: bool, what: str) -> Fun:
    """Evaluate ``fns`` in order until one gives ``decisive`` (its value is the junction's),
    else the other boolean; a non-boolean is an error naming ``what``."""
    neutral = not decisive

    def junction(c: Ctx, e: dict[str, Value]) -> Value:
        for f in fns:
            v = f(c, e)
            if v is not neutral:
                if v is decisive:
                    return decisive
                as_bool(v, what)
        return neutral

    return junction


def fold(fn: Fun, deps: int) -> Fun:
    """Evaluate a constant expression (no state, no bound names) once, at compile time, so
    that it costs nothing per state. If it fails it may legitimately be unused (e.g. a CHOOSE
    in a branch never taken), so fall back to evaluating it lazily and caching the value."""
    if deps:
        return fn
    try:
        v = fn(None, EMPTY)  # type: ignore[arg-type]
    except Exception:
        box: list[Value] = []

        def const(c: Ctx, e: dict[str, Value]) -> Value:
            if box:
                return box[0]
            v = fn(c, e)
            box.append(v)
            return v

        return const
    if isinstance(v, LazySet) and (n := size_bound(v)) is not None and n <= _MATERIALISE_AT_MOST:
        # A small constant lazy set (`{x \in {-1, 0, 1} \X {-1, 0, 1} : x # <<0, 0>>}`) is
        # enumerated once, not each time it is read.
        with contextlib.suppress(Exception):
            v.mat()
    return lambda c, e: v


# A constant lazy set with at most this many candidate elements is materialised when folded.
_MATERIALISE_AT_MOST = 4096


def const_value(fn: Fun) -> tuple[bool, Value]:
    try:
        return True, fn(None, EMPTY)  # type: ignore[arg-type]
    except Exception:  # not usable as a compile-time constant
        return False, None


def ordered(s: Value) -> list[Value]:
    """Enumerate a set in TLC's order: the canonical order (deterministic successor order and
    traces, independent of Python's per-process string hashing), except that a record set
    ``[n : S, b : T]`` varies its last field fastest, in the order the fields are written, as TLC
    enumerates it (the states a search finds before a violation depend on the order)."""
    if type(s) is RecordSet:
        return list(s.enumerate())
    return canonical(s)


class OrderedOnDemand:
    """A constant quantifier bound's elements in TLC's order (:func:`ordered`), sorted when first
    enumerated: a bound that is only filtered or tested for membership (``{ss \\in Seq(S) : P}``
    over half a million sequences) is never sorted. An enumeration error is raised where the
    elements are first enumerated, as :func:`ordered` would raise it there."""

    __slots__ = ("_elements", "_set")

    def __init__(self, s: Value) -> None:
        self._set = s
        self._elements: list[Value] | None = None

    def __iter__(self) -> Iterator[Value]:
        elements = self._elements
        if elements is None:
            elements = self._elements = ordered(self._set)
            self._set = None
        return iter(elements)



class VarRef:
    """A synthetic reference to a bound name (used to eta-expand operators passed as values)."""

    def __init__(self, name: str, like: Any) -> None:
        self.operator = name
        self.arguments = None
        self.nonfix = None
        self.start = getattr(like, "start", None)



UNSUPPORTED_OPS = frozenset(
    {"TLCSet", "RandomElement", "JavaTime", "Any", "PrintTLCState", "TLCModelValue",
     "JsonSerialize", "JsonDeserialize", "IOExec", "\\cdot", "-+->"}
)


def rebuild(p: Any, e: dict[str, Value]) -> Value:
    if isinstance(p, str):
        return e[p]
    return tuple(rebuild(q, e) for q in p)


_SKIP_FIELDS = frozenset({"symbol", "start", "end"})


def names_in(node: Any, cache: dict[int, tuple[Any, frozenset[str]]] | None = None) -> frozenset[str]:
    """Every identifier and operator name ``node`` mentions, bound ones included, and ``@``
    (over-approximates the names it reads from its environment). ``cache`` (by node identity)
    makes repeated questions on nested nodes linear; each entry holds its node, since synthetic
    nodes (``VarRef``, lists built while compiling) die and their ids are reused."""
    if node is None or isinstance(node, int | bool):
        return frozenset()
    if isinstance(node, str):
        return frozenset({"@"}) if node == "@" else frozenset()
    if cache is not None:
        hit = cache.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
    out: set[str] = set()
    if isinstance(node, list) or (isinstance(node, tuple) and not hasattr(node, "_fields")):
        for x in node:
            out |= names_in(x, cache)
    else:
        for attr in ("operator", "name"):
            v = getattr(node, attr, None)
            if isinstance(v, str):
                out.add(v)
        for f in getattr(node, "_fields", ()):
            if f not in _SKIP_FIELDS and f not in ("operator", "name"):
                out |= names_in(getattr(node, f), cache)
    names = frozenset(out)
    if cache is not None:
        cache[id(node)] = (node, names)
    return names


def name_of(x: Any) -> str:
    return x if isinstance(x, str) else x.operator


def describe(t: str) -> str:
    return {
        "FloatNumeral": "real numbers",
        "TemporalQuantification": "temporal quantification (\\EE / \\AA)",
        "Pick": "PICK",
        "Instance": "INSTANCE in an expression",
    }.get(t, t)


def flatten(op: str, node: Any) -> list[Any]:
    """``a /\\ b /\\ c`` (nested binary applications) -> [a, b, c]."""
    out: list[Any] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if (
            tname(n) == "OperatorApplication"
            and B.ALIASES.get(n.operator, n.operator) == op
            and len(n.arguments or []) == 2
        ):
            stack.append(n.arguments[1])
            stack.append(n.arguments[0])
        else:
            out.append(n)
    return out


def flatten_product(node: Any) -> list[Any]:
    """The factors of ``A \\X B \\X C`` (the parser gives n-ary or nested binary nodes)."""
    out: list[Any] = []
    for a in node.arguments:
        if tname(a) == "OperatorApplication" and B.ALIASES.get(a.operator, a.operator) == "\\X" and a.arguments:
            out += flatten_product(a)
        else:
            out.append(a)
    return out


MISSING: Any = object()


def read_vars(deps: int, nvars: int, most: int = 3) -> list[int] | None:
    """The unprimed variables an expression with dependencies ``deps`` reads, when they are
    between one and ``most`` and the expression reads nothing else of the state (no primed
    variable, no side effect); else None. Bound names (ENV) are left to the caller."""
    if deps & NEXT or not deps & STATE:
        return None
    idxs = [i for i in range(nvars) if deps & (VAR0 << i)]
    if not idxs or len(idxs) > most or deps & ~(STATE | ENV | ((1 << (VAR0.bit_length() - 1 + nvars)) - VAR0)):
        return None
    return idxs


def state_memo(fn: Fun, deps: int, nvars: int, most: int = 3) -> Fun:
    """Memoise an expression that depends on at most ``most`` unprimed variables and nothing else
    (no bound names, no primed variables), keyed by those variables' values."""
    if deps & ENV:
        return fn
    idxs = read_vars(deps, nvars, most)
    if idxs is None:
        return fn
    memo: dict[Any, Value] = {}
    if len(idxs) == 1:
        i = idxs[0]

        def memo1(c: Ctx, e: dict[str, Value]) -> Value:
            k = c.s[i]  # type: ignore[index]
            v = memo.get(k, MISSING)
            if v is MISSING:
                v = memo[k] = fn(c, e)
            return v

        return memo1

    def memok(c: Ctx, e: dict[str, Value]) -> Value:
        s = c.s
        k = tuple([s[i] for i in idxs])  # type: ignore[index]
        v = memo.get(k, MISSING)
        if v is MISSING:
            v = memo[k] = fn(c, e)
        return v

    return memok


def is_action(node: Any, scope: Scope, seen: frozenset[int] = frozenset()) -> bool:
    """Does ``node`` read primed variables (``x'``, ``UNCHANGED``), looking through definitions?"""
    if node is None or isinstance(node, str | int | bool):
        return False
    if isinstance(node, list) or (isinstance(node, tuple) and not hasattr(node, "_fields")):
        return any(is_action(x, scope, seen) for x in node)
    op = getattr(node, "operator", None)
    if op in ("'", "UNCHANGED"):
        return True
    if isinstance(op, str):
        d = scope.defs.get(op)
        body = getattr(d, "body", None)
        if body is not None and id(d) not in seen and is_action(body, d.scope, seen | {id(d)}):  # type: ignore[union-attr]
            return True
    fields = [f for f in getattr(node, "_fields", ()) if f not in ("symbol", "start", "end")]
    return any(is_action(getattr(node, f), scope, seen) for f in fields)
