"""Which operator definitions may be memoised on their arguments.

An operator is memoised (see ``ExprCompiler.call``) when it is *pure*, its value a function of its
arguments alone (no variable, primed or not, directly or through the definitions it calls; no
side effect such as ``Print``), and *expensive*: RECURSIVE, or its body (or a definition it
calls) contains a binder (quantifier, set filter or map, function constructor, CHOOSE). Cheap
bodies such as ``Node(v) == v[1]`` cost less to evaluate than to hash their arguments.

An expensive operator that is pure except that it reads unprimed variables (``StoreOutcomes(r,
S)`` of KVOffload.tla) is a function of its arguments and those variables' values: it may be
memoised on both (see ``ExprCompiler.state_memoised_call``).
"""

from __future__ import annotations

from typing import Any

from .modules import Decl, InstanceRef, OpDef, Scope

_BINDERS = frozenset({"Quantification", "SetSlice", "SetComprehension", "Function", "Choose"})
# Operators whose value depends on more than their arguments, or that act on the outside world.
_IMPURE_OPS = frozenset({
    "'", "UNCHANGED", "ENABLED", "Print", "PrintT", "Assert", "TLCGet", "TLCSet", "RandomElement",
    "JavaTime", "IOExec", "IOEnv", "TLCEval",
})
_SKIP_FIELDS = frozenset({"symbol", "start", "end"})


def has_binder(node: Any) -> bool:
    """Whether ``node`` holds a quantifier, set comprehension or filter, function constructor or
    CHOOSE: something whose evaluation loops, worth a memo lookup."""
    if node is None or isinstance(node, str | int | bool):
        return False
    if isinstance(node, list) or (isinstance(node, tuple) and not hasattr(node, "_fields")):
        return any(has_binder(x) for x in node)
    if type(node).__name__ in _BINDERS:
        return True
    return any(has_binder(getattr(node, f)) for f in getattr(node, "_fields", ()) if f not in _SKIP_FIELDS)


class Purity:
    """Analyses operator definitions once each (results cached by definition)."""

    def __init__(self) -> None:
        self.done: dict[int, tuple[bool, bool, bool]] = {}
        self.active: set[int] = set()

    def memoisable(self, opdef: OpDef) -> bool:
        pure, expensive, reads_state = self.analyse(opdef)
        return pure and not reads_state and expensive and all(arity == 0 for _, arity in opdef.params)

    def state_memoisable(self, opdef: OpDef) -> bool:
        """Expensive, and a function of its arguments and the unprimed variables it reads."""
        pure, expensive, reads_state = self.analyse(opdef)
        return pure and reads_state and expensive and all(arity == 0 for _, arity in opdef.params)

    def analyse(self, opdef: OpDef) -> tuple[bool, bool, bool]:
        """(pure apart from reading unprimed variables, expensive, reads unprimed variables) for
        ``opdef``."""
        key = id(opdef)
        hit = self.done.get(key)
        if hit is not None:
            return hit
        if key in self.active:
            return (True, True, False)  # recursion: decided by the rest of the body
        self.active.add(key)
        try:
            acc = [True, opdef.name in opdef.scope.recursive, False]
            self.walk(opdef.body, opdef.scope, acc)
        finally:
            self.active.discard(key)
        out = (acc[0], acc[1], acc[2])
        self.done[key] = out
        return out

    def walk(self, node: Any, scope: Scope, acc: list[bool]) -> None:
        if not acc[0] or node is None or isinstance(node, str | int | bool):
            return
        if isinstance(node, list) or (isinstance(node, tuple) and not hasattr(node, "_fields")):
            for x in node:
                self.walk(x, scope, acc)
            return
        kind = type(node).__name__
        if kind in _BINDERS:
            acc[1] = True
        elif kind in ("SubexpressionReference", "Instance"):
            acc[0] = False  # M!Op: not followed, so assumed to read the state
            return
        op = getattr(node, "operator", None)
        if isinstance(op, str):
            if op in _IMPURE_OPS:
                acc[0] = False
                return
            self.name(op, scope, acc)
        for f in getattr(node, "_fields", ()):
            if f not in _SKIP_FIELDS:
                self.walk(getattr(node, f), scope, acc)

    def name(self, name: str, scope: Scope, acc: list[bool]) -> None:
        d = scope.defs.get(name)
        if isinstance(d, Decl):
            if d.scope.subst is not None:
                sub, outer = d.scope.subst[name]
                self.walk(sub, outer, acc)
            elif d.kind == "var":
                acc[2] = True
        elif isinstance(d, OpDef):
            pure, expensive, reads_state = self.analyse(d)
            acc[0] = acc[0] and pure
            acc[1] = acc[1] or expensive
            acc[2] = acc[2] or reads_state
        elif isinstance(d, InstanceRef):
            acc[0] = False
