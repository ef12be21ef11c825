"""Decomposition of temporal formulas (SPECIFICATION and PROPERTY) into the pieces the checker
handles: the initial predicate, the next-state action, fairness conditions, invariants implied
by ``[]P``, action properties ``[][A]_v`` and the liveness forms ``<>P``, ``[]<>P``, ``<>[]P`` and
``P ~> Q`` (also written ``[](P => <>Q)``). Anything else is reported as unsupported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .action import Compiler
from .errors import TlaError
from .modules import OpDef, Scope, pos
from .syntax import EMPTY, Local, tname
from .values import Value

TEMPORAL_OPS = frozenset({"[]", "<>", "~>", "-+->", "\\cdot"})


@dataclass
class Piece:
    """A leaf of a temporal formula, with the (constant) bindings of enclosing ``\\A``."""

    node: Any
    scope: Scope
    locals: dict[str, Local]
    env: dict[str, Value]
    label: str


@dataclass
class Fairness:
    kind: str  # "WF" | "SF"
    action: Piece
    subscript: Piece


@dataclass
class Liveness:
    kind: str  # "<>" | "[]<>" | "<>[]" | "~>" | "[]<>step" ([]<><<A>>_v) | "[]" (only with a premise)
    p: Piece
    q: Piece | None
    name: str
    # P of ``P => F``: F is checked on the behaviours whose initial state satisfies P.
    premise: Piece | None = None


@dataclass
class Decomposed:
    inits: list[Piece] = field(default_factory=list)
    nexts: list[Piece] = field(default_factory=list)
    fairness: list[Fairness] = field(default_factory=list)
    invariants: list[Piece] = field(default_factory=list)  # []P
    actions: list[Piece] = field(default_factory=list)  # [][A]_v (the SubscriptedAction node)
    liveness: list[Liveness] = field(default_factory=list)
    # <>[][A]_v in a SPECIFICATION: behaviours eventually take only [A]_v steps (the
    # SubscriptedAction pieces); a liveness counterexample's cycle uses such steps only.
    suffix_actions: list[Piece] = field(default_factory=list)


class TemporalAnalyzer:
    def __init__(self, comp: Compiler) -> None:
        self.comp = comp

    def err(self, msg: str, node: Any, scope: Scope) -> TlaError:
        line, col = pos(node)
        return TlaError(msg, scope.file, line, col, kind="unsupported")

    def definition(self, node: Any, scope: Scope, locals_: dict[str, Local]) -> tuple[OpDef, list[Any]] | None:
        """The definition that ``node`` applies (``Op(args)`` or ``M!Op(args)`` through named
        instances) with its argument nodes, or None."""
        t = tname(node)
        if t == "OperatorApplication" and node.operator not in locals_:
            d = scope.defs.get(node.operator)
            return (d, list(node.arguments or [])) if isinstance(d, OpDef) else None
        if t == "SubexpressionReference":
            try:
                d, _target, args = self.comp.resolve_instance_path(node, scope)
            except TlaError:
                return None
            return (d, list(args)) if isinstance(d, OpDef) else None
        return None

    def is_temporal(self, node: Any, scope: Scope, seen: frozenset[int] = frozenset()) -> bool:
        """Does the formula contain a temporal operator (looking through definitions)?"""
        if node is None or isinstance(node, str | int | bool):
            return False
        if isinstance(node, list | tuple) and not hasattr(node, "_fields"):
            return any(self.is_temporal(x, scope, seen) for x in node)
        t = tname(node)
        if t in ("Fairness", "TemporalQuantification"):
            return True
        if t == "OperatorApplication" and node.operator in TEMPORAL_OPS:
            return True
        found = self.definition(node, scope, {})
        if found is not None:
            d = found[0]
            if id(d) not in seen and self.is_temporal(d.body, d.scope, seen | {id(d)}):
                return True
        fields = getattr(node, "_fields", ())
        return any(
            self.is_temporal(getattr(node, f), scope, seen) for f in fields if f not in ("symbol", "start", "end")
        )

    def split(
        self, node: Any, scope: Scope, locals_: dict[str, Local], env: dict[str, Value], label: str
    ) -> list[Piece]:
        """Conjuncts, looking through definitions, parentheses and ``\\A x \\in S``."""
        t = tname(node)
        if t == "Parentheses":
            return self.split(node.expression, scope, locals_, env, label)
        if t == "VerticalList" and node.operator in ("/\\", "\\land"):
            out: list[Piece] = []
            for it in node.arguments:
                out += self.split(it.expression, scope, locals_, env, label)
            return out
        if t == "OperatorApplication":
            op = node.operator
            args = node.arguments or []
            if op in ("/\\", "\\land") and len(args) == 2:
                return self.split(args[0], scope, locals_, env, label) + self.split(args[1], scope, locals_, env, label)
        found = self.definition(node, scope, locals_)
        if found is not None:
            d, args = found
            if self.is_temporal(d.body, d.scope):
                vals = {}
                for (p, ar), a in zip(d.params, args, strict=True):
                    if ar:
                        raise self.err("operator arguments in temporal formulas", node, scope)
                    fn, _ = self.comp.expr(a, scope, locals_, False)
                    vals[p] = fn(None, env)  # type: ignore[arg-type]
                inner = {p: Local("val", p) for p in vals}
                return self.split(d.body, d.scope, inner, vals, d.name)
        if t == "Quantification" and node.quantifier == "\\A" and self.is_temporal(node.predicate, scope):
            binds, _ = self.comp.bounds(node.declarations, scope, locals_, False)
            inner = self.comp.with_bound(locals_, binds)
            out = []
            for e2 in self.comp.env_iter(binds, canonical=True)(None, env):  # type: ignore[arg-type]
                out += self.split(node.predicate, scope, inner, e2, label)
            return out
        return [Piece(node, scope, locals_, env, label)]

    def unwrap(self, piece: Piece) -> Piece:
        """Look through parentheses and zero-arity definitions of a single formula."""
        node, scope = piece.node, piece.scope
        while True:
            t = tname(node)
            if t == "Parentheses":
                node = node.expression
                continue
            found = self.definition(node, scope, piece.locals)
            if found is not None:
                d, args = found
                if not d.params and not args and self.is_temporal(d.body, d.scope):
                    node, scope = d.body, d.scope
                    continue
            break
        return Piece(node, scope, piece.locals if scope is piece.scope else {}, piece.env, piece.label)

    def decompose(self, node: Any, scope: Scope, name: str, *, is_spec: bool) -> Decomposed:
        out = Decomposed()
        for raw in self.split(node, scope, {}, dict(EMPTY), name):
            self.decompose_into(out, self.unwrap(raw), is_spec)
        return out

    def decompose_piece(self, piece: Piece) -> Decomposed:
        """One property formula (not split into conjuncts) of a PROPERTY."""
        out = Decomposed()
        self.decompose_into(out, piece, False)
        return out

    def decompose_into(self, out: Decomposed, pc: Piece, is_spec: bool) -> None:
        """Sort one conjunct into ``out``."""
        n, sc = pc.node, pc.scope
        t = tname(n)
        if t == "Fairness":
            # In a SPECIFICATION an assumption on the behaviours; in a PROPERTY a claim to check.
            sub = Piece(n.subscript, sc, pc.locals, pc.env, pc.label)
            act = Piece(n.action, sc, pc.locals, pc.env, pc.label)
            out.fairness.append(Fairness(n.operator.rstrip("_"), act, sub))
            return
        if not self.is_temporal(n, sc):
            out.inits.append(pc)
            return
        placed = False
        if t == "OperatorApplication" and n.operator == "[]":
            placed = self.sort_always(out, pc, is_spec)
        elif t == "OperatorApplication" and n.operator == "<>":
            placed = self.sort_eventually(out, pc, is_spec)
        elif t == "OperatorApplication" and n.operator == "=>" and not self.is_temporal(n.arguments[0], sc):
            placed = self.sort_premised(out, pc)
        elif t == "OperatorApplication" and n.operator == "~>":
            placed = self.sort_leads_to(out, pc)
        if placed:
            return
        raise self.err(
            "unsupported temporal formula (supported: []P, [][A]_v, <>P, []<>P, <>[]P, P ~> Q, P => <>Q, P => []Q, "
            "WF/SF, conjunctions and \\A over constant sets of these)",
            n,
            sc,
        )

    def sort_always(self, out: Decomposed, pc: Piece, is_spec: bool) -> bool:
        """``[]F``: Next, an implied action, an invariant, ``P ~> Q`` as ``[](P => <>Q)``, or
        ``[]<>``; whether it is one of these."""
        n, sc = pc.node, pc.scope
        arg = self.unwrap(Piece(n.arguments[0], sc, pc.locals, pc.env, pc.label))
        at = tname(arg.node)
        if at == "SubscriptedAction" and arg.node.operator == "[":
            (out.nexts if is_spec and not out.nexts else out.actions).append(arg)
            return True
        if not self.is_temporal(arg.node, arg.scope):
            out.invariants.append(arg)
            return True
        if at == "OperatorApplication" and arg.node.operator == "=>":
            lhs, rhs = arg.node.arguments
            r = self.unwrap(Piece(rhs, arg.scope, arg.locals, arg.env, pc.label))
            if (
                not self.is_temporal(lhs, arg.scope)
                and tname(r.node) == "OperatorApplication"
                and r.node.operator == "<>"
                and not self.is_temporal(r.node.arguments[0], r.scope)
            ):
                out.liveness.append(
                    Liveness(
                        "~>",
                        Piece(lhs, arg.scope, arg.locals, arg.env, pc.label),
                        Piece(r.node.arguments[0], r.scope, r.locals, r.env, pc.label),
                        pc.label,
                    )
                )
                return True
        if at == "OperatorApplication" and arg.node.operator == "<>":
            inner = self.unwrap(Piece(arg.node.arguments[0], arg.scope, arg.locals, arg.env, pc.label))
            if tname(inner.node) == "SubscriptedAction" and inner.node.operator == "<<":
                out.liveness.append(Liveness("[]<>step", inner, None, pc.label))  # infinitely many A steps
                return True
            if not self.is_temporal(inner.node, inner.scope):
                out.liveness.append(Liveness("[]<>", inner, None, pc.label))
                return True
        return False

    def sort_eventually(self, out: Decomposed, pc: Piece, is_spec: bool) -> bool:
        """``<>F``: a SPECIFICATION's ``<>[][A]_v``, ``<>P`` or ``<>[]P``; whether it is one of these."""
        n, sc = pc.node, pc.scope
        arg = self.unwrap(Piece(n.arguments[0], sc, pc.locals, pc.env, pc.label))
        if is_spec and tname(arg.node) == "OperatorApplication" and arg.node.operator == "[]":
            inner = self.unwrap(Piece(arg.node.arguments[0], arg.scope, arg.locals, arg.env, pc.label))
            if tname(inner.node) == "SubscriptedAction" and inner.node.operator == "[":
                out.suffix_actions.append(inner)
                return True
        if not self.is_temporal(arg.node, arg.scope):
            out.liveness.append(Liveness("<>", arg, None, pc.label))
            return True
        if tname(arg.node) == "OperatorApplication" and arg.node.operator == "[]":
            inner = self.unwrap(Piece(arg.node.arguments[0], arg.scope, arg.locals, arg.env, pc.label))
            if not self.is_temporal(inner.node, inner.scope):
                out.liveness.append(Liveness("<>[]", inner, None, pc.label))
                return True
        return False

    def sort_premised(self, out: Decomposed, pc: Piece) -> bool:
        """``P => F`` with P a state predicate and F one of the forms above: F over the behaviours
        whose initial state satisfies P (``[]Q`` included); whether F is one of them."""
        n, sc = pc.node, pc.scope
        premise = Piece(n.arguments[0], sc, pc.locals, pc.env, pc.label)
        rhs = self.unwrap(Piece(n.arguments[1], sc, pc.locals, pc.env, pc.label))
        rn = rhs.node
        if (
            tname(rn) == "OperatorApplication"
            and rn.operator == "[]"
            and not self.is_temporal(rn.arguments[0], rhs.scope)
        ):
            q = Piece(rn.arguments[0], rhs.scope, rhs.locals, rhs.env, pc.label)
            out.liveness.append(Liveness("[]", q, None, pc.label, premise))
            return True
        inner = self.decompose_piece(rhs)
        if inner.liveness and len(inner.liveness) == 1 and not (inner.inits or inner.invariants
                                                                or inner.actions or inner.fairness):
            lv = inner.liveness[0]
            out.liveness.append(Liveness(lv.kind, lv.p, lv.q, pc.label, premise))
            return True
        return False

    def sort_leads_to(self, out: Decomposed, pc: Piece) -> bool:
        """``P ~> Q`` over state predicates; whether both are."""
        n, sc = pc.node, pc.scope
        lhs, rhs = n.arguments
        if self.is_temporal(lhs, sc) or self.is_temporal(rhs, sc):
            return False
        out.liveness.append(
            Liveness(
                "~>",
                Piece(lhs, sc, pc.locals, pc.env, pc.label),
                Piece(rhs, sc, pc.locals, pc.env, pc.label),
                pc.label,
            )
        )
        return True

