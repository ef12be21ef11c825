"""Which parameters of an operator its body primes.

TLA+ defines ``Op(e)`` as the body with ``e`` substituted for the parameter, so in
``Lose(q) == q' = Tail(q)`` the call ``Lose(msgQ)`` means ``msgQ' = Tail(msgQ)``. Such a
parameter cannot be passed as a value (the value of ``msgQ`` has no prime): the compilers
substitute the argument instead (``Compiler.act_call``, ``ExprCompiler.call``).

A parameter counts as primed when it occurs inside ``'`` or ``UNCHANGED``, or is passed to an
operator that primes that parameter. Occurrences are found by name, so a bound variable of the
same name also counts: substituting is right for any parameter, only slower.
"""

from __future__ import annotations

from typing import Any

from .modules import OpDef

_PRIMING = frozenset({"'", "UNCHANGED"})
_SKIP_FIELDS = frozenset({"symbol", "start", "end"})


class PrimedParameters:
    """The primed parameters of operator definitions (analysed once each)."""

    def __init__(self) -> None:
        self.done: dict[int, frozenset[str]] = {}
        self.active: set[int] = set()

    def of(self, opdef: OpDef) -> frozenset[str]:
        """The names of ``opdef``'s parameters that its body primes."""
        key = id(opdef)
        hit = self.done.get(key)
        if hit is not None:
            return hit
        if key in self.active or not opdef.params:
            return frozenset()  # recursion: decided by the rest of the body
        self.active.add(key)
        try:
            names = frozenset(p for p, _arity in opdef.params)
            found: set[str] = set()
            self.walk(opdef.body, opdef, names, False, found)
        finally:
            self.active.discard(key)
        out = frozenset(found)
        self.done[key] = out
        return out

    def walk(self, node: Any, opdef: OpDef, names: frozenset[str], primed: bool, found: set[str]) -> None:
        if node is None or isinstance(node, str | int | bool):
            return
        if isinstance(node, list) or (isinstance(node, tuple) and not hasattr(node, "_fields")):
            for x in node:
                self.walk(x, opdef, names, primed, found)
            return
        op = getattr(node, "operator", None)
        arguments = getattr(node, "arguments", None) or []
        if isinstance(op, str):
            if primed and op in names and not arguments:
                found.add(op)
            primed = primed or op in _PRIMING
            callee = opdef.scope.defs.get(op)
            if isinstance(callee, OpDef) and callee is not opdef and arguments:
                inner = self.of(callee)
                for (p, _arity), a in zip(callee.params, arguments, strict=False):
                    self.walk(a, opdef, names, primed or p in inner, found)
                return
        for f in getattr(node, "_fields", ()):
            if f not in _SKIP_FIELDS:
                self.walk(getattr(node, f), opdef, names, primed, found)
