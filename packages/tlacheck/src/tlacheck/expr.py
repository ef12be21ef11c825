"""Compile TLA+ expressions to Python closures ``f(c, e) -> value``, once.

Constant sub-expressions (no state, no bound names) are evaluated once and cached. Actions are
compiled by :mod:`tlacheck.action`, which extends this compiler.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from . import builtins as B
from . import setfold
from .errors import EvalError, TlaError, raise_located
from .modules import Decl, InstanceRef, OpDef, Scope, pos
from .order import least
from .primed import PrimedParameters
from .purity import Purity, has_binder
from .syntax import (
    ALLVARS,
    EMPTY,
    ENV,
    IMPURE,
    MISSING,
    NEXT,
    STATE,
    UNSET,
    UNSUPPORTED_OPS,
    VAR0,
    Ctx,
    Fun,
    Local,
    OrderedOnDemand,
    Thunk,
    VarRef,
    all_of,
    any_of,
    as_bool,
    const_value,
    describe,
    flatten_product,
    fold,
    name_of,
    names_in,
    ordered,
    read_vars,
    rebuild,
    state_memo,
    tname,
    unescape,
)
from .values import (
    BOOLEAN,
    PLAIN_TYPES,
    STRING,
    FilteredSet,
    Fn,
    FnSet,
    LazyFn,
    LazySet,
    ProductSet,
    RecordSet,
    Value,
    apply,
    iter_set,
    mkfn,
    norm,
    remember,
    render,
    update,
)

# Entries of one operator's memo (see memoised_call) before it is cleared, bounding its memory.
_OP_MEMO_LIMIT = 100_000


def bound_operator(body: Fun, params: list[str]) -> Fun:
    """An operator argument (``LAMBDA x : ...`` or a named operator) as a value: a callable
    ``(c, args) -> value`` that evaluates ``body`` with ``params`` bound to ``args`` in the
    environment of the place it was passed from."""

    def make(c: Ctx, e: dict[str, Value]) -> Value:
        def op(c2: Ctx, args: tuple[Value, ...]) -> Value:
            e2 = dict(e)
            e2.update(zip(params, args, strict=True))
            return body(c2, e2)

        return op

    return make


def _applied(body: Fun, names: list[str], fns: list[Fun]) -> Fun:
    """``body`` with its parameters ``names`` bound to the values of ``fns``; up to three
    parameters without a loop (most calls have one or two)."""
    if len(fns) == 1:
        n0, f0 = names[0], fns[0]
        return lambda c, e: body(c, {n0: f0(c, e)})
    if len(fns) == 2:
        n0, f0 = names[0], fns[0]
        n1, f1 = names[1], fns[1]
        return lambda c, e: body(c, {n0: f0(c, e), n1: f1(c, e)})
    if len(fns) == 3:
        n0, f0 = names[0], fns[0]
        n1, f1 = names[1], fns[1]
        n2, f2 = names[2], fns[2]
        return lambda c, e: body(c, {n0: f0(c, e), n1: f1(c, e), n2: f2(c, e)})
    pairs = list(zip(names, fns, strict=True))
    return lambda c, e: body(c, {n: f(c, e) for n, f in pairs})


class ExprCompiler:
    """Compiles expressions (values and state predicates) of a loaded root scope against a model's
    constants; :class:`~tlacheck.action.Compiler` adds actions."""

    def __init__(self, root: Scope, constants: dict[str, Value]) -> None:
        self.root = root
        self.constants = constants
        self.variables = list(root.variables)
        self.var_index = {v: i for i, v in enumerate(self.variables)}
        self.cache: dict[tuple[Any, ...], Any] = {}
        self.file_stack: list[str] = [root.file]
        # Quantifier bounds that are constant, sorted once when first enumerated (keyed by the
        # bound's closure).
        self.const_sets: dict[int, tuple[Fun, OrderedOnDemand]] = {}
        # Successor memos of actions (see act_call): per operator, a box holding None (off) or
        # a dict (id(state), arguments) -> (state, [(label, successor)]), and whether to record
        # new entries; switched on by the checker.
        self.act_memos: dict[int, list[Any]] = {}
        # While set, act_call records the operators it is asked to call (fairness actions).
        self.collect_acts: set[int] | None = None
        # Memoised calls of pure, expensive operators: per definition, argument values -> value.
        self.purity = Purity()
        self.primed = PrimedParameters()
        self.op_memos: dict[Any, dict[Any, Value]] = {}
        # The LET definitions (by their node's id) whose values are memoised (let_memoised).
        self.memoised_lets: set[int] = set()
        # How many times ``@`` was compiled: an EXCEPT value that does not read it is evaluated
        # in its enclosing environment, without a copy that binds ``@``.
        self.at_reads = 0
        # syntax.names_in per syntax node.
        self.names: dict[int, tuple[Any, frozenset[str]]] = {}

    # ---- errors -------------------------------------------------------------------------
    @contextlib.contextmanager
    def in_file_of(self, opdef: OpDef) -> Iterator[None]:
        """While ``opdef``'s body compiles, errors name the file it was written in."""
        self.file_stack.append(opdef.file or opdef.scope.file)
        try:
            yield
        finally:
            self.file_stack.pop()

    def err(self, msg: str, node: Any, kind: str = "semantic") -> TlaError:
        line, col = pos(node)
        return TlaError(msg, self.file_stack[-1], line, col, kind=kind)

    def unsupported(self, what: str, node: Any) -> TlaError:
        return self.err(f"unsupported construct: {what}", node, kind="unsupported")

    def where(self, node: Any) -> str:
        line, col = pos(node)
        return f"{self.file_stack[-1]}:{line}:{col}"

    def located(self, fn: Fun, node: Any, what: str) -> Fun:
        where = f"{self.where(node)} ({what})"

        def g(c: Ctx, e: dict[str, Value]) -> Value:
            try:
                return fn(c, e)
            except (EvalError, TypeError, ValueError) as exc:
                raise_located(exc, where)

        return g

    # ---- name resolution ------------------------------------------------------------------
    def lookup(self, name: str, scope: Scope) -> Any:
        d = scope.defs.get(name)
        if d is not None:
            return d
        if name in B.FUNCTIONS or name in B.CONSTANTS:
            return ("builtin", name)
        return None

    def assignable(self, node: Any, scope: Scope, locals_: dict[str, Local]) -> int | None:
        """The state-variable index an identifier denotes (following INSTANCE substitutions)."""
        while tname(node) == "Parentheses":
            node = node.expression
        if tname(node) != "OperatorApplication" or node.arguments:
            return None
        name = node.operator
        if name in locals_:
            return None
        d = scope.defs.get(name)
        if isinstance(d, Decl) and d.kind == "var":
            if d.scope.subst is None:
                return self.var_index[name]
            sub, outer = d.scope.subst[name]
            return self.assignable(sub, outer, {})
        return None

    # ---- operator bodies -------------------------------------------------------------------
    def op_body(self, opdef: OpDef, primed: bool) -> tuple[Fun, int]:
        key = ("op", id(opdef), primed)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        locals_ = {p: Local("opparam" if ar else "val", p) for p, ar in opdef.params}

        def build() -> tuple[Fun, int]:
            with self.in_file_of(opdef):
                if getattr(opdef.node, "function", None):
                    return self.function_def(opdef.name, opdef.body, opdef.scope, locals_, primed)
                fn, deps = self.expr(opdef.body, opdef.scope, locals_, primed)
                if opdef.name in opdef.scope.recursive:
                    fn = self.set_fold(opdef, fn, locals_, primed)
                return fn, deps

        fn, deps = self.self_referent(key, build)
        if deps == 0:
            # A constant reads no variable, primed or not: one value for both (Init's
            # `seq \in SortedSeqs` and the invariant's), evaluated once.
            self.cache.setdefault(("op", id(opdef), not primed), (fn, deps))
        return fn, deps

    def self_referent(self, key: tuple[Any, ...], build: Callable[[], tuple[Fun, int]]) -> tuple[Fun, int]:
        r"""Compile, by ``build``, a definition that may call itself: while it compiles, ``key``
        maps to a closure that forwards to the result.

        The forward's dependencies are assumed: every variable, so nothing is folded into a
        constant, but no primed one, so a LET definition over a recursive call is evaluated once
        per entry (TC4's ``RR == TCR(T \ {r})`` is read twice per pair, which re-evaluated is
        exponential). When the body does read a primed variable, what was compiled under that
        assumption is dropped and the body compiled again under the worst case."""
        cell: list[Fun] = []

        def forward(c: Ctx, e: dict[str, Value]) -> Value:
            return cell[0](c, e)

        mark = len(self.cache)
        self.cache[key] = (forward, STATE | ENV | ALLVARS)
        fn, deps = build()
        if deps & NEXT:
            for stale in list(self.cache)[mark:]:
                del self.cache[stale]
            self.cache[key] = (forward, STATE | NEXT | ENV | ALLVARS)
            fn, deps = build()
        cell.append(fn)
        self.cache[key] = (fn, deps)
        return fn, deps

    def set_fold(self, opdef: OpDef, as_written: Fun, locals_: dict[str, Local], primed: bool) -> Fun:
        """A RECURSIVE definition that folds over a set by CHOOSE as a loop (:mod:`setfold`), else
        ``as_written``."""
        def standard(op: str) -> bool:
            op = B.ALIASES.get(op, op)
            return op in B.BINARY and op not in opdef.scope.defs

        fold = setfold.match(opdef, standard)
        if fold is None:
            return as_written
        base, _ = self.expr(fold.base, opdef.scope, locals_, primed)
        with_element = {**locals_, fold.element: Local("val", fold.element)}
        term, _ = self.expr(fold.term, opdef.scope, with_element, primed)
        combine = B.BINARY[B.ALIASES.get(fold.op, fold.op)]
        return setfold.evaluator(fold, base, term, combine, as_written)

    def function_def(
        self, name: str, fnode: Any, scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[Fun, int]:
        """``f[x \\in S] == body`` or ``f[x \\in S, y \\in T] == body`` (arguments as a tuple):
        a (possibly recursive, possibly infinite) lazy function."""
        binds, bdeps = self.bounds(fnode.declaration, scope, locals_, primed)
        inner = self.with_bound(locals_, binds)
        body, deps = self.expr(fnode.value, scope, inner, primed)
        pats = [p for p, _ in binds]
        sfns = [s for _, s in binds]
        bind = self.bind
        where, what = self.where(fnode), f"the function {name}"
        too_deep = self.too_deep

        def make(c: Ctx, e: dict[str, Value]) -> Value:
            dom = sfns[0](c, e) if len(sfns) == 1 else ProductSet([s(c, e) for s in sfns])

            def at(x: Value) -> Value:
                e2 = dict(e)
                if len(pats) == 1:
                    bind(e2, pats[0], x)
                else:
                    for p, v in zip(pats, x, strict=True):  # type: ignore[arg-type]
                        bind(e2, p, v)
                try:
                    return body(c, e2)
                except RecursionError:
                    raise too_deep(where, what) from None

            return LazyFn(dom, at)

        return make, (deps | bdeps) & ~ENV if not locals_ else deps | bdeps

    # ---- bounds ----------------------------------------------------------------------------
    def bounds(
        self, decls: Any, scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[list[tuple[Any, Fun]], int]:
        if not isinstance(decls, list):
            decls = [decls]
        out: list[tuple[Any, Fun]] = []
        pending: list[Any] = []
        deps = 0
        for d in decls:
            if tname(d) == "OperatorApplication" and d.operator == "\\in" and len(d.arguments or []) == 2:
                pat = self.pattern(d.arguments[0])
                sfn, sd = self.expr(d.arguments[1], scope, locals_, primed)
                deps |= sd
                if sd == 0:
                    ok, sv = const_value(sfn)
                    if ok:
                        self.const_sets[id(sfn)] = (sfn, OrderedOnDemand(sv))
                for p in pending:
                    out.append((p, sfn))
                pending = []
                out.append((pat, sfn))
            elif tname(d) == "OperatorApplication" and not d.arguments:
                pending.append(d.operator)
            elif tname(d) == "Tuple":
                pending.append(self.pattern(d))
            else:
                raise self.unsupported(f"binding form {tname(d)}", d)
        if pending:
            raise self.unsupported("unbounded quantifier or CHOOSE (x without \\in S)", decls[0])
        return out, deps

    def pattern(self, node: Any) -> Any:
        if tname(node) == "OperatorApplication" and not node.arguments:
            return node.operator
        if tname(node) == "Tuple":
            return tuple(self.pattern(x) for x in node.items)
        raise self.unsupported(f"binding pattern {tname(node)}", node)

    @staticmethod
    def bound_names(binds: list[tuple[Any, Fun]]) -> list[str]:
        out: list[str] = []

        def walk(p: Any) -> None:
            if isinstance(p, str):
                out.append(p)
            else:
                for q in p:
                    walk(q)

        for p, _ in binds:
            walk(p)
        return out

    @staticmethod
    def bind(e: dict[str, Value], pat: Any, v: Value) -> None:
        if isinstance(pat, str):
            e[pat] = v
            return
        if type(v) is not tuple or len(v) != len(pat):
            raise EvalError(f"cannot bind {render(v)} to a tuple of {len(pat)} names")
        for p, x in zip(pat, v, strict=True):
            ExprCompiler.bind(e, p, x)

    def env_iter(
        self, binds: list[tuple[Any, Fun]], canonical: bool = False
    ) -> Callable[[Ctx, dict[str, Value]], Iterator[dict[str, Value]]]:
        enum = ordered if canonical else iter_set
        if len(binds) == 1 and isinstance(binds[0][0], str):
            (name, sfn), = binds
            hit = self.const_sets.get(id(sfn)) if canonical else None
            if hit is not None and hit[0] is sfn:
                values = hit[1]

                def one_const(c: Ctx, e: dict[str, Value]) -> Iterator[dict[str, Value]]:
                    for v in values:
                        e2 = dict(e)
                        e2[name] = v
                        yield e2

                return one_const

            def one(c: Ctx, e: dict[str, Value]) -> Iterator[dict[str, Value]]:
                for v in enum(sfn(c, e)):
                    e2 = dict(e)
                    e2[name] = v
                    yield e2

            return one
        if len(binds) == 2 and isinstance(binds[0][0], str) and isinstance(binds[1][0], str):
            (n0, s0), (n1, s1) = binds

            def two(c: Ctx, e: dict[str, Value]) -> Iterator[dict[str, Value]]:
                for v0 in enum(s0(c, e)):
                    e1 = dict(e)
                    e1[n0] = v0
                    for v1 in enum(s1(c, e1)):
                        e2 = dict(e1)
                        e2[n1] = v1
                        yield e2

            return two
        if len(binds) == 1 and isinstance(binds[0][0], tuple) and all(isinstance(p, str) for p in binds[0][0]):
            return self.tuple_iter(binds[0][0], binds[0][1], enum)
        bind = self.bind

        def many(c: Ctx, e: dict[str, Value], k: int = 0) -> Iterator[dict[str, Value]]:
            if k == len(binds):
                yield e
                return
            pat, sfn = binds[k]
            for v in enum(sfn(c, e)):
                e2 = dict(e)
                bind(e2, pat, v)
                yield from many(c, e2, k + 1)

        return many

    @staticmethod
    def tuple_iter(
        names: tuple[str, ...], sfn: Fun, enum: Callable[[Value], Iterable[Value]]
    ) -> Callable[[Ctx, dict[str, Value]], Iterator[dict[str, Value]]]:
        """``<<x, y>> \\in S`` (``{<<p[1] + x, p[2] + y>> : <<x, y>> \\in nbrs}``): each element's
        items bound in one step, without the general binder's recursion."""
        size = len(names)
        if size == 2:
            n0, n1 = names

            def pair(c: Ctx, e: dict[str, Value]) -> Iterator[dict[str, Value]]:
                for v in enum(sfn(c, e)):
                    if type(v) is not tuple or len(v) != 2:
                        raise EvalError(f"cannot bind {render(v)} to a tuple of 2 names")
                    e2 = dict(e)
                    e2[n0], e2[n1] = v
                    yield e2

            return pair

        def one_tuple(c: Ctx, e: dict[str, Value]) -> Iterator[dict[str, Value]]:
            for v in enum(sfn(c, e)):
                if type(v) is not tuple or len(v) != size:
                    raise EvalError(f"cannot bind {render(v)} to a tuple of {size} names")
                e2 = dict(e)
                for name, x in zip(names, v, strict=True):
                    e2[name] = x
                yield e2

        return one_tuple

    def with_bound(self, locals_: dict[str, Local], binds: list[tuple[Any, Fun]]) -> dict[str, Local]:
        inner = dict(locals_)
        for n in self.bound_names(binds):
            inner[n] = Local("val", n)
        return inner

    # ---- expressions -----------------------------------------------------------------------
    def expr(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        fn, deps = self._expr(node, scope, locals_, primed)
        if deps == ENV and locals_ and not names_in(node, self.names) & locals_.keys():
            # It reads only names it binds itself (`{x \in S : x # 0}` inside an operator with
            # parameters): a constant, evaluated once instead of on every call.
            deps = 0
        return fold(fn, deps), deps

    def _expr(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        if isinstance(node, str):
            if node == "@":
                if "@" not in locals_:
                    raise self.err("@ used outside EXCEPT", None)
                self.at_reads += 1
                return (lambda c, e: e["@"]), ENV
            raise self.unsupported(f"bare token {node!r}", None)
        t = tname(node)
        meth = getattr(self, f"x_{t}", None)
        if meth is None:
            raise self.unsupported(describe(t), node)
        return meth(node, scope, locals_, primed)

    def x_Parentheses(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        return self._expr(node.expression, scope, locals_, primed)

    def x_IntegralNumeral(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        v = int(node.value)
        return (lambda c, e: v), 0

    def x_StringLiteral(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        v = unescape(node.value)
        return (lambda c, e: v), 0

    def x_BooleanLiteral(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        v = node.value == "TRUE"
        return (lambda c, e: v), 0

    def x_SetOfBooleans(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        return (lambda c, e: BOOLEAN), 0

    def x_SetOfStrings(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        return (lambda c, e: STRING), 0

    def many(self, nodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[list[Fun], int]:
        fns, deps = [], 0
        for n in nodes:
            f, d = self.expr(n, scope, locals_, primed)
            fns.append(f)
            deps |= d
        return fns, deps

    def x_SetEnumeration(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        fns, deps = self.many(node.items or [], scope, locals_, primed)
        if len(fns) == 1:
            f0 = fns[0]
            return (lambda c, e: frozenset((norm(f0(c, e)),))), deps
        return (lambda c, e: frozenset([norm(f(c, e)) for f in fns])), deps

    def x_Tuple(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        fns, deps = self.many(node.items or [], scope, locals_, primed)
        if len(fns) == 2:
            f0, f1 = fns
            return (lambda c, e: (f0(c, e), f1(c, e))), deps
        return (lambda c, e: tuple([f(c, e) for f in fns])), deps

    def x_Record(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        keys = [k for k, _ in node.key_values]
        fns, deps = self.many([v for _, v in node.key_values], scope, locals_, primed)
        pairs = list(zip(keys, fns, strict=True))

        def record(c: Ctx, e: dict[str, Value]) -> Value:
            d = {}
            for k, f in pairs:
                v = f(c, e)
                d[k] = v if type(v) in PLAIN_TYPES else norm(v)
            return Fn(d)

        return record, deps

    def x_SetOfRecords(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        keys = [kb.name for kb in node.key_bounds]
        fns, deps = self.many([kb.bound for kb in node.key_bounds], scope, locals_, primed)
        pairs = list(zip(keys, fns, strict=True))
        return (lambda c, e: RecordSet({k: f(c, e) for k, f in pairs})), deps

    def x_SetOfFunctions(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        d, dd = self.expr(node.domain, scope, locals_, primed)
        r, rd = self.expr(node.codomain, scope, locals_, primed)
        return (lambda c, e: FnSet(d(c, e), r(c, e))), dd | rd

    def x_If(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        p, pd = self.expr(node.predicate, scope, locals_, primed)
        t, td = self.expr(node.then, scope, locals_, primed)
        f, fd = self.expr(node.else_, scope, locals_, primed)

        def ite(c: Ctx, e: dict[str, Value]) -> Value:
            v = p(c, e)
            if v is True:
                return t(c, e)
            if v is False or not as_bool(v, "IF condition"):
                return f(c, e)
            return t(c, e)

        return ite, pd | td | fd

    def x_Cases(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        arms, deps = [], 0
        for item in node.cases:
            p, pd = self.expr(item.predicate, scope, locals_, primed)
            v, vd = self.expr(item.expression, scope, locals_, primed)
            arms.append((p, v))
            deps |= pd | vd
        other = None
        if node.other is not None:
            other, od = self.expr(node.other, scope, locals_, primed)
            deps |= od
        where = self.where(node)

        def case(c: Ctx, e: dict[str, Value]) -> Value:
            for p, v in arms:
                if as_bool(p(c, e), "CASE guard"):
                    return v(c, e)
            if other is not None:
                return other(c, e)
            raise EvalError("no CASE arm applies and there is no OTHER", where)

        return case, deps

    def let_locals(
        self, defs: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[dict[str, Local], list[tuple[str, Fun, bool]], int]:
        """Compile-time bindings of a LET, and the zero-arity definitions to thunk on entry."""
        inner = dict(locals_)
        thunks: list[tuple[str, Fun, bool]] = []
        deps = ENV
        for d in defs:
            k = tname(d)
            if k == "RecursiveOperators":
                continue
            if k != "OperatorDefinition":
                raise self.unsupported(f"{k} inside LET", d)
            if tname(d.definiens) == "Instance":
                raise self.unsupported("INSTANCE inside LET", d)
            if d.arity:
                params = [(p.operator, len(p.arguments or []) if p.nonfix else 0) if not isinstance(p, str)
                          else (p, 0) for p in d.arity]
                inner[d.name] = Local("letop", d.name, params, d.definiens, scope, None)
                inner[d.name].locals = inner  # later defs and recursion see each other
                continue
            local = inner[d.name] = Local("thunk", d.name, [], d, scope, None)
            if d.function:
                fn, fd = self.function_def(d.name, d.definiens, scope, inner, primed)
            else:
                fn, fd = self.expr(d.definiens, scope, inner, primed)
                fn = self.let_memoised(d, fn, fd, inner, local)
            thunks.append((d.name, fn, not (fd & NEXT)))
            deps |= fd
        return inner, thunks, deps

    def let_memoised(self, d: Any, fn: Fun, deps: int, inner: dict[str, Local], local: Local) -> Fun:
        """``fn``, the value of the LET definition ``d``, memoised on the values of the bound names
        it reads when it reads no variable and loops (``points == {<<p[1] + x, p[2] + y>> :
        <<x, y>> \\in nbrs}`` in GameOfLife's ``score(p)``: 16 values over the whole search, built
        16 times per state before). ``local`` is recorded with the bound names its value depends
        on, for the definitions that read it: they are keyed on those names, never on its value,
        which would evaluate it where the definition as written might not."""
        if deps & ~ENV:
            return fn
        keys: set[str] = set()
        for n in names_in(d.definiens, self.names) & inner.keys() - {d.name}:
            loc = inner[n]
            if loc.kind == "val":
                keys.add(n)
            elif loc.kind == "thunk" and loc.stateless is not None:
                keys |= loc.stateless
            else:
                return fn
        local.stateless = frozenset(keys)
        if not keys or not has_binder(d.definiens):
            return fn
        names = sorted(keys)
        # One memo per definition and key names: the same definition keys on m where the
        # generated code bound m as a value, on p (what m reads) where the closures thunk it.
        memo = self.op_memos.setdefault((id(d), tuple(names)), {})
        self.memoised_lets.add(id(d))
        plain, limit = PLAIN_TYPES, _OP_MEMO_LIMIT

        def memoised(c: Ctx, e: dict[str, Value]) -> Value:
            key = tuple([e[n] for n in names])
            for v in key:
                if type(v) not in plain:  # lazy sets and functions: hashing would materialise them
                    return fn(c, e)
            r = memo.get(key, MISSING)
            if r is MISSING:
                r = fn(c, e)
                remember(memo, key, r, limit)
            return r

        return memoised

    @staticmethod
    def enter_let(thunks: list[tuple[str, Fun, bool]], c: Ctx, e: dict[str, Value]) -> dict[str, Value]:
        e2 = dict(e)
        for name, fn, memo in thunks:
            e2[name] = Thunk(fn, c, e2, memo)
        return e2

    def x_Let(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        inner, thunks, deps = self.let_locals(node.definitions, scope, locals_, primed)
        body, bd = self.expr(node.expression, scope, inner, primed)
        enter = self.enter_let
        if not thunks:
            return body, bd | deps
        return (lambda c, e: body(c, enter(thunks, c, e))), bd | deps

    def x_Quantification(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        binds, bd = self.bounds(node.declarations, scope, locals_, primed)
        body, pd = self.expr(node.predicate, scope, self.with_bound(locals_, binds), primed)
        it = self.env_iter(binds)
        deps = bd | pd if locals_ else bd | (pd & ~ENV)
        if len(binds) == 1 and isinstance(binds[0][0], str) and node.quantifier in ("\\E", "\\A"):
            (name, sfn), = binds
            want = node.quantifier == "\\E"

            def quant1(c: Ctx, e: dict[str, Value]) -> Value:
                e2 = dict(e)
                for v in iter_set(sfn(c, e)):
                    e2[name] = v
                    r = body(c, e2)
                    if r is want:
                        return want
                    if r is not (not want):
                        as_bool(r, "quantifier body")
                return not want

            return quant1, deps
        if all(isinstance(p, str) for p, _ in binds) and node.quantifier in ("\\E", "\\A"):
            return self.quant_names(binds, body, node.quantifier == "\\E"), deps
        if node.quantifier == "\\E":
            def exists(c: Ctx, e: dict[str, Value]) -> Value:
                return any(as_bool(body(c, e2), "\\E body") for e2 in it(c, e))

            return exists, deps
        if node.quantifier == "\\A":
            def forall(c: Ctx, e: dict[str, Value]) -> Value:
                return all(as_bool(body(c, e2), "\\A body") for e2 in it(c, e))

            return forall, deps
        raise self.unsupported(f"temporal quantifier {node.quantifier}", node)

    @staticmethod
    def quant_names(binds: list[tuple[Any, Fun]], body: Fun, want: bool) -> Fun:
        """``\\E``/``\\A`` over several plain names: nested loops binding in one dict."""
        last = len(binds) - 1

        def level(c: Ctx, e2: dict[str, Value], k: int) -> bool:
            name, sfn = binds[k]
            for v in iter_set(sfn(c, e2)):
                e2[name] = v
                r = body(c, e2) if k == last else level(c, e2, k + 1)
                if r is want:
                    return want
                if r is not (not want):
                    as_bool(r, "quantifier body")
            return not want

        return lambda c, e: level(c, dict(e), 0)

    def x_Choose(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        binds, bd = self.bounds(node.declaration, scope, locals_, primed)
        if len(binds) != 1:
            raise self.unsupported("CHOOSE over several bindings", node)
        body, pd = self.expr(node.predicate, scope, self.with_bound(locals_, binds), primed)
        pat, sfn = binds[0]
        bind = self.bind
        where = self.where(node)

        known, always = const_value(body) if pd == 0 else (False, None)
        if known and always is True:
            # CHOOSE x \in S : TRUE (recursions over a set): the least element, without sorting S.
            def choose_any(c: Ctx, e: dict[str, Value]) -> Value:
                try:
                    return least(sfn(c, e))
                except ValueError:
                    raise EvalError("CHOOSE over the empty set", where) from None

            return choose_any, bd

        def choose(c: Ctx, e: dict[str, Value]) -> Value:
            # TLC picks a fixed element; we pick the least in our canonical order.
            for v in ordered(sfn(c, e)):
                e2 = dict(e)
                bind(e2, pat, v)
                if as_bool(body(c, e2), "CHOOSE body"):
                    return v
            raise EvalError("CHOOSE found no element satisfying its predicate", where)

        return choose, bd | pd if locals_ else bd | (pd & ~ENV)

    def x_SetSlice(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        binds, bd = self.bounds(node.declaration, scope, locals_, primed)
        body, pd = self.expr(node.predicate, scope, self.with_bound(locals_, binds), primed)
        pat, sfn = binds[0]
        if isinstance(pat, str):
            def filt(c: Ctx, e: dict[str, Value]) -> Value:
                base = sfn(c, e)
                if isinstance(base, LazySet) and not base.materialised:
                    def pred(v: Value) -> bool:
                        e3 = dict(e)
                        e3[pat] = v
                        return as_bool(body(c, e3), "set filter")

                    return FilteredSet(base, pred)
                out = []
                e2 = dict(e)
                for v in iter_set(base):
                    e2[pat] = v
                    if as_bool(body(c, e2), "set filter"):
                        out.append(v)
                return frozenset(out)
        else:
            bind = self.bind

            def filt(c: Ctx, e: dict[str, Value]) -> Value:
                out = []
                e2 = dict(e)
                for v in iter_set(sfn(c, e)):
                    bind(e2, pat, v)
                    if as_bool(body(c, e2), "set filter"):
                        out.append(v)
                return frozenset(out)

        return filt, bd | pd if locals_ else bd | (pd & ~ENV)

    def x_SetComprehension(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        binds, bd = self.bounds(node.declarations, scope, locals_, primed)
        body, pd = self.expr(node.item, scope, self.with_bound(locals_, binds), primed)
        it = self.env_iter(binds)
        return (lambda c, e: frozenset([norm(body(c, e2)) for e2 in it(c, e)])), (
            bd | pd if locals_ else bd | (pd & ~ENV)
        )

    def x_Function(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        binds, bd = self.bounds(node.declaration, scope, locals_, primed)
        body, pd = self.expr(node.value, scope, self.with_bound(locals_, binds), primed)
        deps = bd | pd if locals_ else bd | (pd & ~ENV)
        if len(binds) == 1 and isinstance(binds[0][0], str):
            (name, sfn), = binds

            def fn1(c: Ctx, e: dict[str, Value]) -> Value:
                e2 = dict(e)
                d = {}
                for v in iter_set(sfn(c, e)):
                    e2[name] = v
                    x = body(c, e2)
                    d[v] = x if type(x) in PLAIN_TYPES else norm(x)
                return mkfn(d)

            return fn1, deps
        it = self.env_iter(binds)
        names = [p for p, _ in binds]

        def key(e2: dict[str, Value]) -> Value:
            vals = [rebuild(p, e2) for p in names]
            return vals[0] if len(vals) == 1 else tuple(vals)

        return (lambda c, e: mkfn({key(e2): norm(body(c, e2)) for e2 in it(c, e)})), deps

    def x_FunctionApplication(
        self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[Fun, int]:
        f, fd = self.expr(node.function, scope, locals_, primed)
        args, ad = self.many(node.arguments, scope, locals_, primed)
        if len(args) != 1:
            return (lambda c, e: apply(f(c, e), tuple([x(c, e) for x in args]))), fd | ad
        fast = self.fast_application(node, scope, locals_, primed)
        if fast is not None:
            return fast, fd | ad
        a = args[0]
        anode = node.arguments[0]
        fname = self.bound_value(node.function, locals_)
        # The commonest arguments, a bound name or a constant, are read without their closure.
        name = self.bound_value(anode, locals_)
        if name is not None:
            if fname is not None:  # f[x] in `Sum(f, S)`
                return (lambda c, e: apply(e[fname], e[name])), fd | ad
            return (lambda c, e: apply(f(c, e), e[name])), fd | ad
        known, xv = const_value(a) if ad == 0 else (False, None)
        if known and fname is not None and type(xv) is int and xv > 0:
            k = xv - 1

            def item(c: Ctx, e: dict[str, Value]) -> Value:  # p[1] of a bound tuple p
                v = e[fname]
                return v[k] if type(v) is tuple and k < len(v) else apply(v, xv)

            return item, fd
        if known:
            return (lambda c, e: apply(f(c, e), xv)), fd
        return (lambda c, e: apply(f(c, e), a(c, e))), fd | ad

    @staticmethod
    def bound_value(node: Any, locals_: dict[str, Local]) -> str | None:
        """The name ``node`` is, where it is a bound name read as a value from the environment."""
        node = node.expression if tname(node) == "Parentheses" else node
        if tname(node) == "OperatorApplication" and not node.arguments and getattr(
            locals_.get(node.operator), "kind", None
        ) == "val":
            return str(node.operator)
        return None

    def fast_application(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> Fun | None:
        """``v[x]`` with v an unprimed state variable and x a bound name or a constant (``sched[r]``,
        the commonest application in specs): read both directly instead of via two closures."""
        if primed:
            return None
        fnode, anode = node.function, node.arguments[0]
        i = self.assignable(fnode, scope, locals_) if tname(fnode) == "OperatorApplication" else None
        if i is None or (tname(fnode) == "OperatorApplication" and fnode.operator not in self.var_index):
            return None
        if tname(anode) == "OperatorApplication" and not anode.arguments and anode.operator in locals_:
            loc = locals_[anode.operator]
            if loc.kind != "val":
                return None
            name = anode.operator
            return lambda c, e: apply(c.s[i], e[name])  # type: ignore[index]
        return None

    def x_Field(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        r, rd = self.expr(node.expression, scope, locals_, primed)
        name = node.name

        def field(c: Ctx, e: dict[str, Value]) -> Value:
            v = r(c, e)
            if type(v) is Fn:
                try:
                    return v.d[name]
                except KeyError:
                    pass
            raise EvalError(f"record {render(v)} has no field {name}")

        return field, rd

    def x_Except(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        f, deps = self.expr(node.function, scope, locals_, primed)
        changes = []
        inner = dict(locals_)
        inner["@"] = Local("val", "@")
        for ch in node.changes:
            path = []
            for item in ch.item:
                if isinstance(item, str):
                    k = item
                    path.append(lambda c, e, k=k: k)
                else:
                    ks, kd = self.many(item, scope, locals_, primed)
                    deps |= kd
                    if len(ks) == 1:
                        path.append(ks[0])
                    else:
                        path.append(lambda c, e, ks=ks: tuple([k(c, e) for k in ks]))
            at_reads = self.at_reads
            v, vd = self.expr(ch.expression, scope, inner, primed)
            deps |= vd & ~ENV if not locals_ else vd
            changes.append((path, v, self.at_reads != at_reads))

        def setp(c: Ctx, e: dict[str, Value], fv: Value, keys: list[Value], vfn: Fun, at: bool) -> Value:
            k = keys[0]
            try:
                old = apply(fv, k)
            except EvalError:
                return fv  # a key outside the domain leaves the function unchanged
            if len(keys) == 1:
                if at:
                    e = dict(e)  # dict() and a store: faster than {**e, "@": old}
                    e["@"] = old
                return update(fv, k, norm(vfn(c, e)))
            return update(fv, k, setp(c, e, old, keys[1:], vfn, at))

        def ex(c: Ctx, e: dict[str, Value]) -> Value:
            fv = f(c, e)
            for path, vfn, at in changes:
                fv = setp(c, e, fv, [k(c, e) for k in path], vfn, at)
            return fv

        if all(len(path) == 1 for path, _, _ in changes):
            simple = [(path[0], vfn, at) for path, vfn, at in changes]

            def ex1(c: Ctx, e: dict[str, Value]) -> Value:
                # ![k] = v only: setp's single-key case inlined.
                fv = f(c, e)
                for kfn, vfn, at in simple:
                    k = kfn(c, e)
                    try:
                        old = apply(fv, k)
                    except EvalError:
                        continue  # a key outside the domain leaves the function unchanged
                    if at:
                        e2 = dict(e)
                        e2["@"] = old
                        v = vfn(c, e2)
                    else:
                        v = vfn(c, e)
                    fv = update(fv, k, v if type(v) in PLAIN_TYPES else norm(v))
                return fv

            return ex1, deps
        return ex, deps

    def x_VerticalList(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        items = [it.expression for it in node.arguments]
        return self.junction(node.operator, items, scope, locals_, primed)

    def junction(
        self, op: str, items: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[Fun, int]:
        fns, deps = [], 0
        for n in items:
            f, d = self.expr(n, scope, locals_, primed)
            fns.append(state_memo(f, d, len(self.variables)))
            deps |= d
        if op in ("/\\", "\\land"):
            return all_of(fns), deps
        return any_of(fns), deps

    def x_SubscriptedAction(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        a, ad = self.expr(node.action, scope, locals_, primed)
        v, vd = self.expr(node.subscript, scope, locals_, False)
        vp, vpd = self.expr(node.subscript, scope, locals_, True)
        if node.operator == "[":
            return (lambda c, e: as_bool(a(c, e), "action") or vp(c, e) == v(c, e)), ad | vd | vpd
        return (lambda c, e: as_bool(a(c, e), "action") and vp(c, e) != v(c, e)), ad | vd | vpd

    def x_SubexpressionReference(
        self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[Fun, int]:
        opdef, _target, argnodes = self.resolve_instance_path(node, scope)
        return self.call(opdef, argnodes, scope, locals_, primed, node)

    def resolve_instance_path(self, node: Any, scope: Scope) -> tuple[Any, Scope, list[Any]]:
        items = list(node.items)
        cur = scope
        for i, item in enumerate(items):
            name = item if isinstance(item, str) else item.operator
            args = [] if isinstance(item, str) else (item.arguments or [])
            d = cur.defs.get(name)
            last = i == len(items) - 1
            if isinstance(d, InstanceRef) and not last:
                if d.params or args:
                    raise self.unsupported("parameterised INSTANCE", node)
                cur = d.target
                continue
            if not last or not isinstance(d, OpDef):
                if last and d is None and name in B.FUNCTIONS:
                    return ("builtin", name), cur, args
                path = "!".join(name_of(x) for x in items)
                raise self.err(f"unknown or unsupported reference {name} in {path}", node)
            return d, cur, args
        raise self.err("empty module reference", node)

    def x_Lambda(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        raise self.unsupported("LAMBDA outside an operator argument", node)

    def x_Fairness(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        raise self.unsupported("fairness formula (WF_/SF_) inside an expression", node)

    # ---- operator application ----------------------------------------------------------------
    def x_OperatorApplication(
        self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[Fun, int]:
        op = node.operator
        args = node.arguments or []
        if not args:
            return self.ident(node, scope, locals_, primed)
        op = B.ALIASES.get(op, op)
        if op in ("/\\", "\\/"):
            return self.junction(op, args, scope, locals_, primed)
        if op in ("=>", "<=>", "~"):
            return self.connective(op, args, scope, locals_, primed)
        if op in ("'", "UNCHANGED", "ENABLED", "[]", "<>", "~>", "-+->", "\\cdot"):
            return self.action_operator(op, args, node, scope, locals_, primed)
        if op == "\\X":
            parts = flatten_product(node)
            fns, deps = self.many(parts, scope, locals_, primed)
            return (lambda c, e: ProductSet([f(c, e) for f in fns])), deps
        # User definitions (and LET / parameters) shadow the standard operators.
        target = locals_.get(op) or scope.defs.get(op)
        if target is not None:
            return self.call(target, args, scope, locals_, primed, node)
        if len(args) == 2 and op in B.BINARY:
            return self.binary(op, args, scope, locals_, primed)
        if len(args) == 1 and op in B.UNARY:
            f1 = B.UNARY[op]
            a, ad = self.expr(args[0], scope, locals_, primed)
            return (lambda c, e: f1(a(c, e))), ad
        if op in B.FUNCTIONS:
            return self.call(("builtin", op), args, scope, locals_, primed, node)
        if op == "TLCEval" and len(args) == 1:
            return self.expr(args[0], scope, locals_, primed)
        if op in UNSUPPORTED_OPS:
            raise self.unsupported(f"operator {op}", node)
        raise self.err(f"unknown operator {op}", node)

    def connective(
        self, op: str, args: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[Fun, int]:
        """``=>``, ``<=>`` and ``~``."""
        if op == "=>":
            a, ad = self.expr(args[0], scope, locals_, primed)
            b, bd = self.expr(args[1], scope, locals_, primed)

            def implies(c: Ctx, e: dict[str, Value]) -> Value:
                # as_bool only off the common path: this is the hottest operator of many specs.
                v = a(c, e)
                if v is False:
                    return True
                if v is not True:
                    as_bool(v, "=>")
                w = b(c, e)
                return w if w is True or w is False else as_bool(w, "=>")

            return implies, ad | bd
        if op == "<=>":
            a, ad = self.expr(args[0], scope, locals_, primed)
            b, bd = self.expr(args[1], scope, locals_, primed)
            return (lambda c, e: as_bool(a(c, e), "<=>") == as_bool(b(c, e), "<=>")), ad | bd
        a, ad = self.expr(args[0], scope, locals_, primed)

        def negation(c: Ctx, e: dict[str, Value]) -> Value:
            v = a(c, e)
            if v is True:
                return False
            return True if v is False else not as_bool(v, "~")

        return negation, ad

    def action_operator(
        self, op: str, args: list[Any], node: Any, scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[Fun, int]:
        """A prime, UNCHANGED or ENABLED as a value; a temporal operator is refused here."""
        if op == "'":
            if primed:
                raise self.unsupported("double prime (x'')", node)
            return self.expr(args[0], scope, locals_, True)
        if op == "UNCHANGED":
            v, vd = self.expr(args[0], scope, locals_, False)
            vp, vpd = self.expr(args[0], scope, locals_, True)
            return (lambda c, e: vp(c, e) == v(c, e)), vd | vpd
        if op == "ENABLED":
            return self.enabled(args[0], scope, locals_)
        raise self.unsupported(f"temporal operator {op} inside an expression", node)

    def binary(
        self, op: str, args: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[Fun, int]:
        """A standard binary operator; the most common ones (=, #, \\in) inlined."""
        f = B.BINARY[op]
        a, ad = self.expr(args[0], scope, locals_, primed)
        b, bd = self.expr(args[1], scope, locals_, primed)
        if bd == 0 and ad != 0:
            # Constant right operand (e.g. pc[p] = "cs"): bake the value in, saving a call.
            ok, bv = const_value(b)
            if ok:
                if op == "=":
                    return (lambda c, e: a(c, e) == bv), ad
                if op == "#":
                    return (lambda c, e: a(c, e) != bv), ad
                if op == "\\in":
                    return (lambda c, e: a(c, e) in bv), ad
                return (lambda c, e: f(a(c, e), bv)), ad
        if op == "=":
            return (lambda c, e: a(c, e) == b(c, e)), ad | bd
        if op == "#":
            return (lambda c, e: a(c, e) != b(c, e)), ad | bd
        if op == "\\in":
            return (lambda c, e: a(c, e) in b(c, e)), ad | bd
        return (lambda c, e: f(a(c, e), b(c, e))), ad | bd

    def ident(self, node: Any, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        name = node.operator
        loc = locals_.get(name)
        if loc is not None:
            if loc.kind == "val":
                return (lambda c, e: e[name]), ENV
            if loc.kind == "thunk":
                return (lambda c, e: e[name].get()), ENV
            if loc.kind == "subst":
                return self.expr(loc.body, loc.scope or scope, loc.locals, primed)
            raise self.err(f"operator {name} used without arguments", node)
        d = scope.defs.get(name)
        if d is None:
            if name in B.CONSTANTS:
                v = B.CONSTANTS[name]
                return (lambda c, e: v), 0
            raise self.err(f"unknown identifier {name}", node)
        if isinstance(d, Decl):
            return self.decl(d, node, primed)
        if isinstance(d, OpDef):
            return self.call(d, [], scope, locals_, primed, node)
        raise self.err(f"{name} is a module instance, not a value", node)

    def decl(self, d: Decl, node: Any, primed: bool) -> tuple[Fun, int]:
        name = d.name
        if d.scope.subst is not None:
            key = ("subst", id(d.scope), name, primed)
            hit = self.cache.get(key)
            if hit is None:
                sub, outer = d.scope.subst[name]
                hit = self.expr(sub, outer, {}, primed)
                self.cache[key] = hit
            return hit
        if d.kind == "const":
            if name not in self.constants:
                raise TlaError(
                    f"constant {name} is not assigned a value in the config", self.root.file, *pos(d.node),
                    kind="config",
                )
            v = self.constants[name]
            return (lambda c, e: v), 0
        i = self.var_index[name]
        if primed:
            def nxt(c: Ctx, e: dict[str, Value]) -> Value:
                v = c.n[i]  # type: ignore[index]
                if v is UNSET:
                    raise EvalError(f"{name}' is read before it is assigned")
                return v

            return nxt, NEXT
        return (lambda c, e: c.s[i]), STATE | (VAR0 << i)  # type: ignore[index]

    def op_value(self, node: Any, arity: int, scope: Scope, locals_: dict[str, Local], primed: bool) -> tuple[Fun, int]:
        """An operator passed as an argument: produces a callable ``(c, args) -> value``."""
        while tname(node) == "Parentheses":
            node = node.expression
        if tname(node) == "Lambda":
            params = [p.operator if not isinstance(p, str) else p for p in node.parameters]
            inner = dict(locals_)
            for p in params:
                inner[p] = Local("val", p)
            # The body's reads are the operator's: `LAMBDA x : smokers[x].smoking` reads a
            # variable, and a caller that saw ENV alone would fold the call as a constant.
            body, bd = self.expr(node.expression, scope, inner, primed)
            return bound_operator(body, params), bd | ENV
        if tname(node) == "OperatorApplication" and not node.arguments:
            name = node.operator
            loc = locals_.get(name)
            if loc is not None and loc.kind == "opparam":
                return (lambda c, e: e[name]), ENV
            target = loc or scope.defs.get(name)
            if target is None and (name in B.BINARY or name in B.FUNCTIONS or name in B.UNARY):
                target = ("builtin", name)
            if target is None:
                raise self.err(f"unknown operator {name} passed as an argument", node)
            fake_args = [f"#arg{i}" for i in range(arity)]
            inner = dict(locals_)
            for a in fake_args:
                inner[a] = Local("val", a)
            argnodes = [VarRef(a, node) for a in fake_args]
            body, bd = self.call(target, argnodes, scope, inner, primed, node)
            return bound_operator(body, fake_args), bd | ENV
        raise self.unsupported(f"operator argument of form {tname(node)}", node)

    def call(
        self, target: Any, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool, node: Any
    ) -> tuple[Fun, int]:
        if isinstance(target, tuple) and target[0] == "builtin":
            return self.call_builtin(target[1], argnodes, scope, locals_, primed, node)
        if isinstance(target, Local):
            return self.call_local(target, argnodes, scope, locals_, primed, node)
        if isinstance(target, Decl):
            if argnodes and target.scope.subst is not None:
                return self.call_substituted(target, argnodes, scope, locals_, primed, node)
            if argnodes:
                raise self.err(f"{target.name} is a {target.kind}, not an operator", node)
            return self.decl(target, node, primed)
        if isinstance(target, InstanceRef):
            raise self.err(f"{target.name} is a module instance; use {target.name}!Op", node)
        if not isinstance(target, OpDef):
            raise self.err(f"cannot apply {target!r}", node)
        return self.call_operator(target, argnodes, scope, locals_, primed, node)

    def call_builtin(
        self, name: str, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool, node: Any
    ) -> tuple[Fun, int]:
        """A call of a standard module's operator (:mod:`builtins`)."""
        if name in B.CONSTANTS and not argnodes:
            v = B.CONSTANTS[name]
            return (lambda c, e: v), 0
        if name in B.BINARY and len(argnodes) == 2:
            bf = B.BINARY[name]
            fns, deps = self.many(argnodes, scope, locals_, primed)
            a0, a1 = fns
            return (lambda c, e: bf(a0(c, e), a1(c, e))), deps
        arity, fn, opargs = B.FUNCTIONS[name]
        if len(argnodes) != arity:
            raise self.err(f"{name} expects {arity} arguments, got {len(argnodes)}", node)
        fns, deps = [], 0
        for i, a in enumerate(argnodes):
            if i in opargs:
                f, d = self.op_value(a, 1 if name == "SelectSeq" else 2, scope, locals_, primed)
            else:
                f, d = self.expr(a, scope, locals_, primed)
            fns.append(f)
            deps |= d
        if name in ("Print", "PrintT", "Assert"):
            deps |= ENV | IMPURE  # side effects / failures must happen each time, never folded
        return self.builtin_call(fn, fns, node, name), deps

    def call_local(
        self, target: Local, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool, node: Any
    ) -> tuple[Fun, int]:
        """A call of an operator parameter or a LET operator, or a bound name without arguments."""
        if target.kind == "opparam":
            fns, deps = self.many(argnodes, scope, locals_, primed)
            name = target.name
            return (lambda c, e: e[name](c, tuple([f(c, e) for f in fns]))), deps | ENV
        if target.kind == "letop":
            return self.call_letop(target, argnodes, scope, locals_, primed, node)
        if target.kind in ("val", "thunk", "subst") and not argnodes:
            return self.ident(node, scope, locals_, primed)
        raise self.err(f"{target.name} is not an operator", node)

    def call_operator(
        self, target: OpDef, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool, node: Any
    ) -> tuple[Fun, int]:
        """A call of a definition: memoised where it is pure or reads few variables."""
        if len(argnodes) != len(target.params):
            raise self.err(
                f"operator {target.name} expects {len(target.params)} arguments, got {len(argnodes)}", node
            )
        if argnodes and self.primed.of(target) and target.name not in target.scope.recursive:
            return self.substituted_call(target, argnodes, scope, locals_, primed)
        body, bdeps = self.op_body(target, primed)
        if not argnodes:
            # A definition reading a few variables only (e.g. Evictable) is memoised on them.
            return state_memo(lambda c, e: body(c, EMPTY), bdeps & ~ENV, len(self.variables)), bdeps & ~ENV
        fns, deps = [], 0
        for (_p, ar), a in zip(target.params, argnodes, strict=True):
            f, d = self.op_value(a, ar, scope, locals_, primed) if ar else self.expr(a, scope, locals_, primed)
            fns.append(f)
            deps |= d
        names = [p for p, _ in target.params]
        deps |= bdeps & ~ENV
        if self.purity.memoisable(target):
            return self.memoised_call(target, body, names, fns), deps
        if not primed and target.name not in target.scope.recursive and self.purity.state_memoisable(target):
            idxs = read_vars(bdeps, len(self.variables))
            if idxs is not None:
                return self.state_memoised_call(target, body, names, fns, idxs), deps
        if target.name in target.scope.recursive:
            return self.recursive_call(target, body, names, fns), deps
        return _applied(body, names, fns), deps

    @staticmethod
    def too_deep(where: str, what: str) -> EvalError:
        """The located error for recursion past the evaluator's stack (Python's recursion limit,
        raised on the search thread's large stack): one line naming the recursive definition."""
        return EvalError(f"recursion of {what} is deeper than the evaluator's stack allows "
                         "(no base case reached?)", where)

    @staticmethod
    def definition_site(opdef: OpDef) -> str:
        line, col = pos(opdef.node)
        return f"{opdef.file or opdef.scope.file}:{line}:{col}"

    def recursive_call(self, target: OpDef, body: Fun, names: list[str], fns: list[Fun]) -> Fun:
        """A call of a RECURSIVE operator that is not memoised: as a plain call, but recursion past
        the stack is reported at the definition."""
        pairs = list(zip(names, fns, strict=True))
        too_deep = self.too_deep
        where, what = self.definition_site(target), f"the operator {target.name}"

        def rcall(c: Ctx, e: dict[str, Value]) -> Value:
            args = {}
            for n, f in pairs:
                args[n] = f(c, e)
            try:
                return body(c, args)
            except RecursionError:
                raise too_deep(where, what) from None

        return rcall

    def memoised_call(self, target: OpDef, body: Fun, names: list[str], fns: list[Fun]) -> Fun:
        """A call of a pure, expensive operator (see :mod:`~tlacheck.purity`): its values
        are memoised on the argument values, one memo per definition shared by every call site
        (TLC re-evaluates; ``Children(dag, v)`` or a RECURSIVE ``Linearize`` recur across states)."""
        memo = self.op_memos.setdefault(id(target), {})
        limit = _OP_MEMO_LIMIT
        plain = PLAIN_TYPES
        too_deep = self.too_deep
        where, what = self.definition_site(target), f"the operator {target.name}"
        if len(fns) == 1:
            n0, f0 = names[0], fns[0]

            def memo1(c: Ctx, e: dict[str, Value]) -> Value:
                a = f0(c, e)
                if type(a) not in plain:  # lazy sets and functions: hashing would materialise them
                    return body(c, {n0: a})
                r = memo.get(a, MISSING)
                if r is MISSING:
                    try:
                        r = body(c, {n0: a})
                    except RecursionError:
                        raise too_deep(where, what) from None
                    remember(memo, a, r, limit)
                return r

            return memo1

        def memon(c: Ctx, e: dict[str, Value]) -> Value:
            args = tuple([f(c, e) for f in fns])
            for a in args:
                if type(a) not in plain:
                    return body(c, dict(zip(names, args, strict=True)))
            r = memo.get(args, MISSING)
            if r is MISSING:
                try:
                    r = body(c, dict(zip(names, args, strict=True)))
                except RecursionError:
                    raise too_deep(where, what) from None
                remember(memo, args, r, limit)
            return r

        return memon

    def state_memoised_call(
        self, target: OpDef, body: Fun, names: list[str], fns: list[Fun], idxs: list[int]
    ) -> Fun:
        """A call of an expensive operator that reads a few unprimed variables and is otherwise
        pure (``StoreOutcomes(r, S)``): its values are memoised on the argument values and the
        values of those variables, one memo per definition. Many states share them, and an
        action's guard and its updates call it with the same arguments."""
        memo = self.op_memos.setdefault(id(target), {})
        limit = _OP_MEMO_LIMIT
        plain = PLAIN_TYPES
        all_plain = PLAIN_TYPES.issuperset

        def state_memo_call(c: Ctx, e: dict[str, Value]) -> Value:
            values = [f(c, e) for f in fns]
            s = c.s
            if s is None:
                return body(c, dict(zip(names, values, strict=True)))
            k = (*values, *[s[i] for i in idxs])
            if not all_plain(map(type, k)):  # lazy sets and functions: hashing would materialise them
                return body(c, dict(zip(names, values, strict=True)))
            r = memo.get(k, MISSING)
            if r is MISSING:
                r = body(c, dict(zip(names, values, strict=True)))
                if type(r) not in plain:  # a lazy value may hold on to the context
                    return r
                remember(memo, k, r, limit)
            return r

        return state_memo_call

    def builtin_call(self, fn: Callable[..., Value], fns: list[Fun], node: Any, name: str) -> Fun:
        """``fn(c, args...)`` for a standard-module operator, its errors located at ``node``
        (one frame per call for the common arities instead of a located wrapper around a
        generic call)."""
        if len(fns) not in (1, 2):
            return self.located(lambda c, e: fn(c, *[f(c, e) for f in fns]), node, name)
        where = f"{self.where(node)} ({name})"

        if len(fns) == 1:
            f0 = fns[0]

            def call1(c: Ctx, e: dict[str, Value]) -> Value:
                try:
                    return fn(c, f0(c, e))
                except (EvalError, TypeError, ValueError) as exc:
                    raise_located(exc, where)

            return call1
        f0, f1 = fns

        def call2(c: Ctx, e: dict[str, Value]) -> Value:
            try:
                return fn(c, f0(c, e), f1(c, e))
            except (EvalError, TypeError, ValueError) as exc:
                raise_located(exc, where)

        return call2

    def substitution(
        self, opdef: OpDef, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[dict[str, Local], Callable[[Any], Any], int]:
        """How to compile ``opdef``'s body with ``argnodes`` substituted for its parameters (each
        compiled at its use, in the call site's scope): the body's locals, a wrapper that binds
        the operator arguments (``LAMBDA j : j - 1``) in the caller's bindings, and their deps."""
        inner: dict[str, Local] = {}
        opargs: list[tuple[str, Fun]] = []
        deps = 0
        for (p, ar), a in zip(opdef.params, argnodes, strict=True):
            if ar:
                inner[p] = Local("opparam", p)
                f, d = self.op_value(a, ar, scope, locals_, primed)
                opargs.append((p, f))
                deps |= d | ENV
            else:
                inner[p] = Local("subst", p, body=a, scope=scope, locals_=locals_)

        def wrap(body: Any) -> Any:
            if not opargs:
                return body

            def bind(c: Ctx, e: dict[str, Value]) -> dict[str, Value]:
                e2 = dict(e)
                for p, f in opargs:
                    e2[p] = f(c, e)
                return e2

            return lambda c, e: body(c, bind(c, e))

        return inner, wrap, deps

    def substituted_call(
        self, target: OpDef, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool
    ) -> tuple[Fun, int]:
        """``Op(args)`` where the body primes a parameter (``Changed(q) == q' # q``): the body with
        the arguments substituted, as TLA+ defines application (see :mod:`.primed`)."""
        inner, wrap, deps = self.substitution(target, argnodes, scope, locals_, primed)
        with self.in_file_of(target):
            body, bdeps = self.expr(target.body, target.scope, inner, primed)
        return wrap(body), bdeps | deps

    def call_substituted(
        self, target: Decl, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool, node: Any
    ) -> tuple[Fun, int]:
        """``Op(args)`` where ``Op`` is an operator constant of an instantiated module, replaced by
        an operator of the instantiating module (``INSTANCE M`` with ``IsQuorum(Q) == ...``
        beside it, or ``WITH Op <- LAMBDA x : ...``)."""
        sub, outer = target.scope.subst[target.name]  # type: ignore[index]
        while tname(sub) == "Parentheses":
            sub = sub.expression
        if tname(sub) == "Lambda":
            params = [p.operator if not isinstance(p, str) else p for p in sub.parameters]
            if len(params) != len(argnodes):
                raise self.err(f"{target.name} expects {len(params)} arguments, got {len(argnodes)}", node)
            inner = {
                p: Local("subst", p, body=a, scope=scope, locals_=locals_)
                for p, a in zip(params, argnodes, strict=True)
            }
            return self.expr(sub.expression, outer, inner, primed)
        if tname(sub) == "OperatorApplication" and not sub.arguments:
            name = sub.operator
            resolved: Any = outer.defs.get(name)
            if resolved is None and (name in B.BINARY or name in B.FUNCTIONS or name in B.UNARY):
                resolved = ("builtin", name)
            if resolved is None:
                raise self.err(f"operator constant {target.name} is substituted by the unknown {name}", node)
            return self.call(resolved, argnodes, scope, locals_, primed, node)
        raise self.unsupported(f"substitution of form {tname(sub)} for operator constant {target.name}", node)

    def letop_body(self, target: Local, primed: bool) -> tuple[Fun, int]:
        key = ("letop", id(target.body), primed)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        inner = dict(target.locals)
        for p, ar in target.params:
            inner[p] = Local("opparam" if ar else "val", p)
        assert target.scope is not None
        scope = target.scope
        fn, deps = self.self_referent(key, lambda: self.expr(target.body, scope, inner, primed))
        self.cache[key] = (fn, deps | ENV)
        return fn, deps | ENV

    def call_letop(
        self, target: Local, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], primed: bool, node: Any
    ) -> tuple[Fun, int]:
        if len(argnodes) != len(target.params):
            raise self.err(f"operator {target.name} expects {len(target.params)} arguments", node)
        body, bdeps = self.letop_body(target, primed)
        fns, deps = [], bdeps
        for (_p, ar), a in zip(target.params, argnodes, strict=True):
            f, d = self.op_value(a, ar, scope, locals_, primed) if ar else self.expr(a, scope, locals_, primed)
            fns.append(f)
            deps |= d
        pairs = list(zip([p for p, _ in target.params], fns, strict=True))

        def letcall(c: Ctx, e: dict[str, Value]) -> Value:
            e2 = dict(e)
            for n, f in pairs:
                e2[n] = f(c, e)
            return body(c, e2)

        return letcall, deps

    def enabled(self, anode: Any, scope: Scope, locals_: dict[str, Local]) -> tuple[Fun, int]:
        """``ENABLED A``; defined by the action compiler, which can enumerate successors."""
        raise NotImplementedError
