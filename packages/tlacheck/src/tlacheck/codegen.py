"""Generate Python source for actions, compiled once per model.

:class:`~tlacheck.action.Compiler` turns an action into a tree of closures, one call (and
often one generator) per syntax node. This module writes the same action as the source of a few
Python generator functions instead: guards become ``if`` statements, ``\\E`` a ``for`` loop,
``x' = e`` a store into the next state followed by the rest of the action and the undo, calls of
operator actions a guard evaluated in place (most actions are disabled in most states) and one
generator per enabled call. Bound names live in the same environment dicts as in the closures,
so any sub-action or sub-expression the generator does not handle is the closure compiler's
closure, called from the generated code: the fallback is per node, and the semantics (order of
successors, labels, error messages and their locations, successor memos) are those of the
closures.

An action is written in continuation-passing style: :meth:`Source.act` emits the statements of
a node given ``k``, a function emitting what follows each successor the node produces (at the
top, ``yield label``). The code is generated for calls with no variable assigned (the checker's),
so it knows which variables are still unassigned at each point; where only a yield follows an
operator call, the operator's body is written in place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from . import builtins as B
from .errors import EvalError, raise_located
from .modules import Decl, OpDef, Scope
from .syntax import (
    EMPTY,
    IMPURE,
    UNSET,
    Ctx,
    Fun,
    Gen,
    Local,
    Thunk,
    as_bool,
    const_value,
    flatten,
    is_action,
    names_in,
    ordered,
    read_vars,
    state_memo,
    tname,
)
from .values import PLAIN_TYPES, Fn, Value, apply, iter_set, mkfn, norm, render, update

if TYPE_CHECKING:
    from .action import Compiler

# Emits the statements that follow a successor: (label expression, indentation) -> lines.
Cont = Callable[[str, int], list[str]]

# Python expressions that read a bound name, a constant or a variable: cheap and pure.
SIMPLE = re.compile(r"(e|env)\d*\['[A-Za-z0-9_@]+'\]|k\d+|s\[\d+\]|[ax]\d+")

# Generated source larger than this (lines) is not compiled: the closures run instead.
MAX_LINES = 4000

# The sequence operators on a sequence value, in place (any other value goes to the operator,
# which raises the error): operator -> test of the arguments a0, a1, ..., result.
SEQUENCES = {
    "Len": ("type(a0) is tuple", "len(a0)"),
    "Head": ("type(a0) is tuple and a0", "a0[0]"),
    "Tail": ("type(a0) is tuple and a0", "a0[1:]"),
    "Append": ("type(a0) is tuple", "(*a0, a1)"),
}


class Unsupported(Exception):
    """A construct this generator leaves to the closures (the caller falls back)."""


def generate(comp: Compiler, node: Any, scope: Scope, locals_: dict[str, Local]) -> Gen | None:
    """The action ``node`` as one generated generator function, or None when the closures
    should compile it (an unsupported construct, or source Python cannot compile). The same
    action in the same scope (``WF_vars(A(r))`` for each ``r``) is generated once."""
    key = ("generated", id(node), id(scope), id(locals_))
    hit = comp.cache.get(key)
    if hit is not None:
        if comp.collect_acts is not None:
            comp.collect_acts |= hit[1]
        return hit[0]
    # The operator actions it calls, as the closures would collect them, for the next time.
    outer, comp.collect_acts = comp.collect_acts, set()
    try:
        gen = _generate(comp, node, scope, locals_)
    finally:
        collected, comp.collect_acts = comp.collect_acts, outer
    if outer is not None:
        outer |= collected
    if gen is not None:
        comp.cache[key] = (gen, collected, node, scope, locals_)  # the objects keep their ids reserved
    return gen


def _generate(comp: Compiler, node: Any, scope: Scope, locals_: dict[str, Local]) -> Gen | None:
    for inline in (True, False):
        src = Source(comp, inline)
        try:
            top: Gen | None = _load_top(comp, src, "<tla action>",
                                        lambda s=src: _write_action(comp, s, node, scope, locals_), retry=inline)
        except SyntaxError:
            # Calls generated in place nest deeper than calls of generated generators: past
            # Python's limit on nested blocks, try again without them.
            continue
        return top
    return None


def _write_action(comp: Compiler, src: Source, node: Any, scope: Scope, locals_: dict[str, Local]) -> None:
    # The checker (successors, fairness conditions) and ENABLED call an action with no variable
    # assigned, which the generated code then knows: it assigns without tests. Other calls (a
    # composition's second action) run the closures.
    nv = len(comp.variables)
    kind, closure = comp.act(node, scope, locals_, False)
    src.unset = frozenset(range(nv))
    src.funcs.append(src.top("_fresh", node, scope, locals_))
    src.unset = frozenset()
    if kind == "act":
        src.ns["_general"] = closure
    else:
        src.funcs.append(src.top("_general", node, scope, locals_))
    src.funcs.append(["def _top(c, e):", f"    return (_fresh if c.n.count(UNSET) == {nv} else _general)(c, e)"])


def generate_expr(comp: Compiler, node: Any, scope: Scope, locals_: dict[str, Local]) -> Fun | None:
    """The expression ``node`` (unprimed) as a generated function, or None (see :func:`generate`).
    A name of a definition without parameters stands for the definition's body."""
    src = Source(comp)

    def write() -> None:
        n, sc, names = node, scope, locals_
        while tname(n) == "OperatorApplication" and not n.arguments and n.operator not in names:
            d = sc.defs.get(n.operator)
            if not isinstance(d, OpDef) or d.params or getattr(d.node, "function", None):
                break
            comp.file_stack.append(d.file or d.scope.file)
            n, sc, names = d.body, d.scope, {}
        src.funcs.append(["def _top(c, e):", "    s = c.s", f"    return {src.expr(n, sc, names, 'e')}"])

    top: Fun | None = _load_top(comp, src, "<tla expression>", write)
    return top


def _load_top(comp: Compiler, src: Source, filename: str, write: Callable[[], None], *, retry: bool = False) -> Any:
    """Run ``write`` (it fills ``src``), then compile and load the source: its ``_top``, or None
    when it is too long or anything fails. Whatever fails (an unsupported construct, a compile
    error, a bug), the closures then compile the definition as before and report any real error
    themselves; what the attempt added to the compiler's cache is forgotten first. With
    ``retry``, a SyntaxError (Python's limit on nested blocks) is raised for the caller to try
    again with less nesting."""
    depth, known = len(comp.file_stack), set(comp.cache)
    try:
        write()
        return src.ns["_top"] if src.load(filename) else None
    except Exception as exc:
        forget(comp, known)
        if retry and isinstance(exc, SyntaxError):
            raise
        return None
    finally:
        del comp.file_stack[depth:]


def forget(comp: Compiler, known: set[Any]) -> None:
    """Drop what a failed generation added to the compiler's cache: definitions whose compilation
    stopped half-way are left marked as being compiled (a pending action, an operator body
    without its closure); the closures compile them again and report the error themselves."""
    for key in [key for key in comp.cache if key not in known]:
        del comp.cache[key]


def assign_in_steps(n: list[Value], i: int, s: Value) -> Iterator[None]:
    """``x' \\in S``: each element of S in turn (undone after), or a test when x' is set."""
    cur = n[i]
    if cur is UNSET:
        for v in ordered(s):
            n[i] = norm(v)
            yield None
        n[i] = UNSET
    elif cur in s:
        yield None


def replay(n: list[Value], rec: list[tuple[str, list[Value]]]) -> Iterator[str | None]:
    """The successors an operator action's memo recorded (see :meth:`Compiler.act_call`)."""
    for lab, t in rec:
        n[:] = t
        yield lab
    n[:] = [UNSET] * len(n)


def record(c: Ctx, memo: dict[Any, Any], key: Any, inner: Iterable[str | None]) -> Iterator[str | None]:
    """``inner``'s successors, remembered in ``memo`` under ``key`` once all are enumerated."""
    n = c.n
    rec: list[tuple[str, list[Value]]] = []
    for lab in inner:
        rec.append((lab, n[:]))  # type: ignore[index]
        yield lab
    memo[key] = (c.s, rec)  # only a complete enumeration is remembered


def no_field(v: Value, name: str) -> Value:
    raise EvalError(f"record {render(v)} has no field {name}")


class Source:
    """The generated functions of one action and the objects their source names."""

    def __init__(self, comp: Compiler, inline: bool = False) -> None:
        self.comp = comp
        # Whether calls of operator actions followed by a yield are generated in place.
        self.inline = inline
        self.ns: dict[str, Any] = {
            "UNSET": UNSET, "PLAIN": PLAIN_TYPES, "norm": norm, "as_bool": as_bool, "apply": apply,
            "Fn": Fn, "update": update, "EvalError": EvalError, "ordered": ordered, "EMPTY": EMPTY,
            "no_field": no_field, "iter_set": iter_set, "mkfn": mkfn,
            "THUNK_NO": Thunk.NO, "Thunk": Thunk, "raise_located": raise_located, "assign_in": assign_in_steps,
            "replay": replay, "record": record,
        }
        self.funcs: list[list[str]] = []
        self.count = 0
        # Generated bodies of operators called from expressions: id(opdef) -> function name.
        self.bodies: dict[int, str] = {}
        # Per environment of the generated code (a name made by :meth:`fresh`): its bound names
        # whose values are also held by Python names (the variable of a loop over a set, an
        # argument of a call), read from there instead of from the environment.
        self.direct: dict[str, dict[str, str]] = {}
        # Generated expressions that are always a bool (=, #, \in: Python's ==, != and `in`
        # answer True or False for every value), tested without the check for a non-boolean.
        self.bools: set[str] = set()
        # The variables the code being generated knows to be unassigned (see generate).
        self.unset: frozenset[int] = frozenset()
        # Continuations that only yield (and record) a successor: a call of an operator action
        # followed by one of them is generated in place (see call_site).
        self.yields: set[Cont] = set()

    def top(self, name: str, node: Any, scope: Scope, locals_: dict[str, Local]) -> list[str]:
        """The generator function ``name`` enumerating the successors of the action ``node``."""
        return ["def " + name + "(c, e):", "    s = c.s", "    n = c.n",
                *self.act(node, scope, locals_, "e", self.yield_as(None), 1), "    if False:", "        yield None"]

    def load(self, filename: str) -> bool:
        """Compile and run the generated functions; False when they are too long to compile (the
        closures run instead)."""
        if sum(len(f) for f in self.funcs) > MAX_LINES:
            return False
        exec(compile("\n".join("\n".join(f) for f in self.funcs), filename, "exec"), self.ns)
        return True

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def obj(self, value: Any, prefix: str = "k") -> str:
        """A name in the generated code's globals bound to ``value``."""
        name = self.fresh(prefix)
        self.ns[name] = value
        return name

    def yield_as(self, name: str | None) -> Cont:
        """The continuation at the top of a generated generator: yield the label (unnamed
        steps named ``name``, as an operator call names them)."""
        def k(lab: str, ind: int) -> list[str]:
            pad = "    " * ind
            if name is None:
                return [f"{pad}yield {lab}"]
            if lab == "None":
                return [f"{pad}yield {name!r}"]
            return [f"{pad}yield {lab} or {name!r}"]

        if self.inline:
            self.yields.add(k)
        return k

    # ---- expressions ---------------------------------------------------------------------
    def expr(self, node: Any, scope: Scope, locals_: dict[str, Local], env: str) -> str:
        """A Python expression with the value of ``node`` (unprimed context)."""
        fn, deps = self.comp.expr(node, scope, locals_, False)
        if deps == 0:
            ok, v = const_value(fn)
            return self.obj(v) if ok else self.call(fn, env)
        if isinstance(node, str):
            return f"{env}['@']"
        t = tname(node)
        if t == "Parentheses":
            return self.expr(node.expression, scope, locals_, env)
        if t == "OperatorApplication":
            return self.application(node, scope, locals_, env, fn)
        if t == "FunctionApplication" and len(node.arguments) == 1:
            f, x = self.expr(node.function, scope, locals_, env), self.expr(node.arguments[0], scope, locals_, env)
            if SIMPLE.fullmatch(x):
                # A name or constant argument, read again at no cost: a record, a sequence or a
                # function on model values is read in place, anything else by apply.
                tmp = self.fresh("t")
                return (f"({tmp}.d[{x}] if type({tmp} := {f}) is Fn and {x} in {tmp}.d else {tmp}[{x} - 1] if "
                        f"type({tmp}) is tuple and type({x}) is int and 0 < {x} <= len({tmp}) else apply({tmp}, {x}))")
            return f"apply({f}, {x})"
        if t == "Field":
            r, tmp = self.expr(node.expression, scope, locals_, env), self.fresh("t")
            key = repr(node.name)
            return f"({tmp}.d[{key}] if type({tmp} := {r}) is Fn and {key} in {tmp}.d else no_field({tmp}, {key}))"
        if t == "If":
            p, tmp = self.expr(node.predicate, scope, locals_, env), self.fresh("t")
            a, b = self.expr(node.then, scope, locals_, env), self.expr(node.else_, scope, locals_, env)
            if p in self.bools:
                return f"({a} if {p} else {b})"
            return (f"({a} if ({tmp} := {p}) is True or ({tmp} is not False and "
                    f"as_bool({tmp}, 'IF condition')) else {b})")
        if t == "Record":
            items = [f"{k!r}: {self.plain(self.expr(v, scope, locals_, env))}" for k, v in node.key_values]
            return "Fn({" + ", ".join(items) + "})"
        if t == "VerticalList":
            return self.expr_junction(node.operator, [it.expression for it in node.arguments], scope, locals_, env)
        if t == "Quantification" and node.quantifier in ("\\E", "\\A"):
            bound = self.one_bound(node.declarations)
            if bound is not None:
                return self.quantifier(node, bound, scope, locals_, env)
        if t == "Function":
            bound = self.one_bound(node.declaration)
            if bound is not None:
                return self.function(node, bound, scope, locals_, env)
        if t == "Except":
            return self.except_(node, scope, locals_, env)
        if t == "Tuple" and node.items:
            return "(" + "".join(f"{self.expr(x, scope, locals_, env)}, " for x in node.items) + ")"
        if t == "SetEnumeration" and node.items:
            return "frozenset((" + "".join(f"norm({self.expr(x, scope, locals_, env)}), " for x in node.items) + "))"
        return self.call(fn, env)

    def expr_junction(self, op: str, items: list[Any], scope: Scope, locals_: dict[str, Local], env: str) -> str:
        """A ``/\\`` or ``\\/`` list as a generated function (the closures' junction): an item
        that reads few variables only stays the closures' memoised item."""
        decisive = B.ALIASES.get(op, op) != "/\\"
        what = "disjunct" if decisive else "conjunct"
        lines = []
        for it in items:
            fn, deps = self.comp.expr(it, scope, locals_, False)
            memo = state_memo(fn, deps, len(self.comp.variables))
            src = self.call(memo, "e") if memo is not fn else self.expr(it, scope, locals_, "e")
            if src in self.bools:
                lines += [f"    if {'' if decisive else 'not '}{src}:", f"        return {decisive}"]
                continue
            lines += [f"    v = {src}", f"    if v is not {not decisive}:", f"        if v is {decisive}:",
                      f"            return {decisive}", f"        as_bool(v, {what!r})"]
        return f"{self.helper([*lines, f'    return {not decisive}'])}(c, {env})"

    @staticmethod
    def one_bound(decls: Any) -> tuple[str, Any] | None:
        """(name, set node) of a single binding ``x \\in S``, else None."""
        if isinstance(decls, list):
            if len(decls) != 1:
                return None
            decls = decls[0]
        if tname(decls) == "OperatorApplication" and decls.operator == "\\in" and len(decls.arguments or []) == 2:
            pat = decls.arguments[0]
            if tname(pat) == "OperatorApplication" and not pat.arguments:
                return pat.operator, decls.arguments[1]
        return None

    def helper(self, lines: list[str]) -> str:
        """A generated function ``name(c, e)`` with body ``lines`` (indented once)."""
        name = self.fresh("h")
        self.funcs.append([f"def {name}(c, e):", "    s = c.s", *lines])
        return name

    def quantifier(self, node: Any, bound: tuple[str, Any], scope: Scope, locals_: dict[str, Local], env: str) -> str:
        """``\\E``/``\\A x \\in S : P`` as a generated loop (the closures' quant1)."""
        name, snode = bound
        want = node.quantifier == "\\E"
        inner = dict(locals_)
        inner[name] = Local("val", name)
        body = self.expr(node.predicate, scope, inner, "e2")
        h = self.helper(["    e2 = dict(e)", f"    for v in iter_set({self.expr(snode, scope, locals_, 'e')}):",
                         f"        e2[{name!r}] = v", f"        r = {body}", f"        if r is {want}:",
                         f"            return {want}", f"        if r is not {not want}:",
                         "            as_bool(r, 'quantifier body')", f"    return {not want}"])
        return f"{h}(c, {env})"

    def function(self, node: Any, bound: tuple[str, Any], scope: Scope, locals_: dict[str, Local], env: str) -> str:
        """``[x \\in S |-> e]`` as a generated loop (the closures' fn1)."""
        name, snode = bound
        inner = dict(locals_)
        inner[name] = Local("val", name)
        body = self.expr(node.value, scope, inner, "e2")
        h = self.helper(["    e2 = dict(e)", "    d = {}",
                         f"    for v in iter_set({self.expr(snode, scope, locals_, 'e')}):",
                         f"        e2[{name!r}] = v", f"        d[v] = {self.plain(body)}", "    return mkfn(d)"])
        return f"{h}(c, {env})"

    def op_call(
        self, opdef: OpDef, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], env: str
    ) -> str | None:
        """A call of a plain operator (not memoised, not recursive, value arguments only) as a call
        of its generated body with the argument values, as the closures' call does it; None for
        any other operator."""
        comp = self.comp
        if not argnodes or len(argnodes) != len(opdef.params) or any(ar for _p, ar in opdef.params):
            return None
        if getattr(opdef.node, "function", None) or opdef.name in opdef.scope.recursive or comp.primed.of(opdef):
            return None
        _body, bdeps = comp.op_body(opdef, False)
        if comp.purity.memoisable(opdef) or (comp.purity.state_memoisable(opdef)
                                             and read_vars(bdeps, len(comp.variables)) is not None):
            return None
        name = self.bodies.get(id(opdef))
        if name is None:
            name = self.bodies[id(opdef)] = self.fresh("op")
            params = {p: Local("val", p) for p, _ar in opdef.params}
            with comp.in_file_of(opdef):
                src = self.expr(opdef.body, opdef.scope, params, "e")
            self.funcs.append([f"def {name}(c, e):", "    s = c.s", f"    return {src}"])
        args = [f"{p!r}: {self.expr(a, scope, locals_, env)}"
                for (p, _ar), a in zip(opdef.params, argnodes, strict=True)]
        return f"{name}(c, {{{', '.join(args)}}})"

    def let_call(
        self, target: Local, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], env: str
    ) -> str | None:
        """A call of a LET operator with value parameters: its generated body on a copy of the
        environment with the parameters bound (the closures' letcall)."""
        if len(argnodes) != len(target.params) or any(ar for _p, ar in target.params) or target.scope is None:
            return None
        name = self.bodies.get(id(target.body))
        if name is None:
            name = self.bodies[id(target.body)] = self.fresh("letop")
            inner = dict(target.locals)
            for p, _ar in target.params:
                inner[p] = Local("val", p)
            self.funcs.append([f"def {name}(c, e):", "    s = c.s",
                               f"    return {self.expr(target.body, target.scope, inner, 'e')}"])
        args = [f"{p!r}: {self.expr(a, scope, locals_, env)}"
                for (p, _ar), a in zip(target.params, argnodes, strict=True)]
        return f"{name}(c, {{**{env}, {', '.join(args)}}})"

    def builtin(self, op: str, node: Any, args: list[Any], scope: Scope, locals_: dict[str, Local], env: str) -> str:
        """A call of a standard module's operator with value arguments, as the closures'
        ``builtin_call``: its errors, and those of its arguments, located at the call."""
        arity, fn, opargs = B.FUNCTIONS[op]
        if len(args) != arity or opargs or op in ("Print", "PrintT", "Assert") or not args:
            return self.call(self.comp.expr(node, scope, locals_, False)[0], env)
        names = [f"a{i}" for i in range(len(args))]
        lines = [f"        {n} = {self.expr(a, scope, locals_, 'e')}" for n, a in zip(names, args, strict=True)]
        fast = SEQUENCES.get(op)
        if fast is not None:
            lines += [f"        if {fast[0]}:", f"            return {fast[1]}"]
        where = f"{self.comp.where(node)} ({op})"
        h = self.helper(["    try:", *lines, f"        return {self.obj(fn, 'bf')}(c, {', '.join(names)})",
                         "    except (EvalError, TypeError, ValueError) as exc:",
                         f"        raise_located(exc, {where!r})"])
        return f"{h}(c, {env})"

    def plain(self, src: str) -> str:
        """``src``'s value as stored in a record or state (lazy values materialised)."""
        if src in self.ns and type(self.ns[src]) in PLAIN_TYPES:
            return src
        tmp = self.fresh("t")
        return f"({tmp} if type({tmp} := {src}) in PLAIN else norm({tmp}))"

    def except_(self, node: Any, scope: Scope, locals_: dict[str, Local], env: str) -> str:
        """``[f EXCEPT ![k1][k2].f = v, ...]`` as a generated function: the closures' ``ex``, with
        ``@`` bound only where the new value reads it. A path that leaves the domain at any level
        leaves the function unchanged."""
        inner = dict(locals_)
        inner["@"] = Local("val", "@")
        name = self.fresh("x")
        lines = [f"def {name}(c, e):", "    s = c.s", f"    fv = {self.expr(node.function, scope, locals_, 'e')}"]
        for ch in node.changes:
            # Every key of the path first, as the closures evaluate them.
            keys = []
            for item in ch.item:
                if isinstance(item, str):
                    keys.append(self.obj(item))
                    continue
                parts = [self.expr(x, scope, locals_, "e") for x in item]
                key = self.fresh("a")
                lines.append(f"    {key} = " + (parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ",)"))
                keys.append(key)
            reads = self.comp.at_reads
            self.comp.expr(ch.expression, scope, inner, False)
            at = self.comp.at_reads != reads
            value = self.expr(ch.expression, scope, inner, "e2" if at else "e")
            parents = ["fv", *(self.fresh("g") for _ in keys[1:])]
            old = self.fresh("g")
            pad = "    "
            for parent, key, child in zip(parents, keys, [*parents[1:], old], strict=True):
                lines += [pad + line for line in self.dig(parent, key, child)]
                pad += "    "
            if at:
                lines += [f"{pad}e2 = dict(e)", f"{pad}e2['@'] = {old}"]
            lines.append(f"{pad}w = {self.plain(value)}")
            for parent, key in reversed(list(zip(parents, keys, strict=True))):
                lines += [pad + line for line in self.put(parent, key)]
            lines.append(f"{pad}fv = w")
        self.funcs.append([*lines, "    return fv"])
        return f"{name}(c, {env})"

    @staticmethod
    def dig(f: str, key: str, into: str) -> list[str]:
        """Statements setting ``into`` to ``f[key]`` and opening a block entered only when ``key``
        is in ``f``'s domain: a sequence (or a function on ``1..n``) and a record (or a function
        on other values) in place, anything else through apply."""
        return [f"if type({f}) is tuple:", f"    ok = type({key}) is int and 0 < {key} <= len({f})", "    if ok:",
                f"        {into} = {f}[{key} - 1]", f"elif type({f}) is Fn:", f"    ok = {key} in {f}.d", "    if ok:",
                f"        {into} = {f}.d[{key}]", "else:", "    try:", f"        {into} = apply({f}, {key})",
                "        ok = True", "    except EvalError:", "        ok = False", "if ok:"]

    @staticmethod
    def put(f: str, key: str) -> list[str]:
        """Statements setting ``w`` to ``f`` with ``w`` at ``key`` (in ``f``'s domain)."""
        return [f"if type({f}) is tuple:", f"    w = (*{f}[:{key} - 1], w, *{f}[{key}:])", f"elif type({f}) is Fn:",
                f"    d = dict({f}.d)", f"    d[{key}] = w", "    w = Fn(d)", "else:", f"    w = update({f}, {key}, w)"]

    def call(self, fn: Fun, env: str) -> str:
        return f"{self.obj(fn, 'f')}(c, {env})"

    def application(self, node: Any, scope: Scope, locals_: dict[str, Local], env: str, fn: Fun) -> str:
        op = node.operator
        args = node.arguments or []
        if not args:
            loc = locals_.get(op)
            if loc is not None:
                if loc.kind == "val":
                    return self.direct.get(env, {}).get(op) or f"{env}[{op!r}]"
                if loc.kind == "thunk":
                    # A LET definition already evaluated in this LET entry is read in place.
                    tmp = self.fresh("t")
                    return f"({tmp}.v if ({tmp} := {env}[{op!r}]).v is not THUNK_NO else {tmp}.get())"
                return self.call(fn, env)
            d = scope.defs.get(op)
            if isinstance(d, Decl) and d.kind == "var" and d.scope.subst is None:
                return f"s[{self.comp.var_index[op]}]"
            return self.call(fn, env)
        op = B.ALIASES.get(op, op)
        target = locals_.get(op) or scope.defs.get(op)
        if target is not None:
            inline = self.op_call(target, args, scope, locals_, env) if isinstance(target, OpDef) else None
            if isinstance(target, Local) and target.kind == "letop":
                inline = self.let_call(target, args, scope, locals_, env)
            return inline if inline is not None else self.call(fn, env)
        if op in B.FUNCTIONS and op not in B.BINARY and op not in B.UNARY:
            return self.builtin(op, node, args, scope, locals_, env)
        if op == "~" and len(args) == 1:
            tmp = self.fresh("t")
            a = self.expr(args[0], scope, locals_, env)
            return f"(False if ({tmp} := {a}) is True else True if {tmp} is False else not as_bool({tmp}, '~'))"
        if op in ("/\\", "\\/") and len(args) == 2:
            return self.expr_junction(op, flatten(op, node), scope, locals_, env)
        if op == "=>" and len(args) == 2:
            a, b = self.expr(args[0], scope, locals_, "e"), self.expr(args[1], scope, locals_, "e")
            h = self.helper([f"    v = {a}", "    if v is False:", "        return True",
                             "    if v is not True:", "        as_bool(v, '=>')", f"    w = {b}",
                             "    return w if w is True or w is False else as_bool(w, '=>')"])
            return f"{h}(c, {env})"
        if len(args) == 2 and op in B.BINARY and op not in ("/\\", "\\/", "=>", "<=>"):
            a, b = self.expr(args[0], scope, locals_, env), self.expr(args[1], scope, locals_, env)
            py = {"=": "==", "#": "!=", "\\in": "in"}.get(op)
            if py is not None:
                src = f"({a} {py} {b})"
                self.bools.add(src)
                return src
            return f"{self.obj(B.BINARY[op], 'b')}({a}, {b})"
        return self.call(fn, env)

    # ---- actions -----------------------------------------------------------------------------
    def act(self, node: Any, scope: Scope, locals_: dict[str, Local], env: str, k: Cont, ind: int) -> list[str]:
        """Statements enumerating the successors of action ``node``, running ``k`` for each."""
        comp = self.comp
        t = tname(node) if not isinstance(node, str) else "str"
        if t == "Parentheses":
            return self.act(node.expression, scope, locals_, env, k, ind)
        if t == "VerticalList":
            op = B.ALIASES.get(node.operator, node.operator)
            return self.junction(node, op, [it.expression for it in node.arguments], scope, locals_, env, k, ind)
        if t == "OperatorApplication":
            op = B.ALIASES.get(node.operator, node.operator)
            args = node.arguments or []
            if op in ("/\\", "\\/") and args:
                return self.junction(node, op, flatten(op, node), scope, locals_, env, k, ind)
            if op in ("=", "\\in") and len(args) == 2:
                lhs, lscope, llc = comp.substituted(args[0], scope, locals_)
                if tname(lhs) == "OperatorApplication" and lhs.operator == "'" and lhs.arguments:
                    idx = comp.assignable(lhs.arguments[0], lscope, llc)
                    if idx is not None:
                        return self.assign(idx, op == "=", self.expr(args[1], scope, locals_, env), k, ind)
            if op == "UNCHANGED" and len(args) == 1:
                idxs = comp.unchanged_vars(args[0], scope, locals_)
                if idxs is not None:
                    return self.unchanged(idxs, k, ind)
            if op not in B.BINARY and op not in B.UNARY and op not in ("'", "~", "=>", "<=>", "ENABLED", "UNCHANGED"):
                target = locals_.get(op) if op in locals_ else scope.defs.get(op)
                if isinstance(target, OpDef):
                    return self.call_site(target, args, scope, locals_, env, k, ind, node)
        elif t == "Quantification" and node.quantifier == "\\E":
            binds, _ = comp.bounds(node.declarations, scope, locals_, False)
            inner = comp.with_bound(locals_, binds)
            if comp.act(node.predicate, scope, inner, False)[0] == "act":
                return self.exists(node, binds, scope, inner, env, k, ind)
        elif t == "If":
            kinds = [comp.act(x, scope, locals_, False)[0] for x in (node.then, node.else_)]
            if "act" in kinds:
                p, tmp = self.expr(node.predicate, scope, locals_, env), self.fresh("p")
                pad = "    " * ind
                return [f"{pad}{tmp} = {p}",
                        f"{pad}if {tmp} is True or ({tmp} is not False and as_bool({tmp}, 'IF condition')):",
                        *self.act(node.then, scope, locals_, env, k, ind + 1),
                        f"{pad}else:",
                        *self.act(node.else_, scope, locals_, env, k, ind + 1)]
        elif t == "Let":
            inner, thunks, eager = self.let_entry(node, scope, locals_)
            if comp.act(node.expression, scope, inner, False)[0] == "act":
                e2 = self.fresh("env")
                self.direct[e2] = self.direct.get(env, {})
                return [*self.enter_let(node.definitions, scope, inner, thunks, eager, env, e2, "    " * ind),
                        *self.act(node.expression, scope, inner, e2, k, ind)]
        kind, fn = comp.act(node, scope, locals_, False)
        if kind == "pred":
            return self.guard([self.expr(node, scope, locals_, env)], "action conjunct", k("None", ind + 1), ind)
        return self.loop(f"{self.obj(fn, 'g')}(c, {env})", k, ind)

    def let_entry(self, node: Any, scope: Scope, locals_: dict[str, Local]
                  ) -> tuple[dict[str, Local], list[tuple[str, Fun, bool]], str | None]:
        """The bindings and thunks of the LET ``node`` (see :meth:`ExprCompiler.let_locals`), and
        the definition evaluated on entry instead of thunked, if any: the one the body's first
        conjunct begins by evaluating (``m`` in ``LET m == Head(q) IN m.type = "req" /\\ ...``).
        It would be evaluated at once anyway, so evaluating it on entry changes no outcome and
        no error, and saves its thunk. It is then bound as a value."""
        comp = self.comp
        inner, thunks, _ = comp.let_locals(node.definitions, scope, locals_, False)
        defs = {d.name: d for d in node.definitions if tname(d) == "OperatorDefinition" and not d.arity}
        if any(d.function or id(d) in comp.memoised_lets for d in defs.values()):
            return inner, thunks, None  # their closures would read the name as a thunk
        body = node.expression
        while tname(body) == "Parentheses":
            body = body.expression
        if tname(body) == "VerticalList" and B.ALIASES.get(body.operator, body.operator) == "/\\":
            body = body.arguments[0].expression
        elif tname(body) == "OperatorApplication" and B.ALIASES.get(body.operator, body.operator) == "/\\" \
                and body.arguments:
            body = flatten("/\\", body)[0]
        if comp.act(body, scope, inner, False)[0] != "pred" or is_action(body, scope):
            return inner, thunks, None
        name = self.first_read(body, scope, inner)
        stored = {n: memo for n, _fn, memo in thunks}
        if name not in defs or not stored.get(name):
            return inner, thunks, None
        if any(tname(d) == "OperatorDefinition" and d.arity and name in names_in(d.definiens, comp.names)
               for d in node.definitions):
            return inner, thunks, None  # a LET operator's body reads the name as the thunk it compiled against
        if comp.expr(defs[name].definiens, scope, inner, False)[1] & IMPURE:
            return inner, thunks, None
        inner = dict(inner)
        inner[name] = Local("val", name)
        return inner, thunks, name

    @staticmethod
    def first_read(node: Any, scope: Scope, locals_: dict[str, Local]) -> str | None:
        """The bound name whose value the evaluation of ``node`` begins with, following the
        left operand of standard binary operators, records of fields and functions of
        applications; None when that is not a name."""
        while True:
            t = tname(node)
            if t in ("Parentheses", "Field"):
                node = node.expression
            elif t == "FunctionApplication":
                node = node.function
            elif t == "OperatorApplication":
                op, args = B.ALIASES.get(node.operator, node.operator), node.arguments or []
                if not args:
                    return str(node.operator) if node.operator in locals_ else None
                if len(args) != 2 or op not in B.BINARY or op in locals_ or op in scope.defs:
                    return None
                node = args[0]
            else:
                return None

    def enter_let(self, defs: list[Any], scope: Scope, inner: dict[str, Local], thunks: list[tuple[str, Fun, bool]],
                  eager: str | None, env: str, into: str, pad: str) -> list[str]:
        """Statements binding ``into`` to ``env`` with the LET's thunks (the closures'
        :meth:`ExprCompiler.enter_let`), their bodies generated except for recursive function
        definitions and memoised definitions (see :meth:`ExprCompiler.let_memoised`), and the
        ``eager`` definition's value (see :meth:`let_entry`)."""
        nodes = {d.name: d for d in defs if tname(d) == "OperatorDefinition" and not d.arity}
        lines = [f"{pad}{into} = dict({env})"]
        for name, fn, memo in thunks:
            d = nodes.get(name)
            if name == eager:
                lines.append(f"{pad}{into}[{name!r}] = {self.expr(d.definiens, scope, inner, into)}")
            elif d is not None and not d.function and id(d) not in self.comp.memoised_lets:
                body = self.helper([f"    return {self.expr(d.definiens, scope, inner, 'e')}"])
                lines.append(f"{pad}{into}[{name!r}] = Thunk({body}, c, {into}, {memo})")
            else:
                lines.append(f"{pad}{into}[{name!r}] = Thunk({self.obj(fn, 'f')}, c, {into}, {memo})")
        return lines

    def loop(self, it: str, k: Cont, ind: int) -> list[str]:
        """``k`` for each successor of the generator ``it``, which may assign any variable."""
        lab = self.fresh("l")
        return [f"{'    ' * ind}for {lab} in {it}:", *self.within(frozenset(), k, lab, ind + 1)]

    def within(self, unset: frozenset[int], k: Cont, lab: str, ind: int) -> list[str]:
        """``k``'s statements, generated knowing that the variables ``unset`` are unassigned."""
        saved, self.unset = self.unset, unset
        try:
            return k(lab, ind)
        finally:
            self.unset = saved

    def guard(self, preds: list[str], what: str, body: list[str], ind: int) -> list[str]:
        """``body`` where every predicate is TRUE, in order; a non-boolean is an error."""
        out: list[str] = []
        for p in preds:
            pad = "    " * ind
            if p in self.bools:
                out.append(f"{pad}if {p}:")
            else:
                v = self.fresh("v")
                out += [f"{pad}{v} = {p}", f"{pad}if {v} is not True:",
                        f"{pad}    if {v} is not False:", f"{pad}        as_bool({v}, {what!r})", f"{pad}else:"]
            ind += 1
        return out + body

    def junction(
        self, node: Any, op: str, items: list[Any], scope: Scope, locals_: dict[str, Local], env: str, k: Cont, ind: int
    ) -> list[str]:
        kinds = [self.comp.act(it, scope, locals_, False)[0] for it in items]
        if all(kd == "pred" for kd in kinds):
            if op == "/\\":
                preds = [self.expr(it, scope, locals_, env) for it in items]
                return self.guard(preds, "conjunct", k("None", ind + len(preds)), ind)
            fn = self.comp.act(node, scope, locals_, False)[1]
            return self.guard([self.call(fn, env)], "action conjunct", k("None", ind + 1), ind)
        if op == "\\/":
            out: list[str] = []
            for it in items:
                out += self.act(it, scope, locals_, env, k, ind)
            return out
        late = [kd == "pred" and is_action(it, scope) for kd, it in zip(kinds, items, strict=True)]
        parts = list(zip(kinds, items, strict=True))
        if any(late):
            parts = [p for p, x in zip(parts, late, strict=True) if not x] + [
                p for p, x in zip(parts, late, strict=True) if x]
        return self.conj(parts, scope, locals_, env, k, ind)

    def conj(self, parts: list[tuple[str, Any]], scope: Scope, locals_: dict[str, Local], env: str, k: Cont,
             ind: int) -> list[str]:
        """Conjuncts nested left to right; runs of predicates are one guard (as in conj_gen)."""
        if not parts:
            return k("None", ind)
        if parts[0][0] == "pred":
            j = 0
            while j < len(parts) and parts[j][0] == "pred":
                j += 1
            preds = [self.expr(it, scope, locals_, env) for _kd, it in parts[:j]]
            what = "action conjunct" if j == 1 else "conjunct"
            return self.guard(preds, what, self.conj(parts[j:], scope, locals_, env, k, ind + j), ind)
        rest = parts[1:]
        return self.act(parts[0][1], scope, locals_, env,
                        lambda _lab, ind2: self.conj(rest, scope, locals_, env, k, ind2), ind)

    def assign(self, i: int, equal: bool, rhs: str, k: Cont, ind: int) -> list[str]:
        pad = "    " * ind
        after = self.unset - {i}
        if not equal:
            return [f"{pad}for _ in assign_in(n, {i}, {rhs}):", *self.within(after, k, "None", ind + 1)]
        v = self.fresh("v")
        if i in self.unset:
            return [f"{pad}{v} = {rhs}", f"{pad}n[{i}] = {v} if type({v}) in PLAIN else norm({v})",
                    *self.within(after, k, "None", ind), f"{pad}n[{i}] = UNSET"]
        cur = self.fresh("c")
        return [f"{pad}{v} = {rhs}", f"{pad}{cur} = n[{i}]",
                f"{pad}if {cur} is UNSET or {cur} == {v}:",
                f"{pad}    if {cur} is UNSET:",
                f"{pad}        n[{i}] = {v} if type({v}) in PLAIN else norm({v})",
                *self.within(after, k, "None", ind + 1),
                f"{pad}    if {cur} is UNSET:",
                f"{pad}        n[{i}] = UNSET"]

    def unchanged(self, idxs: list[int], k: Cont, ind: int) -> list[str]:
        if not idxs:
            return k("None", ind)
        i, pad, cur = idxs[0], "    " * ind, self.fresh("c")
        after = self.unset - {i}
        if i in self.unset:
            return [f"{pad}n[{i}] = s[{i}]",
                    *self.within(after, lambda _lab, ind2: self.unchanged(idxs[1:], k, ind2), "None", ind),
                    f"{pad}n[{i}] = UNSET"]
        return [f"{pad}{cur} = n[{i}]",
                f"{pad}if {cur} is UNSET or not {cur} != s[{i}]:",
                f"{pad}    if {cur} is UNSET:",
                f"{pad}        n[{i}] = s[{i}]",
                *self.within(after, lambda _lab, ind2: self.unchanged(idxs[1:], k, ind2), "None", ind + 1),
                f"{pad}    if {cur} is UNSET:",
                f"{pad}        n[{i}] = UNSET"]

    def exists(
        self, node: Any, binds: list[tuple[Any, Fun]], scope: Scope, inner: dict[str, Local], env: str, k: Cont,
        ind: int,
    ) -> list[str]:
        pad, e2 = "    " * ind, self.fresh("env")
        if len(binds) == 1 and isinstance(binds[0][0], str):
            (name, sfn), = binds
            hit = self.comp.const_sets.get(id(sfn))
            values = self.obj(hit[1]) if hit is not None and hit[0] is sfn else f"ordered({self.call(sfn, env)})"
            v = self.fresh("x")
            self.direct[e2] = {**self.direct.get(env, {}), name: v}
            body = self.act(node.predicate, scope, inner, e2, k, ind + 1)
            return [f"{pad}for {v} in {values}:", *self.declare(e2, f"{{**{env}, {name!r}: {v}}}", body, ind + 1)]
        it = self.obj(self.comp.env_iter(binds, canonical=True), "it")
        return [f"{pad}for {e2} in {it}(c, {env}):", *self.act(node.predicate, scope, inner, e2, k, ind + 1)]

    def call_site(
        self, opdef: OpDef, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], env: str, k: Cont, ind: int,
        node: Any,
    ) -> list[str]:
        """A call of an operator action: its guard evaluated here, the rest of its body a
        generated generator (or, where only a yield follows the call, the rest of the body in
        place: one generator frame less per successor), the closure's successor memo used when it
        is switched on."""
        comp = self.comp
        kind, closure = comp.act_call(opdef, argnodes, scope, locals_, False, node)
        if kind == "pred":
            return self.guard([self.call(closure, env)], "action conjunct", k("None", ind + 1), ind)
        hit = comp.cache.get(("act", id(opdef), False))
        if hit is None or any(ar for _p, ar in opdef.params) or any(is_action(a, scope) for a in argnodes):
            return self.loop(f"{self.obj(closure, 'g')}(c, {env})", k, ind)
        where = f"{comp.where(node)} ({opdef.name})"
        box = comp.act_memos.get(id(opdef))
        pad = "    " * ind
        e2, v, it, rec = self.fresh("env"), self.fresh("v"), self.fresh("it"), self.fresh("rec")
        body, values = self.argument_values(argnodes, scope, locals_, env, pad)
        params = [p for p, _ar in opdef.params]
        self.direct[e2] = dict(zip(params, values, strict=True))
        decl = "{" + ", ".join(f"{p!r}: {x}" for p, x in zip(params, values, strict=True)) + "}" if params else "EMPTY"
        inner_locals = {p: Local("val", p) for p, _ar in opdef.params}
        # In place only below a yield: the rest of the body then runs inside this function's
        # handler, which locates its errors as the generator's would; a continuation doing more
        # (later conjuncts) must stay outside it.
        inline = k in self.yields
        rest_k = self.named(opdef.name, k, rec if box is not None else None) if inline else None
        with comp.in_file_of(opdef):
            prep, guard, rest = self.split_body(opdef, inner_locals, where, e2, v, ind + 2, rest_k)
        fast = self.guarded_rest(prep, guard, rest, where, e2, v, it, pad)
        if box is None:
            out = [f"{pad}if True:", *fast]
            return body + self.declare(e2, decl, out + self.loop(it, k, ind) if isinstance(rest, str) else out, ind)
        return body + self.declare(e2, decl, self.memoised_rest(box, values, rest, fast, k, it, rec, ind), ind)

    def argument_values(
        self, argnodes: list[Any], scope: Scope, locals_: dict[str, Local], env: str, pad: str
    ) -> tuple[list[str], list[str]]:
        """The lines that compute a call's argument values, and the values, in order, as Python
        names or cheap reads: the body reads its parameters from them, and they are the successor
        memo's key."""
        body: list[str] = []
        values: list[str] = []
        for a in argnodes:
            src = self.expr(a, scope, locals_, env)
            if not SIMPLE.fullmatch(src):
                tmp = self.fresh("a")
                body.append(f"{pad}{tmp} = {src}")
                src = tmp
            values.append(src)
        return body, values

    @staticmethod
    def guarded_rest(
        prep: list[str], guard: list[str], rest: str | list[str], where: str, e2: str, v: str, it: str, pad: str
    ) -> list[str]:
        """The called body's bindings and guard (errors located at the call), then its rest: in
        place, or (``rest`` a name) the generator ``it`` over it."""
        if isinstance(rest, str):
            run = [f"{pad}    {it} = {rest}(c, {e2}) if {v} is True else ()"] if guard else [
                f"{pad}    {it} = {rest}(c, {e2})"]
        else:
            run = [f"{pad}    if {v} is True:", *rest] if guard else [f"{pad}    if True:", *rest]
        fast = [f"{pad}    try:", *prep, *guard, f"{pad}    except EvalError as exc:",
                f"{pad}        exc.locate({where!r})", f"{pad}        raise", *run] if guard else run
        if prep and not guard:
            fast = [f"{pad}    try:", *prep, f"{pad}    except EvalError as exc:",
                    f"{pad}        exc.locate({where!r})", f"{pad}        raise", *fast]
        return fast

    def memoised_rest(
        self, box: list[Any], values: list[str], rest: str | list[str], fast: list[str], k: Cont, it: str, rec: str,
        ind: int,
    ) -> list[str]:
        """The successor memo of the closure (act_call) around the call: replay a recorded call,
        else enumerate and record (a disabled call records no successor). Recorded in the loop
        itself (as :func:`record` does, without its generator layer per successor): only a
        complete enumeration reaches the store after the loop."""
        pad = "    " * ind
        bx, memo, key, hit = self.obj(box, "box"), self.fresh("m"), self.fresh("key"), self.fresh("hit")
        nv = len(self.comp.variables)
        memo_key = "(" + "".join(f"{x}, " for x in values) + ")"
        entry = "" if len(self.unset) == nv else f" and n.count(UNSET) == {nv}"
        pre = [f"{pad}{rec} = {hit} = None",
               f"{pad}if ({memo} := {bx}[0]) is not None{entry}:",
               f"{pad}    {key} = (id(s), {memo_key})",
               f"{pad}    {hit} = {memo}.get({key})",
               f"{pad}    if {hit} is not None and {hit}[0] is not s:",
               f"{pad}        {hit} = None",
               f"{pad}    if {hit} is None and {bx}[1]:",
               f"{pad}        {rec} = []"]
        store = [f"{pad}if {rec} is not None:", f"{pad}    {memo}[{key}] = (s, {rec})"]
        if not isinstance(rest, str):
            return [*pre, f"{pad}if {hit} is not None:", *self.loop(f"replay(n, {hit}[1])", k, ind + 1),
                    f"{pad}else:", *fast, *store]
        lab = self.fresh("l")
        return [
            *pre, f"{pad}if {hit} is not None:", f"{pad}    {it} = replay(n, {hit}[1])", f"{pad}else:", *fast,
            f"{pad}for {lab} in {it}:",
            f"{pad}    if {rec} is not None:",
            f"{pad}        {rec}.append(({lab}, n[:]))",
            *self.within(frozenset(), k, lab, ind + 1), *store]

    @staticmethod
    def declare(env: str, value: str, lines: list[str], ind: int) -> list[str]:
        """``lines`` preceded by the assignment of the environment ``env``, left out when
        ``lines`` never name it (every bound name read directly, see :attr:`direct`)."""
        used = re.compile(rf"\b{env}\b")
        if any(used.search(line) for line in lines):
            return [f"{'    ' * ind}{env} = {value}", *lines]
        return lines

    def named(self, name: str, k: Cont, rec: str | None) -> Cont:
        """The continuation of an operator's body inlined at a call site: its unnamed steps
        named ``name`` (as :meth:`yield_as` names them), recorded in the list ``rec`` when it is
        not None, then ``k``."""
        def k2(lab: str, ind: int) -> list[str]:
            pad = "    " * ind
            out: list[str] = []
            if lab == "None":
                lab = repr(name)
            else:
                tmp = self.fresh("l")
                out.append(f"{pad}{tmp} = {lab} or {name!r}")
                lab = tmp
            if rec is not None:
                out += [f"{pad}if {rec} is not None:", f"{pad}    {rec}.append(({lab}, n[:]))"]
            return out + k(lab, ind)

        return k2

    def split_body(self, opdef: OpDef, locals_: dict[str, Local], where: str, env: str, v: str,
                   ind: int, rest_k: Cont | None = None) -> tuple[list[str], list[str], str | list[str]]:
        """(statements entering the body's LET, statements setting ``v`` to its leading guard,
        the rest of the body: the name of a generated generator, or with ``rest_k`` its statements
        at indentation ``ind``, running ``rest_k`` for each successor)."""
        comp, scope = self.comp, opdef.scope
        node = opdef.body
        while tname(node) == "Parentheses":
            node = node.expression
        prep: list[str] = []
        pad = "    " * ind
        if tname(node) == "Let":
            inner, thunks, eager = self.let_entry(node, scope, locals_)
            prep = self.enter_let(node.definitions, scope, inner, thunks, eager, env, env, pad)
            locals_, node = inner, node.expression
            while tname(node) == "Parentheses":
                node = node.expression
        parts: list[tuple[str, Any]] = []
        items: list[Any] | None = None
        if tname(node) == "VerticalList" and B.ALIASES.get(node.operator, node.operator) == "/\\":
            items = [it.expression for it in node.arguments]
        elif tname(node) == "OperatorApplication" and B.ALIASES.get(node.operator, node.operator) == "/\\" \
                and node.arguments:
            items = flatten("/\\", node)
        if items is not None:
            kinds = [comp.act(it, scope, locals_, False)[0] for it in items]
            parts = list(zip(kinds, items, strict=True))
            late = [kd == "pred" and is_action(it, scope) for kd, it in parts]
            if any(late):
                parts = [p for p, x in zip(parts, late, strict=True) if not x] + [
                    p for p, x in zip(parts, late, strict=True) if x]
        guard: list[str] = []
        j = 0
        while j < len(parts) and parts[j][0] == "pred":
            j += 1
        if 0 < j < len(parts):
            preds = [self.expr(it, scope, locals_, env) for _kd, it in parts[:j]]
            for m, p in enumerate(preds):
                guard += [f"{'    ' * (ind + m)}{v} = {p}", f"{'    ' * (ind + m)}if {v} is True:"]
            guard = guard[:-1]
            what = "conjunct" if j > 1 else "action guard"
            guard.append(f"{pad}if {v} is not True and {v} is not False:")
            guard.append(f"{pad}    as_bool({v}, {what!r})")
        if rest_k is not None:
            self.yields.add(rest_k)
            rest = self.conj(parts[j:], scope, locals_, env, rest_k, ind + 1) if guard else self.act(
                node, scope, locals_, env, rest_k, ind + 1)
            return prep, guard, [f"{pad}try:", *rest, f"{pad}except EvalError as exc:",
                                 f"{pad}    exc.locate({where!r})", f"{pad}    raise"]
        name = self.fresh("r")
        lines = [f"def {name}(c, e):", "    s = c.s", "    n = c.n", "    try:"]
        k = self.yield_as(opdef.name)
        if guard:
            lines += self.conj(parts[j:], scope, locals_, "e", k, 2)
        else:
            lines += self.act(node, scope, locals_, "e", k, 2)
        lines += ["        if False:", "            yield None", "    except EvalError as exc:",
                  f"        exc.locate({where!r})", "        raise"]
        self.funcs.append(lines)
        if sum(len(f) for f in self.funcs) > MAX_LINES:
            raise Unsupported("generated source too large")
        return prep, guard, name

