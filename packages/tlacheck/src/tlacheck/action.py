"""Compile TLA+ actions to successor generators, once.

Actions become generators ``g(c, e)`` that assign primed variables in ``c.n`` and yield once per
successor (the label of the innermost named sub-action, or None), undoing their assignments when
resumed: ``x' = e`` assigns when ``x'`` is unassigned and compares otherwise, ``x' \\in S``
enumerates, ``\\E`` enumerates its bindings, disjunction concatenates, conjunction nests. Init is
compiled the same way with unprimed variables as the assignment targets.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import builtins as B
from .codegen import generate, record, replay
from .errors import EvalError
from .expr import ExprCompiler
from .modules import Decl, OpDef, Scope
from .syntax import (
    ALLVARS,
    EMPTY,
    ENV,
    STATE,
    UNSET,
    Ctx,
    Fun,
    Gen,
    Local,
    all_of,
    any_of,
    as_bool,
    flatten,
    is_action,
    ordered,
    tname,
)
from .values import PLAIN_TYPES, Value, norm


class Compiler(ExprCompiler):
    """Compiles the definitions of a loaded root scope against a model's constants: expressions
    (inherited) and actions."""

    def enabled(self, anode: Any, scope: Scope, locals_: dict[str, Local]) -> tuple[Fun, int]:
        gen = self.action(anode, scope, locals_, False)
        nv = len(self.variables)

        def en(c: Ctx, e: dict[str, Value]) -> Value:
            c2 = Ctx(c.s, [UNSET] * nv)
            for _ in gen(c2, e):
                return True
            return False

        return en, STATE | ENV | ALLVARS

    # ---- actions ---------------------------------------------------------------------------
    def action(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> Gen:
        """Compile an action (or, with ``primed``, an initial predicate) to a successor generator:
        generated Python source (see :mod:`codegen`) where it can, else closures."""
        if not primed:
            gen = generate(self, node, scope, locals_)
            if gen is not None:
                return gen
        kind, fn = self.act(node, scope, locals_, primed)
        if kind == "pred":
            return pred_gen(fn)
        return fn

    def act(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[str, Any]:
        """``("act", generator)``, or ``("pred", fn)`` for a node that assigns no variable."""
        t = tname(node) if not isinstance(node, str) else "str"
        if t == "Parentheses":
            return self.act(node.expression, scope, locals_, primed)
        if t == "VerticalList":
            items = [it.expression for it in node.arguments]
            op = B.ALIASES.get(node.operator, node.operator)
            return self.act_junction(op, items, scope, locals_, primed)
        found: tuple[str, Any] | None = None
        if t == "OperatorApplication":
            found = self.act_application(node, scope, locals_, primed)
        elif t == "SubexpressionReference":
            found = self.act_instance_path(node, scope, locals_, primed)
        elif t == "Quantification" and node.quantifier == "\\A":
            found = self.act_forall(node, scope, locals_, primed)
        elif t == "Quantification" and node.quantifier == "\\E":
            found = self.act_exists(node, scope, locals_, primed)
        elif t == "If":
            found = self.act_if(node, scope, locals_, primed)
        elif t == "Cases":
            found = self.act_cases(node, scope, locals_, primed)
        elif t == "Let":
            found = self.act_let(node, scope, locals_, primed)
        elif t == "SubscriptedAction":
            found = self.act_subscripted(node, scope, locals_, primed)
        if found is not None:
            return found
        fn, _ = self.expr(node, scope, locals_, primed)
        return "pred", fn

    def act_application(
        self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[str, Any] | None:
        """An operator application as an action: a junction, an assignment, ``\\cdot``, UNCHANGED
        or a call; None when it is a predicate."""
        op = B.ALIASES.get(node.operator, node.operator)
        args = node.arguments or []
        if op in ("/\\", "\\/") and args:
            return self.act_junction(op, flatten(op, node), scope, locals_, primed)
        if op in ("=", "\\in") and len(args) == 2:
            lhs, lscope, llc = self.substituted(args[0], scope, locals_)
            idx = None
            if primed:
                idx = self.assignable(lhs, lscope, llc)
            elif tname(lhs) == "OperatorApplication" and lhs.operator == "'" and lhs.arguments:
                idx = self.assignable(*self.substituted(lhs.arguments[0], lscope, llc))
            if idx is not None:
                # In Init (primed) the right-hand side reads the partially assigned new state.
                rhs, _ = self.expr(args[1], scope, locals_, primed)
                return "act", (assign(idx, rhs) if op == "=" else assign_in(idx, rhs))
        if op == "\\cdot" and len(args) == 2 and not primed:
            return "act", self.composition(args[0], args[1], scope, locals_)
        if op == "UNCHANGED" and len(args) == 1 and not primed:
            idxs = self.unchanged_vars(args[0], scope, locals_)
            if idxs is not None:
                return "act", unchanged(idxs)
        if op not in B.BINARY and op not in B.UNARY and op not in ("'", "~", "=>", "<=>", "ENABLED", "UNCHANGED"):
            return self.act_named(op, args, node, scope, locals_, primed)
        return None

    def act_named(
        self, op: str, args: list[Any], node: Any, scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[str, Any] | None:
        """``op(args)`` as an action, where ``op`` names a definition, a substituted operator
        constant or a local; None when it is a predicate."""
        target = locals_.get(op) if op in locals_ else scope.defs.get(op)
        if isinstance(target, OpDef):
            return self.act_call(target, args, scope, locals_, primed, node)
        if isinstance(target, Decl) and args and target.scope.subst is not None:
            sub, outer = target.scope.subst[target.name]
            resolved = outer.defs.get(sub.operator) if tname(sub) == "OperatorApplication" else None
            if isinstance(resolved, OpDef) and not sub.arguments:
                # An operator constant replaced by an operator of the instantiating module.
                return self.act_call(resolved, args, scope, locals_, primed, node)
        if isinstance(target, Local) and target.kind == "subst" and not args:
            return self.act(target.body, target.scope or scope, target.locals, primed)
        if isinstance(target, Local) and target.kind == "thunk" and not args:
            assert target.body is not None
            return self.act(target.body.definiens, target.scope or scope, locals_, primed)
        if isinstance(target, Local) and target.kind == "letop":
            return self.act_letcall(target, args, scope, locals_, primed)
        return None

    def act_instance_path(
        self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[str, Any] | None:
        """``I!Op(args)``: a call of an instantiated module's operator."""
        opdef, _target, argnodes = self.resolve_instance_path(node, scope)
        if isinstance(opdef, OpDef):
            return self.act_call(opdef, argnodes, scope, locals_, primed, node)
        return None

    def act_forall(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[str, Any] | None:
        binds, _ = self.bounds(node.declarations, scope, locals_, primed)
        kind, body = self.act(node.predicate, scope, self.with_bound(locals_, binds), primed)
        if kind != "act":
            return None
        if len(binds) != 1 or not isinstance(binds[0][0], str):
            raise self.unsupported("\\A over an action with several bindings", node)
        (name, sfn), = binds

        def forall(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
            # \A x \in S : A(x) is the conjunction of A(v) for every v in S.
            vals = ordered(sfn(c, e))

            def rec(k: int) -> Iterator[str | None]:
                if k == len(vals):
                    yield None
                    return
                e2 = dict(e)
                e2[name] = vals[k]
                for _ in body(c, e2):
                    yield from rec(k + 1)

            yield from rec(0)

        return "act", forall

    def act_exists(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[str, Any] | None:
        binds, _ = self.bounds(node.declarations, scope, locals_, primed)
        kind, body = self.act(node.predicate, scope, self.with_bound(locals_, binds), primed)
        if kind != "act":
            return None
        it = self.env_iter(binds, canonical=True)
        hit = self.const_sets.get(id(binds[0][1])) if len(binds) == 1 else None
        if hit is not None and hit[0] is binds[0][1] and isinstance(binds[0][0], str):
            # \E x \in <constant set>: one generator layer less per action instance.
            values, name = hit[1], binds[0][0]

            def exists_const(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
                for v in values:
                    e2 = dict(e)
                    e2[name] = v
                    yield from body(c, e2)

            return "act", exists_const

        def exists(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
            for e2 in it(c, e):
                yield from body(c, e2)

        return "act", exists

    def act_if(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[str, Any] | None:
        p, _ = self.expr(node.predicate, scope, locals_, primed)
        k1, a = self.act(node.then, scope, locals_, primed)
        k2, b = self.act(node.else_, scope, locals_, primed)
        if k1 != "act" and k2 != "act":
            return None
        ga = a if k1 == "act" else pred_gen(a)
        gb = b if k2 == "act" else pred_gen(b)

        def ite(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
            if as_bool(p(c, e), "IF condition"):
                yield from ga(c, e)
            else:
                yield from gb(c, e)

        return "act", ite

    def act_cases(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[str, Any] | None:
        arms = []
        any_act = False
        for item in node.cases:
            p, _ = self.expr(item.predicate, scope, locals_, primed)
            k, a = self.act(item.expression, scope, locals_, primed)
            any_act |= k == "act"
            arms.append((p, a if k == "act" else pred_gen(a)))
        other = None
        if node.other is not None:
            k, o = self.act(node.other, scope, locals_, primed)
            any_act |= k == "act"
            other = o if k == "act" else pred_gen(o)
        if not any_act:
            return None
        where = self.where(node)

        def case(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
            for p, a in arms:
                if as_bool(p(c, e), "CASE guard"):
                    yield from a(c, e)
                    return
            if other is None:
                raise EvalError("no CASE arm applies and there is no OTHER", where)
            yield from other(c, e)

        return "act", case

    def act_let(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[str, Any] | None:
        inner, thunks, _ = self.let_locals(node.definitions, scope, locals_, primed)
        kind, body = self.act(node.expression, scope, inner, primed)
        if kind != "act":
            return None
        enter = self.enter_let

        def let(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
            yield from body(c, enter(thunks, c, e))

        if getattr(body, "guard", None) is not None and getattr(body, "prep", None) is None:
            # Expose the body's leading guard (with the LET bindings as an env step) so
            # that a disabled action costs no generator at all (see act_call).
            let.prep = lambda c, e: enter(thunks, c, e)  # type: ignore[attr-defined]
            let.guard = body.guard  # type: ignore[attr-defined]
            let.rest = body.rest  # type: ignore[attr-defined]
        return "act", let

    def act_subscripted(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[str, Any]:
        """``[A]_v`` (A or an UNCHANGED v step) and ``<<A>>_v`` (an A step that changes v)."""
        kind, a = self.act(node.action, scope, locals_, primed)
        ga = a if kind == "act" else pred_gen(a)
        v, _ = self.expr(node.subscript, scope, locals_, False)
        vp, _ = self.expr(node.subscript, scope, locals_, True)
        if node.operator == "[":
            idxs = self.unchanged_vars(node.subscript, scope, locals_)
            if idxs is None:
                raise self.unsupported("[A]_e where e is not a tuple of variables", node)
            unch = unchanged(idxs)

            def box(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
                yield from ga(c, e)
                yield from unch(c, e)

            return "act", box

        def angle(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
            for lab in ga(c, e):
                if vp(c, e) != v(c, e):
                    yield lab

        return "act", angle


    def unchanged_vars(self, node: Any, scope: Scope, locals_: dict[str, Local]) -> list[int] | None:
        """The variables of ``UNCHANGED e`` when e is (a definition of) a tuple of variables."""
        node, scope, locals_ = self.substituted(node, scope, locals_)
        t = tname(node)
        if t == "Tuple":
            out: list[int] = []
            for it in node.items:
                sub = self.unchanged_vars(it, scope, locals_)
                if sub is None:
                    return None
                out.extend(sub)
            return out
        if t == "OperatorApplication" and not node.arguments:
            idx = self.assignable(node, scope, locals_)
            if idx is not None:
                return [idx]
            d = scope.defs.get(node.operator) if node.operator not in locals_ else None
            if isinstance(d, OpDef) and not d.params:
                return self.unchanged_vars(d.body, d.scope, {})
            if isinstance(d, Decl) and d.kind == "var" and d.scope.subst is not None:
                # A variable of an instantiated module substituted by an expression (vars <- <<x, y>>).
                sub, outer = d.scope.subst[node.operator]
                return self.unchanged_vars(sub, outer, {})
        return None

    def act_junction(
        self, op: str, items: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[str, Any]:
        parts = [self.act(it, scope, locals_, primed) for it in items]
        if all(k == "pred" for k, _ in parts):
            fns = [f for _, f in parts]
            return "pred", (all_of(fns) if op == "/\\" else any_of(fns))
        if op == "\\/":
            gens = [f if k == "act" else pred_gen(f) for k, f in parts]

            def disj(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
                for g in gens:
                    yield from g(c, e)

            return "act", disj
        # A conjunct that only reads primed variables (done' = e with done an expression of an
        # instantiated module) waits for the conjuncts that assign them: /\ is commutative.
        late = [k == "pred" and is_action(it, scope) for (k, _f), it in zip(parts, items, strict=True)]
        if any(late):
            parts = [p for p, x in zip(parts, late, strict=True) if not x] + [
                p for p, x in zip(parts, late, strict=True) if x]
        return "act", conj_gen(parts)

    def act_call(
        self, opdef: OpDef, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool, node: Any
    ) -> tuple[str, Any]:
        if len(argnodes) != len(opdef.params):
            raise self.err(f"operator {opdef.name} expects {len(opdef.params)} arguments", node)
        if any(
            not ar and (is_action(a, scope) or (primed and self.assignable(a, scope, locals_) is not None))
            for (_p, ar), a in zip(opdef.params, argnodes, strict=True)
        ) or (not primed and self.primed.of(opdef) and opdef.name not in opdef.scope.recursive):
            # An action argument (XAct(x, x')), in Init a variable that the body may assign
            # (XInit(v) == v = 0), or a parameter the body primes (Lose(q) == q' = Tail(q)):
            # substitute the arguments, as TLA+ defines application.
            return self.act_inline(opdef, argnodes, scope, locals_, primed)
        kind, body = self.act_body(opdef, primed, node)
        if kind == "pred":
            fn, _ = self.call(opdef, argnodes, scope, locals_, primed, node)
            return "pred", fn
        fns = []
        for (_p, ar), a in zip(opdef.params, argnodes, strict=True):
            f, _ = self.op_value(a, ar, scope, locals_, primed) if ar else self.expr(a, scope, locals_, primed)
            fns.append(f)
        # The successors of an operator's action depend only on the current state and the
        # argument values when no primed variable is assigned on entry (the body sees its
        # parameters only). Memoisable when no argument is an operator.
        box: list[Any] | None = None
        if not primed and not any(ar for _p, ar in opdef.params):
            box = self.act_memos.setdefault(id(opdef), [None, False])
            if self.collect_acts is not None:
                self.collect_acts.add(id(opdef))
        pairs = list(zip([p for p, _ in opdef.params], fns, strict=True))
        where = f"{self.where(node)} ({opdef.name})"
        return "act", _call_generator(opdef.name, body, pairs, box, len(self.variables), where)

    def act_body(self, opdef: OpDef, primed: bool, node: Any) -> tuple[str, Any]:
        """An operator's body compiled as an action once (its parameters bound by the caller's
        env); a recursive action is refused."""
        key = ("act", id(opdef), primed)
        hit = self.cache.get(key)
        if hit is None:
            self.cache[key] = ("pending", None)
            locals_ = {p: Local("opparam" if ar else "val", p) for p, ar in opdef.params}
            with self.in_file_of(opdef):
                hit = self.act(opdef.body, opdef.scope, locals_, primed)
            self.cache[key] = hit
        elif hit[0] == "pending":
            raise self.unsupported(f"recursive action {opdef.name}", node)
        return hit

    def composition(self, a: Any, b: Any, scope: Scope, locals_: dict[str, Local]) -> Gen:
        """``A \\cdot B``: a step of A to a middle state, then a step of B from it."""
        first, second = self.action(a, scope, locals_, False), self.action(b, scope, locals_, False)
        nv = len(self.variables)
        where = self.where(a)

        def compose(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
            c1 = Ctx(c.s, [UNSET] * nv)
            for lab in first(c1, e):
                mid = tuple(c1.n)  # type: ignore[arg-type]
                if any(v is UNSET for v in mid):
                    missing = self.variables[[v is UNSET for v in mid].index(True)]
                    raise EvalError(f"{where}: the first action of \\cdot does not assign {missing}'")
                for lab2 in second(Ctx(mid, c.n), e):
                    yield lab2 or lab

        return compose

    @staticmethod
    def substituted(node: Any, scope: Scope, locals_: dict[str, Local]) -> tuple[Any, Scope, dict[str, Local]]:
        """The expression a parameter of an inlined call stands for (see :meth:`act_inline`)."""
        while True:
            while tname(node) == "Parentheses":
                node = node.expression
            if tname(node) != "OperatorApplication" or node.arguments:
                return node, scope, locals_
            loc = locals_.get(node.operator)
            if loc is None or loc.kind != "subst":
                return node, scope, locals_
            node, scope, locals_ = loc.body, loc.scope or scope, loc.locals

    def act_inline(
        self, opdef: OpDef, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[str, Any]:
        """``Op(A, ...)`` where an argument is an action (``NoStutter(A) == A /\\ s' = s``):
        the body is compiled with the arguments substituted (a parameter is compiled at each use
        in the call site's scope), so it runs in the caller's bindings; operator arguments
        (``LAMBDA j : j - 1``) are bound in them too."""
        inner, wrap, _deps = self.substitution(opdef, argnodes, scope, locals_, primed)
        with self.in_file_of(opdef):
            kind, body = self.act(opdef.body, opdef.scope, inner, primed)
        return kind, wrap(body)

    def act_letcall(
        self, target: Local, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[str, Any]:
        inner = dict(target.locals)
        for p, ar in target.params:
            inner[p] = Local("opparam" if ar else "val", p)
        assert target.scope is not None
        kind, body = self.act(target.body, target.scope, inner, primed)
        if kind == "pred":
            fn, _ = self.call_letop(target, argnodes, scope, locals_, primed, None)
            return "pred", fn
        fns = [self.op_value(a, ar, scope, locals_, primed)[0] if ar else self.expr(a, scope, locals_, primed)[0]
               for (_p, ar), a in zip(target.params, argnodes, strict=True)]
        pairs = list(zip([p for p, _ in target.params], fns, strict=True))

        def call(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
            e2 = dict(e)
            for n, f in pairs:
                e2[n] = f(c, e)
            yield from body(c, e2)

        return "act", call


def _call_generator(
    name: str, body: Gen, pairs: list[tuple[str, Fun]], box: list[Any] | None, nv: int, where: str
) -> Gen:
    """The successors of a call of the action ``name``: its parameters (``pairs``) bound to the
    arguments' values, then ``body``'s steps, unnamed ones named ``name``. With ``box`` (the
    operator's memo, see :meth:`Compiler.act_call`) they are recorded and replayed per state and
    arguments while the memo is on."""
    n0, f0 = pairs[0] if len(pairs) == 1 else ("", None)
    # A body that starts with a guard: test it before building the generator chain, since
    # most actions are disabled in most states.
    guard: Fun | None = getattr(body, "guard", None)
    rest: Gen | None = getattr(body, "rest", None)
    prep: Fun | None = getattr(body, "prep", None)
    only_name = (name,)

    def call(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
        # A plain function returning the iterator: no generator layer of its own.
        if f0 is not None:
            e2 = {n0: f0(c, e)}
        elif pairs:
            e2 = {}
            for n, f in pairs:
                e2[n] = f(c, e)
        else:
            e2 = EMPTY
        memo = box[0] if box is not None else None
        rec_key = None
        if memo is not None:
            n, s = c.n, c.s
            if n is not None and s is not None and n.count(UNSET) == nv:
                # Keyed by the state's identity (cheap); the entry keeps the state alive,
                # so the identity cannot be reused while the entry exists.
                key = (id(s), tuple(e2.values()))
                hit = memo.get(key)
                if hit is not None and hit[0] is s:
                    return replay(n, hit[1])
                if box[1]:
                    if guard is None:
                        return record(c, memo, key, _labelled(body, c, e2))
                    rec_key = key  # test the guard first: a disabled action records []
        if guard is None:
            return _labelled(body, c, e2)
        # Test the guard right here: a disabled action costs no generator at all.
        try:
            if prep is not None:
                e2 = prep(c, e2)
            v = guard(c, e2)
            if v is not True:
                if v is not False:
                    as_bool(v, "action guard")
                if rec_key is not None:
                    memo[rec_key] = (c.s, [])  # type: ignore[index]
                return ()
        except EvalError as exc:
            exc.locate(where)
            raise
        if rec_key is not None:
            return record(c, memo, rec_key, only_name if rest is None else _labelled(rest, c, e2))  # type: ignore[arg-type]
        if rest is None:
            return only_name
        return _labelled(rest, c, e2)

    def _labelled(gen: Gen, c: Ctx, e2: dict[str, Value]) -> Iterator[str | None]:
        """``gen``'s steps, unnamed ones named after this action, errors located at the call."""
        try:
            for lab in gen(c, e2):
                yield lab or name
        except EvalError as exc:
            exc.locate(where)
            raise

    return call


def pred_gen(p: Fun) -> Gen:
    return guarded(p, None)


def assign(i: int, rhs: Fun) -> Gen:
    def g(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
        n = c.n
        v = rhs(c, e)
        cur = n[i]  # type: ignore[index]
        if cur is UNSET:
            n[i] = norm(v)  # type: ignore[index]
            yield None
            n[i] = UNSET  # type: ignore[index]
        elif cur == v:
            yield None

    g.steps = ((i, rhs),)  # type: ignore[attr-defined]
    return g


def assign_in(i: int, rhs: Fun) -> Gen:
    def g(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
        n = c.n
        s = rhs(c, e)
        cur = n[i]  # type: ignore[index]
        if cur is UNSET:
            for v in ordered(s):
                n[i] = norm(v)  # type: ignore[index]
                yield None
            n[i] = UNSET  # type: ignore[index]
        elif cur in s:
            yield None

    return g


def unchanged(idxs: list[int]) -> Gen:
    def g(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
        n, s = c.n, c.s
        done = []
        for i in idxs:
            cur = n[i]  # type: ignore[index]
            if cur is UNSET:
                n[i] = s[i]  # type: ignore[index]
                done.append(i)
            elif cur != s[i]:  # type: ignore[index]
                for j in done:
                    n[j] = UNSET  # type: ignore[index]
                return
        yield None
        for j in done:
            n[j] = UNSET  # type: ignore[index]

    g.steps = tuple((i, None) for i in idxs)  # type: ignore[attr-defined]
    return g


def fused(steps: tuple[tuple[int, Fun | None], ...]) -> Gen:
    """A run of conjuncts ``x' = e`` and ``UNCHANGED <<...>>`` (each yields at most once) as one
    generator: the assignments are made in order, one successor is yielded, then undone. Same
    results as nesting them, without a generator layer per conjunct."""
    def g(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
        n = c.n
        done = []
        for i, rhs in steps:
            if rhs is None:
                v = c.s[i]  # type: ignore[index]
                cur = n[i]  # type: ignore[index]
                if cur is UNSET:
                    n[i] = v  # type: ignore[index]
                    done.append(i)
                elif cur != v:
                    break
            else:
                v = rhs(c, e)
                cur = n[i]  # type: ignore[index]
                if cur is UNSET:
                    n[i] = v if type(v) in PLAIN_TYPES else norm(v)  # type: ignore[index]
                    done.append(i)
                elif not cur == v:  # noqa: SIM201 (exactly assign's test)
                    break
        else:
            yield None
        for j in done:
            n[j] = UNSET  # type: ignore[index]

    g.steps = steps  # type: ignore[attr-defined]
    return g


def conj_gen(parts: list[tuple[str, Any]]) -> Gen:
    """Nest conjuncts left to right; runs of predicates become a single guard, runs of
    deterministic assignments a single generator (fused)."""
    merged: list[tuple[str, Any, Any]] = []  # (kind, fn, steps of a run of assignments)
    for k, f in parts:
        st = getattr(f, "steps", None) if k == "act" else None
        if st is not None and merged and merged[-1][2] is not None:
            merged[-1] = ("act", None, merged[-1][2] + st)
        else:
            merged.append((k, f, st))
    parts = [(k, f if f is not None else fused(st)) for k, f, st in merged]
    groups: list[tuple[str, Any]] = []
    for k, f in parts:
        if k == "pred" and groups and groups[-1][0] == "pred":
            prev = groups[-1][1]
            groups[-1] = ("pred", [*prev, f])
        elif k == "pred":
            groups.append(("pred", [f]))
        else:
            groups.append(("act", f))

    def guard(fns: list[Fun]) -> Fun:
        if len(fns) == 1:
            return fns[0]
        return all_of(fns)

    gen: Gen | None = None
    for k, f in reversed(groups):
        if k == "pred":
            p = guard(f)
            gen = guarded(p, gen)
        else:
            gen = seq_gen(f, gen)
    assert gen is not None
    return gen


def guarded(p: Fun, rest: Gen | None) -> Gen:
    """The successors of ``rest`` (or one, the current bindings, without ``rest``) where the
    predicate ``p`` holds."""

    def g(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
        v = p(c, e)
        if v is True:
            if rest is None:
                yield None
            else:
                for _ in rest(c, e):
                    yield None
        elif v is not False:
            as_bool(v, "action conjunct")

    g.guard = p  # type: ignore[attr-defined]
    g.rest = rest  # type: ignore[attr-defined]
    return g


def seq_gen(a: Gen, rest: Gen | None) -> Gen:
    """``a`` then ``rest`` on each of ``a``'s bindings."""
    if rest is None and getattr(a, "steps", None) is not None:
        return a  # yields None only already

    def g(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
        for _ in a(c, e):
            if rest is None:
                yield None
            else:
                yield from rest(c, e)

    return g
