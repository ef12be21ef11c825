"""Module loading: EXTENDS (textual inclusion), INSTANCE (named and unnamed, WITH substitutions),
LOCAL definitions and the standard modules (implemented in Python, see ``builtins.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import TlaError
from .parse import parse_later_modules, parse_module_file

STANDARD_MODULES = frozenset(
    {"Naturals", "Integers", "FiniteSets", "Sequences", "TLC", "Bags", "TLCExt", "IOUtils"}
)
UNSUPPORTED_STANDARD = frozenset({"Reals", "RealTime", "Randomization", "Json", "Toolbox"})
# Modules TLC ships (proof modules) and community modules, written in TLA+: a module of the spec's
# own directory of the same name wins, as with TLC's library path.
LIBRARY = Path(__file__).parent / "library"


def pos(node: Any) -> tuple[int, int]:
    """1-based (line, column) of a syntax node (the parser counts from 0)."""
    start = getattr(node, "start", None)
    if start is None:
        return (0, 0)
    return (start.line + 1, start.column + 1)


@dataclass
class OpDef:
    """``Name(p1, ..., pn) == body`` (or ``f[x \\in S] == body`` when ``is_function``)."""

    name: str
    params: list[tuple[str, int]]  # (name, arity): arity > 0 for higher-order parameters
    body: Any
    scope: Scope
    local: bool = False
    node: Any = None
    file: str = ""


@dataclass
class Decl:
    """A CONSTANT or VARIABLE declared in the module of ``scope``."""

    kind: str  # "const" | "var"
    name: str
    scope: Scope
    node: Any = None


@dataclass
class InstanceRef:
    """``M == INSTANCE X WITH ...``: ``M!Op`` resolves in ``target``."""

    name: str
    target: Scope
    params: list[tuple[str, int]]
    node: Any = None


@dataclass
class Scope:
    """The namespace of one module instance."""

    module: str
    file: str
    defs: dict[str, Any] = field(default_factory=dict)
    # For an instantiated module: CONSTANT/VARIABLE name -> (expression node, outer scope).
    subst: dict[str, tuple[Any, Scope]] | None = None
    extends_std: set[str] = field(default_factory=set)
    assumes: list[tuple[Any, Scope]] = field(default_factory=list)
    variables: list[str] = field(default_factory=list)
    constants: list[str] = field(default_factory=list)
    recursive: set[str] = field(default_factory=set)

    def err(self, msg: str, node: Any, kind: str = "semantic") -> TlaError:
        line, col = pos(node)
        return TlaError(msg, self.file, line, col, kind=kind)


def _param(p: Any) -> tuple[str, int]:
    if isinstance(p, str):
        return (p, 0)
    args = p.arguments or []
    return (p.operator, len(args) if p.nonfix else 0)


def _declared(decl: Any) -> list[Any]:
    """The identifier nodes a binder's declaration (``p \\in S``, ``p, q``, ``<<a, b>> \\in S``) binds."""
    kind = type(decl).__name__
    if kind == "OperatorApplication" and decl.operator == "\\in" and len(decl.arguments or []) == 2:
        return _declared(decl.arguments[0])
    if kind == "OperatorApplication" and not decl.arguments:
        return [decl]
    if kind == "Tuple":
        return [n for item in decl.items for n in _declared(item)]
    return []


def _refuse_rebinding(scope: Scope, node: Any, bound: dict[str, Any]) -> None:
    """SANY refuses a binder (``\\A``, ``\\E``, set filters and maps, functions) that declares a
    name an enclosing binder or the operator's parameters already bind (``\\A p \\in S : \\E p \\in
    T : ...``: "Multiply-defined symbol 'p'"); so does the embedded checker."""
    if node is None or isinstance(node, str | int | bool):
        return
    if isinstance(node, list) or (isinstance(node, tuple) and not hasattr(node, "_fields")):
        for x in node:
            _refuse_rebinding(scope, x, bound)
        return
    # Quantifiers and set maps have "declarations"; set filters, functions and CHOOSE "declaration".
    declarations = getattr(node, "declarations", None) or getattr(node, "declaration", None)
    inner = bound
    if declarations is not None:
        inner = dict(bound)
        for decl in declarations if isinstance(declarations, list) else [declarations]:
            kind = type(decl).__name__
            if kind == "OperatorApplication" and decl.operator == "\\in" and len(decl.arguments or []) == 2:
                _refuse_rebinding(scope, decl.arguments[1], bound)  # the set is outside the binder
            for ident in _declared(decl):
                earlier = inner.get(ident.operator)
                if earlier is not None:
                    line, column = pos(earlier)
                    raise scope.err(f"multiply-defined symbol '{ident.operator}': this declaration conflicts "
                                    f"with the one at line {line}, column {column}", ident)
                inner[ident.operator] = ident
    for f in getattr(node, "_fields", ()):
        if f not in ("declarations", "declaration", "symbol", "start", "end"):
            _refuse_rebinding(scope, getattr(node, f), inner)


class ModuleLoader:
    """Loads a root module and the user modules it EXTENDS / INSTANCEs from its directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.trees: dict[str, tuple[Any, str]] = {}

    def tree(self, name: str, node: Any, scope: Scope | None) -> tuple[Any, str]:
        if name not in self.trees:
            path = self.directory / f"{name}.tla"
            if not path.exists() and (LIBRARY / f"{name}.tla").exists():
                path = LIBRARY / f"{name}.tla"
            if not path.exists():
                if scope is not None:
                    raise scope.err(f"module {name} not found (looked for {path})", node, kind="parse")
                raise TlaError(f"module {name} not found", str(path), 0, 0, kind="parse")
            self._register_file(path)
        return self.trees[name]

    def _register_file(self, path: Path) -> Any:
        """Parse a module file: its module, and the modules written after it in the same file
        (known from then on by name, before any file of that name)."""
        tree = parse_module_file(path)
        self.trees[tree.name] = (tree, str(path))
        for later in parse_later_modules(path):
            self.trees.setdefault(later.name, (later, str(path)))
        return tree

    def load_root(self, path: Path) -> Scope:
        tree = self._register_file(path)
        scope = Scope(tree.name, str(path))
        self._fill(scope, tree, str(path), set())
        return scope

    def _fill(self, scope: Scope, tree: Any, file: str, extending: set[str]) -> None:
        """Add the units of ``tree`` to ``scope`` (EXTENDS is textual inclusion)."""
        if tree.name in extending:
            return
        extending = extending | {tree.name}
        saved_file = scope.file
        for ext in tree.extendees or []:
            name = ext.operator if not isinstance(ext, str) else ext
            if name in STANDARD_MODULES:
                scope.extends_std.add(name)
                continue
            if name in UNSUPPORTED_STANDARD:
                raise TlaError(
                    f"unsupported standard module {name} (EXTENDS)", file, *pos(ext), kind="unsupported"
                )
            sub, sub_file = self.tree(name, ext, scope)
            scope.file = sub_file
            self._fill(scope, sub, sub_file, extending)
            scope.file = saved_file
        scope.file = file
        for unit in tree.units or []:
            self._unit(scope, unit)
        scope.file = saved_file

    def _unit(self, scope: Scope, unit: Any) -> None:
        kind = type(unit).__name__
        if kind == "Variables":
            for n in unit.names:
                scope.defs[n.operator] = Decl("var", n.operator, scope, n)
                scope.variables.append(n.operator)
        elif kind == "Constants":
            for n in unit.names:
                name = n.operator if not isinstance(n, str) else n
                # An operator constant (CONSTANT Op(_)) is usable only when the cfg substitutes
                # a definition for it (Op <- MyOp); compile_model checks that.
                scope.defs[name] = Decl("const", name, scope, n)
                scope.constants.append(name)
        elif kind == "OperatorDefinition":
            self._opdef(scope, unit)
        elif kind == "RecursiveOperators":
            for n in unit.names:
                scope.recursive.add(n.operator)
        elif kind == "Axiom":
            if unit.axiom_keyword in ("ASSUME", "ASSUMPTION"):
                scope.assumes.append((unit.expression, scope))
        elif kind == "Instance":
            self._instance(scope, unit, None, [])
        elif kind == "Define":
            for d in unit.definitions:
                self._unit(scope, d)
        elif kind == "Theorem":
            # Proofs are irrelevant to model checking, but a named theorem (THEOREM T == F)
            # defines T as F, which a model may use (ASSUME T).
            if unit.name and type(unit.goal).__name__ != "Sequent":
                scope.defs[unit.name] = OpDef(unit.name, [], unit.goal, scope, False, unit, scope.file)
        elif kind in ("Use", "Hide") or kind in ("DashLine", "str") or unit is None:
            return
        else:
            raise scope.err(f"unsupported module unit {kind}", unit, kind="unsupported")

    def _opdef(self, scope: Scope, unit: Any) -> None:
        body = unit.definiens
        if type(body).__name__ == "Instance":
            params = [_param(p) for p in (unit.arity or [])]
            self._instance(scope, body, unit.name, params, local=bool(unit.local))
            return
        params = [_param(p) for p in (unit.arity or [])]
        _refuse_rebinding(scope, body, {_param(p)[0]: unit if isinstance(p, str) else p for p in unit.arity or []})
        scope.defs[unit.name] = OpDef(unit.name, params, body, scope, bool(unit.local), unit, scope.file)

    def _instance(
        self, scope: Scope, node: Any, as_name: str | None, params: list[tuple[str, int]], local: bool = False
    ) -> None:
        name = node.name
        if name in STANDARD_MODULES:
            scope.extends_std.add(name)
            if as_name is not None:
                scope.defs[as_name] = InstanceRef(as_name, Scope(name, scope.file, extends_std={name}), params, node)
            return
        if name in UNSUPPORTED_STANDARD:
            raise scope.err(f"unsupported standard module {name} (INSTANCE)", node, kind="unsupported")
        tree, file = self.tree(name, node, scope)
        inner = Scope(name, file, subst={})
        self._fill(inner, tree, file, set())
        assert inner.subst is not None
        given = {w.name: w.expression for w in (node.with_substitution or [])}
        for decl_name in inner.constants + inner.variables:
            if decl_name in given:
                inner.subst[decl_name] = (given.pop(decl_name), scope)
            else:
                # Implicit substitution: the same name in the instantiating module.
                inner.subst[decl_name] = (_Ident(decl_name, node.start), scope)
        if given:
            bad = next(iter(given))
            raise scope.err(f"INSTANCE {name} WITH {bad}: {name} declares no constant or variable {bad}", node)
        if as_name is not None:
            scope.defs[as_name] = InstanceRef(as_name, inner, params, node)
        else:
            if params:
                raise scope.err("unsupported parameterised unnamed INSTANCE", node, kind="unsupported")
            for k, d in inner.defs.items():
                if isinstance(d, OpDef | InstanceRef) and not getattr(d, "local", False):
                    scope.defs.setdefault(k, d)


class _Ident:
    """A synthetic identifier node (implicit INSTANCE substitution ``x <- x``)."""

    def __init__(self, name: str, start: Any) -> None:
        self.operator = name
        self.arguments = None
        self.nonfix = None
        self.start = start

