"""Breadth-first explicit-state model checking with TLC's semantics and counters."""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tlacheck.result import (
    EXIT_ERROR_CONFIG_PARSE,
    EXIT_ERROR_SPEC_PARSE,
    EXIT_ERROR_STATESPACE_TOO_LARGE,
    EXIT_FAILURE_SPEC_EVAL,
    EXIT_VIOLATION_ASSUMPTION,
    EXIT_VIOLATION_DEADLOCK,
    EXIT_VIOLATION_LIVENESS,
    EXIT_VIOLATION_SAFETY,
    CheckResult,
    TraceStep,
)

from . import builtins as B
from . import parallel
from .action import Compiler
from .codegen import generate_expr
from .config import ModelConfig, Named, parse_config
from .errors import EvalError, TlaError
from .heap import SearchHeap
from .liveness import FairInfo, LivenessSearch, reachable
from .modules import Decl, InstanceRef, ModuleLoader, OpDef, Scope, pos
from .monitor import DEFAULT_MAX_MEMORY_MB, Halt, Monitor
from .order import forget_sortkeys
from .steps import StepOutcomes, all_hold, first_violated
from .symmetry import Canonicaliser
from .syntax import EMPTY, IMPURE, NEXT, STATE, UNSET, Ctx, Gen, VarRef, as_bool, state_memo
from .temporal import Fairness, Liveness, Piece, TemporalAnalyzer
from .values import Fn, Value, rank_model_values, render, to_set

State = tuple[Value, ...]
Pred = Callable[[Ctx, dict[str, Value]], Value]


@dataclass
class Live:
    """A liveness property: ``kind`` over ``p`` (and ``q`` for ``~>``), optionally only on the
    behaviours whose initial state satisfies ``premise`` (``P => F``)."""

    name: str
    kind: str
    p: Pred
    q: Pred | None
    env: dict[str, Value]
    premise: tuple[Pred, dict[str, Value]] | None = None


@dataclass
class FairClaim:
    """``WF_v(A)`` or ``SF_v(A)`` inside a PROPERTY: violated by a fair behaviour that ends in a
    cycle without ``<<A>>_v`` steps where ``<<A>>_v`` is always (WF) or repeatedly (SF) enabled."""

    name: str
    kind: str
    action: Gen
    v: Pred
    vp: Pred
    env: dict[str, Value]
    # A evaluated on a given edge (both states known): the fallback when A cannot generate its
    # successors because it leaves variables of a substituted expression undetermined.
    step: Pred


@dataclass
class Compiled:
    """A spec compiled against one model."""

    comp: Compiler
    variables: list[str]
    init: Gen
    next: Gen
    invariants: list[tuple[str, Pred, dict[str, Value]]]
    implied_actions: list[tuple[str, Pred, dict[str, Value]]]
    constraints: list[Pred]
    action_constraints: list[Pred]
    liveness: list[Live]
    fairness: list[tuple[str, Gen, Pred, Pred, dict[str, Value]]]
    symmetry: list[dict[Value, Value]] = field(default_factory=list)
    check_deadlock: bool = True
    init_props: list[tuple[str, Pred, dict[str, Value]]] = field(default_factory=list)
    # Per fairness condition: whether its subscript is a tuple of all the variables (then
    # <<A>>_v holds exactly when the successor differs from the state).
    fairness_all_vars: list[bool] = field(default_factory=list)
    # Operators of the fairness actions, whose successors the checker memoises (Compiler.act_memos).
    fairness_ops: set[int] = field(default_factory=set)
    # False for a config without SPECIFICATION or INIT/NEXT: like TLC, only the constants and
    # ASSUMEs are evaluated, and no state is explored.
    has_behaviour: bool = True
    # <>[][A]_v conjuncts of the SPECIFICATION: the cycles of liveness counterexamples take only
    # steps satisfying every one of them.
    suffix_actions: list[tuple[Pred, dict[str, Value]]] = field(default_factory=list)
    fair_claims: list[FairClaim] = field(default_factory=list)
    # Whether an action property, or a <>[][A]_v conjunct, has side effects (Print): then it is
    # evaluated on every generated successor, not once per distinct step (steps.py).
    implied_side_effects: bool = False
    suffix_side_effects: bool = False


def _scopes(root: Scope) -> list[Scope]:
    """The root scope and the scopes of every module instance reachable from it, named or not
    (an unnamed INSTANCE's scope is known by the definitions it lent)."""
    out, stack, seen = [], [root], set()
    while stack:
        s = stack.pop()
        if id(s) in seen:
            continue
        seen.add(id(s))
        out.append(s)
        stack.extend(d.target for d in s.defs.values() if isinstance(d, InstanceRef))
        stack.extend(d.scope for d in s.defs.values() if isinstance(d, OpDef))
    return out


def _named(root: Scope, cfg: ModelConfig, item: Named, what: str) -> OpDef:
    d = root.defs.get(item.name)
    if not isinstance(d, OpDef):
        raise TlaError(
            f"{what} {item.name} named in the config is not defined in module {root.module}",
            cfg.path, item.line, 1, kind="config",
        )
    return d


def _ident(name: str, node: Any) -> Any:
    return VarRef(name, node)


def compile_model(spec_path: Path, cfg: ModelConfig) -> Compiled:
    """Compile the spec at ``spec_path`` against the model ``cfg`` in TLC's order: substitutions and
    constants, ASSUMEs, the behaviour, then what is checked. Raises :class:`TlaError`."""
    loader = ModuleLoader(spec_path.parent)
    root = loader.load_root(spec_path)
    _substitute(root, cfg)
    if cfg.alias is not None:
        _named(root, cfg, cfg.alias, "ALIAS")
    constants = _config_constants(root, cfg)
    comp = Compiler(root, constants)
    _check_every_constant_assigned(root, cfg, constants)
    _check_assumptions(root, comp)
    ta = TemporalAnalyzer(comp)
    behaviour = _behaviour(root, cfg, comp, ta)
    if behaviour is None:
        return Compiled(
            comp=comp, variables=comp.variables, init=_no_steps, next=_no_steps, invariants=[], implied_actions=[],
            constraints=[], action_constraints=[], liveness=[], fairness=[], has_behaviour=False,
        )
    init = _init_generator(comp, behaviour.inits)
    nxt = _next_generator(comp, behaviour.next, behaviour.next_node)
    invariants = _config_invariants(root, cfg, comp, ta)
    claims = _property_claims(root, cfg, comp, ta)
    fairness = _spec_fairness(comp, behaviour.fairness)
    constraints = [_config_predicate(root, cfg, comp, item, "constraint") for item in cfg.constraints]
    action_constraints = [_config_predicate(root, cfg, comp, item, "action constraint")
                          for item in cfg.action_constraints]
    symmetry = _symmetry(root, cfg, comp, bool(claims.liveness or claims.fair_claims))
    return Compiled(
        comp=comp,
        variables=comp.variables,
        init=init,
        next=nxt,
        invariants=invariants + claims.invariants,
        implied_actions=claims.implied_actions,
        implied_side_effects=claims.implied_side_effects,
        constraints=constraints,
        action_constraints=action_constraints,
        liveness=claims.liveness,
        fairness=fairness.conditions,
        symmetry=symmetry,
        check_deadlock=cfg.check_deadlock,
        init_props=claims.init_props,
        fairness_all_vars=fairness.all_vars,
        fairness_ops=fairness.ops,
        suffix_actions=behaviour.suffix_actions,
        suffix_side_effects=behaviour.suffix_side_effects,
        fair_claims=claims.fair_claims,
    )


def _substitute(root: Scope, cfg: ModelConfig) -> None:
    """Apply the config's ``CONST <- Def`` substitutions (also ``<- [Module]``): the constant is
    replaced by a definition of the spec."""
    scopes = _scopes(root)
    for name, target in cfg.substitutions.items():
        d = root.defs.get(target)
        if d is None:
            raise TlaError(f"substitution {name} <- {target}: {target} is not defined", cfg.path,
                           cfg.const_lines.get(name, 0), 1, kind="config")
        # TLC overrides the definition itself, so every module instance that reads it reads the
        # replacement: MCMajority's `Seq <- BoundedSeq` reaches Init of the Majority it INSTANCEs.
        old = root.defs.get(name)
        for s in scopes:
            if isinstance(old, OpDef):
                for k, v in list(s.defs.items()):
                    if isinstance(v, OpDef) and v.node is old.node:
                        s.defs[k] = d
            elif old is None and name not in s.defs and _standard(name):
                s.defs[name] = d
        root.defs[name] = d
    for module, name, target, line in cfg.module_substitutions:
        d = root.defs.get(target)
        scopes = [s for s in _scopes(root) if s.module == module and name in s.defs]
        if d is None or not scopes:
            what = f"{target} is not defined" if d is None else f"module {module} has no definition {name}"
            raise TlaError(f"substitution {name} <- [{module}] {target}: {what}", cfg.path, line, 1, kind="config")
        for s in scopes:
            s.defs[name] = d


def _standard(name: str) -> bool:
    """Whether ``name`` is an operator of a standard module (implemented in Python)."""
    return name in B.FUNCTIONS or name in B.CONSTANTS or name in B.BINARY or name in B.UNARY


def _config_constants(root: Scope, cfg: ModelConfig) -> dict[str, Value]:
    """The values the config assigns, each checked against the spec's declarations."""
    constants: dict[str, Value] = {}
    for name, v in cfg.constants.items():
        d = root.defs.get(name)
        if d is None:
            raise TlaError(f"config assigns {name}, which the spec does not declare", cfg.path,
                           cfg.const_lines.get(name, 0), 1, kind="config")
        if isinstance(d, OpDef):
            if d.params:
                raise TlaError(f"config assigns a value to {name}, an operator with parameters", cfg.path,
                               cfg.const_lines.get(name, 0), 1, kind="config")
            # Like TLC, a value in the config overrides a definition of the spec (Ballot == Nat).
            root.defs[name] = Decl("const", name, root, d.node)
        constants[name] = v
    return constants


def _check_every_constant_assigned(root: Scope, cfg: ModelConfig, constants: dict[str, Value]) -> None:
    for name in root.constants:
        decl = root.defs[name]
        if getattr(decl, "node", None) is not None and getattr(decl.node, "arguments", None) and (
            name not in cfg.substitutions
        ):
            raise TlaError(f"operator constant {name} needs a substitution ({name} <- Def) in {cfg.path}",
                           root.file, *pos(decl.node), kind="config")
        if name not in constants and name not in cfg.substitutions:
            raise TlaError(f"constant {name} is not assigned a value in {cfg.path}", root.file, *pos(decl.node),
                           kind="config")


def _check_assumptions(root: Scope, comp: Compiler) -> None:
    """ASSUME: checked before anything else, like TLC."""
    for node, scope in root.assumes:
        fn, _ = comp.expr(node, scope, {}, False)
        try:
            ok = fn(Ctx(None, None), EMPTY)
        except EvalError as exc:
            raise TlaError(f"evaluating ASSUME: {exc}", scope.file, *pos(node), kind="eval") from exc
        if ok is not True:
            raise TlaError("ASSUME is violated", scope.file, *pos(node), kind="assume")


@dataclass
class _Behaviour:
    """The behaviours a model explores: from SPECIFICATION, or from INIT and NEXT."""

    inits: list[Piece]
    next: Piece
    next_node: Any
    fairness: list[Fairness]
    suffix_actions: list[tuple[Pred, dict[str, Value]]]
    suffix_side_effects: bool = False


def _behaviour(root: Scope, cfg: ModelConfig, comp: Compiler, ta: TemporalAnalyzer) -> _Behaviour | None:
    """The model's behaviours; None for a config without SPECIFICATION or INIT/NEXT."""
    if cfg.specification is not None:
        spec_def = _named(root, cfg, cfg.specification, "SPECIFICATION")
        dec = ta.decompose(spec_def.body, spec_def.scope, cfg.specification.name, is_spec=True)
        if len(dec.nexts) != 1 or not dec.inits:
            raise TlaError(
                f"SPECIFICATION {cfg.specification.name} must have the form Init /\\ [][Next]_vars /\\ fairness",
                cfg.path, cfg.specification.line, 1, kind="config",
            )
        if dec.invariants or dec.actions or dec.liveness:
            raise TlaError(f"unsupported conjunct in SPECIFICATION {cfg.specification.name}", cfg.path,
                           cfg.specification.line, 1, kind="unsupported")
        compiled = [(comp.expr(pc.node, pc.scope, pc.locals, False), pc.env) for pc in dec.suffix_actions]
        return _Behaviour(dec.inits, dec.nexts[0], dec.nexts[0].node.action, dec.fairness,
                          [(fn, env) for (fn, _), env in compiled],
                          any(deps & IMPURE for (_, deps), _ in compiled))
    if cfg.init is None and cfg.next is None:
        if cfg.invariants or cfg.properties:
            raise TlaError("config lists invariants or properties but no SPECIFICATION or INIT/NEXT",
                           cfg.path, 1, 1, kind="config")
        return None
    if cfg.init is None or cfg.next is None:
        raise TlaError("config needs SPECIFICATION or both INIT and NEXT", cfg.path, 1, 1, kind="config")
    idef = _named(root, cfg, cfg.init, "INIT")
    ndef = _named(root, cfg, cfg.next, "NEXT")
    next_piece = Piece(_ident(ndef.name, ndef.node), root, {}, {}, ndef.name)
    return _Behaviour([Piece(_ident(idef.name, idef.node), root, {}, {}, idef.name)], next_piece,
                      next_piece.node, [], [])


def _init_generator(comp: Compiler, init_pieces: list[Piece]) -> Gen:
    """The initial states: every conjunct of Init in turn, each extending the assignment."""
    init_gens = [comp.action(p.node, p.scope, p.locals, True) for p in init_pieces]
    init_envs = [p.env for p in init_pieces]

    def init(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
        def rec(k: int) -> Iterator[str | None]:
            if k == len(init_gens):
                yield None
                return
            for _ in init_gens[k](c, init_envs[k]):
                yield from rec(k + 1)

        yield from rec(0)

    return init


def _next_generator(comp: Compiler, next_piece: Piece, next_node: Any) -> Gen:
    next_gen = comp.action(next_node, next_piece.scope, next_piece.locals, False)
    next_env = next_piece.env

    def nxt(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
        return next_gen(c, next_env)

    return nxt


def _config_invariants(
    root: Scope, cfg: ModelConfig, comp: Compiler, ta: TemporalAnalyzer
) -> list[tuple[str, Pred, dict[str, Value]]]:
    """The config's INVARIANTs, compiled (generated code where it can), located and memoised."""
    invariants = []
    for item in cfg.invariants:
        d = _named(root, cfg, item, "invariant")
        if ta.is_temporal(d.body, d.scope):
            raise TlaError(f"invariant {item.name} is a temporal formula; list it under PROPERTY",
                           cfg.path, item.line, 1, kind="config")
        fn, deps = comp.expr(_ident(item.name, d.node), root, {}, False)
        if not deps & (STATE | NEXT) and _constant_false(fn):
            # TLC evaluates a constant invariant once, before the search, and refuses a false one.
            raise TlaError(f"The invariant of {item.name} is equal to FALSE", cfg.path, item.line, 1, kind="config")
        fn = generate_expr(comp, _ident(item.name, d.node), root, {}) or fn
        # Evaluation errors inside the invariant name its definition's location.
        comp.file_stack.append(d.file or root.file)
        fn = comp.located(fn, d.node, item.name)
        comp.file_stack.pop()
        # An invariant reading few variables is evaluated once per combination of their values;
        # the memo sits outside the error wrapper, so a hit costs one call.
        fn = state_memo(fn, deps, len(comp.variables))
        invariants.append((item.name, fn, EMPTY))
    return invariants


@dataclass
class _Claims:
    """What the config's PROPERTYs claim, by the kind of check that verifies each part."""

    init_props: list[tuple[str, Pred, dict[str, Value]]] = field(default_factory=list)
    invariants: list[tuple[str, Pred, dict[str, Value]]] = field(default_factory=list)
    implied_actions: list[tuple[str, Pred, dict[str, Value]]] = field(default_factory=list)
    implied_side_effects: bool = False
    fair_claims: list[FairClaim] = field(default_factory=list)
    liveness: list[Live] = field(default_factory=list)


def _property_claims(root: Scope, cfg: ModelConfig, comp: Compiler, ta: TemporalAnalyzer) -> _Claims:
    claims = _Claims()
    for item in cfg.properties:
        d = _named(root, cfg, item, "property")
        dec = ta.decompose(d.body, d.scope, item.name, is_spec=False)
        for pc in dec.inits:
            # A state predicate (no []) in a PROPERTY is a claim about the initial states only.
            if ta.is_temporal(pc.node, pc.scope) or _has_prime(pc.node):
                raise TlaError(f"unsupported PROPERTY {item.name}: action outside [][...]_v",
                               cfg.path, item.line, 1, kind="unsupported")
            fn, _ = comp.expr(pc.node, pc.scope, pc.locals, False)
            claims.init_props.append((item.name, fn, pc.env))
        for pc in dec.invariants:
            fn, _ = comp.expr(pc.node, pc.scope, pc.locals, False)
            claims.invariants.append((item.name, fn, pc.env))
        for pc in dec.actions:
            fn, deps = comp.expr(pc.node, pc.scope, pc.locals, False)
            claims.implied_actions.append((item.name, fn, pc.env))
            claims.implied_side_effects |= bool(deps & IMPURE)
        claims.fair_claims.extend(_fair_claim(comp, item.name, f) for f in dec.fairness)
        claims.liveness.extend(_live(comp, item.name, lv) for lv in dec.liveness)
    return claims


def _fair_claim(comp: Compiler, name: str, f: Fairness) -> FairClaim:
    gen = comp.action(f.action.node, f.action.scope, f.action.locals, False)
    v, _ = comp.expr(f.subscript.node, f.subscript.scope, f.subscript.locals, False)
    vp, _ = comp.expr(f.subscript.node, f.subscript.scope, f.subscript.locals, True)
    step, _ = comp.expr(f.action.node, f.action.scope, f.action.locals, False)
    return FairClaim(name, f.kind, gen, v, vp, f.action.env, step)


def _live(comp: Compiler, name: str, lv: Liveness) -> Live:
    p, _ = comp.expr(lv.p.node, lv.p.scope, lv.p.locals, False)
    q = None
    if lv.q is not None:
        q, _ = comp.expr(lv.q.node, lv.q.scope, lv.q.locals, False)
    premise = None
    if lv.premise is not None:
        premise = (comp.expr(lv.premise.node, lv.premise.scope, lv.premise.locals, False)[0], lv.premise.env)
    return Live(name, lv.kind, p, q, lv.p.env, premise)


@dataclass
class _SpecFairness:
    """The SPECIFICATION's fairness conditions, as :class:`Compiled` holds them."""

    conditions: list[tuple[str, Gen, Pred, Pred, dict[str, Value]]] = field(default_factory=list)
    all_vars: list[bool] = field(default_factory=list)
    ops: set[int] = field(default_factory=set)


def _spec_fairness(comp: Compiler, fair: list[Fairness]) -> _SpecFairness:
    out = _SpecFairness()
    for f in fair:
        comp.collect_acts = out.ops
        try:
            gen = comp.action(f.action.node, f.action.scope, f.action.locals, False)
        finally:
            comp.collect_acts = None
        v, _ = comp.expr(f.subscript.node, f.subscript.scope, f.subscript.locals, False)
        vp, _ = comp.expr(f.subscript.node, f.subscript.scope, f.subscript.locals, True)
        out.conditions.append((f.kind, gen, v, vp, f.action.env))
        idxs = comp.unchanged_vars(f.subscript.node, f.subscript.scope, f.subscript.locals)
        out.all_vars.append(idxs is not None and set(idxs) == set(range(len(comp.variables))))
    return out


def _config_predicate(root: Scope, cfg: ModelConfig, comp: Compiler, item: Named, what: str) -> Pred:
    """A CONSTRAINT or ACTION_CONSTRAINT of the config, compiled."""
    d = _named(root, cfg, item, what)
    return comp.expr(_ident(item.name, d.node), root, {}, False)[0]


def _symmetry(root: Scope, cfg: ModelConfig, comp: Compiler, has_liveness: bool) -> list[dict[Value, Value]]:
    """The permutations of the config's SYMMETRY, each as a map of values."""
    symmetry: list[dict[Value, Value]] = []
    if cfg.symmetry is None:
        return symmetry
    d = _named(root, cfg, cfg.symmetry, "symmetry")
    fn, _ = comp.expr(_ident(cfg.symmetry.name, d.node), root, {}, False)
    try:
        perms = to_set(fn(Ctx(None, None), EMPTY))
    except EvalError as exc:
        raise TlaError(f"evaluating SYMMETRY {cfg.symmetry.name}: {exc}", cfg.path, cfg.symmetry.line, 1,
                       kind="eval") from exc
    for p in perms:
        if type(p) is Fn:
            symmetry.append(dict(p.d))
        elif type(p) is tuple:
            symmetry.append({i + 1: x for i, x in enumerate(p)})
    if has_liveness:
        raise TlaError("SYMMETRY together with liveness PROPERTY is unsupported (TLC may also miss "
                       "violations in this case)", cfg.path, cfg.symmetry.line, 1, kind="unsupported")
    return symmetry


def _no_steps(c: Ctx, e: dict[str, Value]) -> Iterator[str | None]:
    return iter(())


def _constant_false(fn: Any) -> bool:
    """True when a constant-level invariant evaluates to FALSE (an evaluation error is left to the
    search, which reports it located)."""
    try:
        return fn(Ctx(None, None), EMPTY) is False
    except EvalError:
        return False


def _has_prime(node: Any) -> bool:
    if node is None or isinstance(node, str | int | bool):
        return False
    if isinstance(node, list) or (isinstance(node, tuple) and not hasattr(node, "_fields")):
        return any(_has_prime(x) for x in node)
    if getattr(node, "operator", None) in ("'", "UNCHANGED"):
        return True
    fields = [f for f in getattr(node, "_fields", ()) if f not in ("symbol", "start", "end")]
    return any(_has_prime(getattr(node, f)) for f in fields)


class _Stop(Exception):
    def __init__(self, result: str, violated: str | None, trace_idx: list[int], extra: State | None,
                 extra_label: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.result, self.violated, self.trace_idx = result, violated, trace_idx
        self.extra, self.extra_label, self.message, self.exit_code = extra, extra_label, message, exit_code


class Checker:
    def __init__(
        self, model: Compiled, monitor: Monitor | None = None, max_states: int | None = None, workers: int = 1,
        heap: SearchHeap | None = None,
    ) -> None:
        self.m = model
        self.heap = heap
        self.workers = workers
        # Successors computed ahead by worker processes, in queue order.
        self.pool: parallel.Pool | None = None
        self.batches: deque[parallel.Batch] = deque()
        # Each stored state's fingerprint key, where it is not the state itself (SYMMETRY).
        self.keys: list[Any] | None = [] if model.symmetry else None
        # Per variable, the one stored object of each of its distinct values (see visit).
        self.pools: list[dict[Value, Value]] = [{} for _ in model.variables]
        self.monitor = monitor if monitor is not None else Monitor()
        self.max_states = max_states
        self.canon = Canonicaliser(model.symmetry)
        self.states: list[State] = []
        self.parent: list[int] = []
        self.label: list[str] = []
        self.depth: list[int] = []
        self.seen: dict[Any, int] = {}
        self.generated = 0
        self.implied = StepOutcomes(first_violated(model.implied_actions), model.implied_side_effects)
        self.suffix = StepOutcomes(all_hold(model.suffix_actions), model.suffix_side_effects)
        self.queue: deque[int] = deque()
        self.succ: list[list[tuple[int, str]]] | None = [] if model.liveness or model.fair_claims else None
        self.max_depth = 0
        self.init_ids: list[int] = []
        # Edges (i, j) that satisfy every <>[][A]_v conjunct of the SPECIFICATION.
        self.suffix_edges: set[tuple[int, int]] = set()
        self.current = -1
        # Per fairness condition of the SPECIFICATION, filled as each state is expanded: whether
        # <<A>>_v is enabled in it, the explored edges that are <<A>>_v steps, and whether
        # evaluating it failed somewhere (the liveness pass then evaluates it again, in order,
        # and reports the error).
        fair_graph = self.succ is not None and bool(model.fairness)
        self.fair_conditions = list(zip(model.fairness, model.fairness_all_vars or [False] * len(model.fairness),
                                        strict=True)) if fair_graph else []
        self.fair_enabled: list[list[bool]] = [[] for _ in self.fair_conditions]
        self.fair_taken: list[set[tuple[int, int]]] = [set() for _ in self.fair_conditions]
        self.fair_failed = [False] * len(self.fair_conditions)
        # The successors of the fairness actions met while enumerating Next from a state, kept
        # until the fairness conditions are evaluated on that state.
        self.memos: list[list[Any]] = []
        if model.fairness and fair_graph:
            for op in model.fairness_ops:
                box = model.comp.act_memos.get(op)
                if box is not None:
                    box[0], box[1] = {}, True
                    self.memos.append(box)

    def release_memos(self) -> None:
        for box in self.memos:
            box[0], box[1] = None, False
        self.memos = []

    def fair_steps(self, s: State, lookup: dict[Any, int]) -> list[tuple[bool, list[int]] | None]:
        """Per fairness condition: whether ``<<A>>_v`` is enabled in ``s`` and ``lookup``'s values
        of the ``<<A>>_v`` successors it holds; None where evaluating A failed. A's successors
        come from the memos that enumerating Next from ``s`` just filled, which are then emptied."""
        nv = len(self.m.variables)
        out: list[tuple[bool, list[int]] | None] = []
        for (_kind, gen, v, vp, env), whole in self.fair_conditions:
            try:
                out.append(_enabled_steps(gen, v, vp, env, whole, s, nv, lookup))
            except Exception:  # the liveness pass evaluates it again and reports it
                out.append(None)
        for box in self.memos:
            box[0].clear()
        return out

    def record_fair_steps(
        self, i: int, steps: list[tuple[bool, list[int]] | None], targets: list[int] | None
    ) -> None:
        """Store :meth:`fair_steps` of state ``i``, whose values are state indices, or (from a
        worker process) positions in ``targets``, the indices of its successor records (-1: none)."""
        for k, info in enumerate(steps):
            if info is None:
                self.fair_failed[k] = True
                self.fair_enabled[k].append(False)
                continue
            self.fair_enabled[k].append(info[0])
            taken = self.fair_taken[k]
            for p in info[1]:
                j = targets[p] if targets is not None else p
                if j >= 0:
                    taken.add((i, j))

    # ---- helpers -----------------------------------------------------------------------------
    def key(self, t: State) -> Any:
        if not self.m.symmetry:
            return t
        return self.canon(t)

    def path_to(self, i: int) -> list[int]:
        out = [i]
        while self.parent[out[-1]] >= 0:
            out.append(self.parent[out[-1]])
        return out[::-1]

    def check_state(self, t: State, at: int, label: str, stored: bool) -> None:
        """Check the invariants on t; ``at`` is t's index when stored, else its parent's (-1: none).
        The trace is only built on a violation."""
        c = Ctx(t, None)
        for name, fn, env in self.m.invariants:
            try:
                ok = fn(c, env)
            except EvalError as exc:
                trace_idx = self.path_to(at) if at >= 0 else []
                raise _Stop("error", name, trace_idx, None if stored else t, label,
                            f"error evaluating invariant {name}: {exc}", EXIT_FAILURE_SPEC_EVAL) from exc
            if ok is not True:
                trace_idx = self.path_to(at) if at >= 0 else []
                raise _Stop("safety failure", name, trace_idx, None if stored else t, label,
                            f"Invariant {name} is violated.", EXIT_VIOLATION_SAFETY)

    def check_limit(self) -> None:
        """Stop at ``max_states`` distinct states (initial ones included)."""
        if self.max_states is not None and len(self.states) >= self.max_states:
            raise _Stop("error", None, [], None, "",
                        f"stopped after max_states={self.max_states} distinct states; "
                        "no violation found so far (the check is incomplete)", EXIT_ERROR_STATESPACE_TOO_LARGE)

    def in_model(self, t: State, c_step: Ctx | None) -> bool:
        if self.m.constraints:
            c = Ctx(t, None)
            for fn in self.m.constraints:
                if not as_bool(fn(c, EMPTY), "CONSTRAINT"):
                    return False
        if c_step is not None and self.m.action_constraints:
            for fn in self.m.action_constraints:
                if not as_bool(fn(c_step, EMPTY), "ACTION_CONSTRAINT"):
                    return False
        return True

    def add(self, t: State, key: Any, parent: int, label: str, depth: int) -> int:
        i = len(self.states)
        self.states.append(t)
        self.parent.append(parent)
        self.label.append(label)
        self.depth.append(depth)
        self.seen[key] = i
        if self.keys is not None:
            self.keys.append(key)
        if self.succ is not None:
            self.succ.append([])
        if depth > self.max_depth:
            self.max_depth = depth
        self.queue.append(i)
        return i

    # ---- the search --------------------------------------------------------------------------
    def run(self) -> None:
        self.initial_states()
        self.pool = (parallel.Pool(self.expansion(), self.workers - 1, self.keys, _OWN_SHARE)
                     if self.workers > 1 else None)
        self.search()

    def initial_states(self) -> None:
        """Store and check the initial states (the init properties too) that satisfy the constraints."""
        nv = len(self.m.variables)
        variables = self.m.variables
        c = Ctx(None, [UNSET] * nv)
        for lab in self.m.init(c, EMPTY):
            t = tuple(c.n)  # type: ignore[arg-type]
            if any(v is UNSET for v in t):
                missing = variables[t.index(UNSET)]
                raise _Stop("error", None, [], None, "", f"initial state does not assign {missing}",
                            EXIT_FAILURE_SPEC_EVAL)
            self.generated += 1
            if self.heap is not None and not self.generated & 1023:
                self.heap.step()
            del lab
            for name, fn, env in self.m.init_props:
                if fn(Ctx(t, None), env) is not True:
                    raise _Stop("safety failure", name, [], t, "Initial predicate",
                                f"Property {name} is violated by the initial state.", EXIT_VIOLATION_SAFETY)
            if self.in_model(t, None):
                k = self.key(t)
                if k in self.seen:
                    continue
                i = self.add(t, k, -1, "Initial predicate", 1)
                self.init_ids.append(i)
                self.check_state(t, i, "Initial predicate", True)
                self.check_limit()
            else:
                self.check_state(t, -1, "Initial predicate", False)

    def search(self) -> None:
        """Expand the queued states in order, here or from the worker processes' records."""
        nv = len(self.m.variables)
        monitor = self.monitor
        heap = self.heap
        pool = self.pool
        expanded = 0
        while self.queue:
            i = self.queue.popleft()
            s = self.states[i]
            d = self.depth[i]
            self.current = i  # for the trace of an evaluation error in Next
            c = Ctx(s, [UNSET] * nv)
            taken = self.worker_records(pool, i) if pool is not None else None
            any_succ = (self.expand(i, s, d, c) if pool is None or taken is None
                        else self.replay(pool, i, d, c, *taken))
            if not any_succ and self.m.check_deadlock:
                raise _Stop("deadlock failure", "Deadlock", self.path_to(i), None, "", "Deadlock reached.",
                            EXIT_VIOLATION_DEADLOCK)
            expanded += 1
            if not expanded & 255:
                if heap is not None:
                    heap.step()
                monitor.tick(self.generated, len(self.states), len(self.queue), d)

    def worker_records(self, pool: parallel.Pool, i: int) -> tuple[parallel.Successors, list[int]] | None:
        """The successor records of state ``i`` from the worker process whose run holds it, and the
        indices of the successors that run stored so far; None when this process expands ``i``."""
        self.hand_out(pool, i)
        batches = self.batches
        if not batches or batches[0].start > i:
            return None
        batch = batches[0]
        records = batch.take(i)
        if i == batch.end - 1:
            batches.popleft()
        return records, batch.stored

    def expand(self, i: int, s: State, d: int, c: Ctx) -> bool:
        """Generate and visit the successors of state ``i`` (``s``, at depth ``d``) in this process;
        whether it has any."""
        visit = self.visit
        unset_id = id(UNSET)
        fair = bool(self.fair_conditions)
        # With fairness conditions: each successor, as generated, and its index. The fairness
        # actions' successors are replayed from the memos that Next's enumeration filled, so they
        # hold the same objects and are found by identity.
        found: dict[State, int] = {}
        any_succ = False
        for lab in self.m.next(c, EMPTY):
            t = tuple(c.n)  # type: ignore[arg-type]
            # Identity test via id(): `UNSET in t` would call __eq__ on every value.
            if unset_id in map(id, t):
                raise self.unassigned(i, t.index(UNSET), lab)
            any_succ = True
            self.generated += 1
            j = visit(i, d, c, t, lab or "Next", None)
            if fair:
                found.setdefault(t, j)
        if fair:
            self.record_fair_steps(i, self.fair_steps(s, found), None)
        return any_succ

    def replay(
        self, pool: parallel.Pool, i: int, d: int, c: Ctx, records: parallel.Successors, stored: list[int]
    ) -> bool:
        """Take a worker process's successor records of state ``i`` (at depth ``d``) in order;
        ``stored`` indexes the successors its batch stored so far. Whether ``i`` has any successor."""
        succ = self.succ
        suffix_edges = self.suffix_edges
        join = pool.expansion.values.join
        any_succ = False
        targets: list[int] = []  # per successor record, the successor's index (-1: not stored)
        for rec in records:
            kind = rec[0]
            if kind == parallel.KNOWN or kind == parallel.AGAIN:
                any_succ = True
                self.generated += 1
                j = rec[2] if kind == parallel.KNOWN else stored[rec[2]]
                targets.append(j)
                if succ is not None:
                    succ[i].append((j, rec[1] or "Next"))
                    if rec[3]:
                        suffix_edges.add((i, j))
            elif kind == parallel.OUTSIDE:
                any_succ = True
                self.generated += 1
                targets.append(-1)
            elif kind == parallel.FULL:
                any_succ = True
                self.generated += 1
                t = join(rec[2], rec[3])
                c.n = list(t)
                j = self.visit(i, d, c, t, rec[1] or "Next", rec[4])
                stored.append(j)
                targets.append(j)
            elif kind == parallel.FAIR:
                self.record_fair_steps(i, rec[1], targets)
            elif kind == parallel.UNASSIGNED:
                raise self.unassigned(i, rec[2], rec[1])
            else:
                raise rec[1]
        return any_succ

    def hand_out(self, pool: parallel.Pool, i: int) -> None:
        """Keep each of the ``workers - 1`` worker processes up to ``parallel.DEPTH`` runs of the
        queued states after ``i`` ahead (the queue holds the states i+1, i+2, ... in order), of up
        to ``_PARALLEL_BATCH`` states; this process expands the states before each run itself
        (``pool.share``)."""
        least = max(16, _PARALLEL_BATCH // 128)
        while len(self.batches) < pool.size * parallel.DEPTH:
            start = max(self.batches[-1].end if self.batches else 0, i + 1)
            waiting = len(self.states) - start
            size = min(_PARALLEL_BATCH, max(least, waiting // self.workers))
            # Before each run, a share of states this process expands itself (it also replays
            # the records of the runs).
            start += size * pool.share // 100
            waiting = len(self.states) - start
            if waiting < least:
                return
            worker = pool.idle()
            if worker is None:
                return
            self.batches.append(pool.submit(worker, start, start + min(size, waiting)))

    def unassigned(self, i: int, var: int, lab: str | None) -> _Stop:
        return _Stop("error", None, self.path_to(i), None, "",
                     f"successor state is not completely specified: {self.m.variables[var]}' is not assigned "
                     f"by action {lab or 'Next'}", EXIT_FAILURE_SPEC_EVAL)

    def visit(self, i: int, d: int, c: Ctx, t: State, label: str, key: Any) -> int:
        """Process the successor ``t`` of state ``i`` (depth ``d``) in TLC's order: constraints,
        then invariants on unseen states, then implied actions on every step, then (in model,
        unseen) enqueue. ``key`` comes from a worker process that already computed it (None:
        compute it). Returns t's index (-1: out of the model)."""
        m = self.m
        if (m.constraints or m.action_constraints) and not self.in_model(t, c):
            self.check_state(t, i, label, False)
            j = -1
        else:
            symmetric = bool(m.symmetry)
            k = t if not symmetric else key if key is not None else self.key(t)
            j = self.seen.get(k, -1)
            if j < 0:
                if not symmetric:
                    # Store one object per distinct value of a variable: later lookups keyed by
                    # state values (fingerprints, state_memo) then compare by identity instead of
                    # structurally.
                    s = self.states[i]
                    t = k = tuple([v if v is sv else pool.setdefault(v, v)
                                   for v, sv, pool in zip(t, s, self.pools, strict=True)])
                j = self.add(t, k, i, label, d + 1)
                if m.invariants:
                    self.check_state(t, j, label, True)
                self.check_limit()
        if m.implied_actions:
            name = self.implied.of(self.states[i], c, t)
            if name is not None:
                # A safety property, but TLC exits with its status for temporal properties.
                raise _Stop("safety failure", name, self.path_to(i), t, label,
                            f"Action property {name} is violated.", EXIT_VIOLATION_LIVENESS)
        if self.succ is not None and j >= 0:
            self.succ[i].append((j, label))
            if m.suffix_actions and self.suffix.of(self.states[i], c, t):
                self.suffix_edges.add((i, j))
        return j

    def expansion(self) -> parallel.Expansion:
        """The checker's tables as worker processes see them (see :mod:`parallel`)."""
        m = self.m
        c = Ctx(None, None)

        def invariants_hold(t: State) -> bool:
            c.s = t
            return all(fn(c, env) is True for _name, fn, env in m.invariants)

        constrained = bool(m.constraints or m.action_constraints)
        return parallel.Expansion(
            m.next, self.states, self.seen, len(m.variables), self.key if m.symmetry else None,
            self.in_model if constrained else None, invariants_hold,
            self.implied if m.implied_actions else None, self.suffix if m.suffix_actions else None,
            self.memos, self.fair_steps if self.fair_conditions else None,
        )

    # ---- liveness ----------------------------------------------------------------------------
    def liveness(self) -> tuple[_Stop, int] | None:
        """Check the liveness properties on the explored graph: a violation and the index (in its
        trace) of the state the lasso loops back to, or None."""
        assert self.succ is not None
        n = len(self.states)
        fair: list[FairInfo] = []
        # Without symmetry (liveness excludes it) the search's fingerprint table is the state index.
        index = self.seen if not self.m.symmetry else {t: k for k, t in enumerate(self.states)}
        self.release_memos()
        for k, ((kind, gen, v, vp, env), whole) in enumerate(self.fair_conditions):
            if self.fair_failed[k]:
                # Evaluating A failed on some state: evaluate it again on every state in order,
                # which raises the error at the first state where it fails.
                fair.append(FairInfo(kind, *self.enabled_and_taken(gen, v, vp, env, whole, index)))
            else:
                fair.append(FairInfo(kind, self.fair_enabled[k], self.fair_taken[k]))
        cycle_succ = None
        if self.m.suffix_actions:
            cycle_succ = [[(b, lab) for b, lab in out if (a, b) in self.suffix_edges or a == b]
                          for a, out in enumerate(self.succ)]
        search = LivenessSearch(self.succ, fair, cycle_succ)
        everything = set(range(n))
        for claim in self.m.fair_claims:
            found = self.fair_claim_violation(claim, fair, index)
            if found is not None:
                return self.lasso(found, claim.name)
        for live in self.m.liveness:
            name, kind, env = live.name, live.kind, live.env
            if kind == "[]<>step":
                # A fair cycle without <<A>>_v steps violates []<><<A>>_v.
                steps = self.edges_where(live.p, env)
                cycle_succ = [[(b, lab) for b, lab in out if (a, b) not in steps] for a, out in enumerate(self.succ)]
                found = LivenessSearch(self.succ, fair, cycle_succ).search(sorted(everything), everything, None,
                                                                           self.depth)
                if found is not None:
                    return self.lasso(found, name)
                continue
            pv = self.holds_in_each(live.p, env)
            qv = self.holds_in_each(live.q, env) if live.q is not None else None
            inits = self.init_ids
            within = everything
            if live.premise is not None:
                pre, penv = live.premise
                inits = [i for i in inits if pre(Ctx(self.states[i], None), penv) is True]
                within = reachable(self.succ, inits)
            if kind == "[]":
                bad = self.reach_violation(inits, pv)
                if bad is not None:
                    return _Stop("liveness failure", name, bad, None, "", f"Temporal property {name} is violated.",
                                 EXIT_VIOLATION_LIVENESS), len(bad) - 1
                continue
            if kind == "<>":
                region = {i for i in within if not pv[i]}
                found = search.search([i for i in inits if not pv[i]], region, None, self.depth)
            elif kind == "[]<>":
                region = {i for i in within if not pv[i]}
                found = search.search(sorted(region), region, None, self.depth)
            elif kind == "<>[]":
                must = {i for i in within if not pv[i]}
                found = search.search(sorted(within), within, must, self.depth)
            else:
                assert qv is not None
                region = {i for i in within if not qv[i]}
                found = search.search([i for i in sorted(within) if pv[i] and not qv[i]], region, None, self.depth)
            if found is None:
                continue
            return self.lasso(found, name)
        return None

    def holds_in_each(self, pred: Pred, env: dict[str, Value]) -> list[bool]:
        """Per stored state, whether ``pred`` holds in it."""
        c = Ctx(None, None)
        out = []
        for s in self.states:
            c.s = s
            out.append(pred(c, env) is True)
        return out

    def lasso(self, found: tuple[int, list[int], list[int]], name: str) -> tuple[_Stop, int]:
        """The counterexample of a violated temporal property: a path to a cycle."""
        s, to_comp, cycle = found
        idx = self.path_to(s) + to_comp[1:]
        loop = len(idx) - 1
        if len(cycle) > 1:
            idx += cycle[1:-1]
        return _Stop("liveness failure", name, idx, None, "", f"Temporal property {name} is violated.",
                     EXIT_VIOLATION_LIVENESS), loop

    def enabled_and_taken(
        self, gen: Gen, v: Pred, vp: Pred, env: dict[str, Value], whole: bool, index: dict[Any, int]
    ) -> tuple[list[bool], set[tuple[int, int]]]:
        """Per state whether ``<<A>>_v`` is enabled, and the explored edges that are ``<<A>>_v``
        steps (one enumeration of A per state gives both)."""
        nv = len(self.m.variables)
        enabled = []
        taken: set[tuple[int, int]] = set()
        for a, s in enumerate(self.states):
            # Only explored edges matter, and A's successors that leave variables unassigned are
            # matched against each candidate (see _enabled_steps): s's successors, not all states.
            lookup = index if self.succ is None else {self.states[b]: b for b, _lab in self.succ[a]}
            en, targets = _enabled_steps(gen, v, vp, env, whole, s, nv, lookup)
            enabled.append(en)
            taken.update((a, b) for b in targets)
        return enabled, taken

    def edges_where(self, step: Pred, env: dict[str, Value]) -> set[tuple[int, int]]:
        """The explored edges (a, b) on which the action ``step`` holds."""
        assert self.succ is not None
        out: set[tuple[int, int]] = set()
        for a, succ in enumerate(self.succ):
            s = self.states[a]
            for b, _lab in succ:
                if step(Ctx(s, list(self.states[b])), env) is True:
                    out.add((a, b))
        return out

    def enabled_on_edges(self, claim: FairClaim) -> tuple[list[bool], set[tuple[int, int]]]:
        """``<<A>>_v`` on the explored edges, and ENABLED as "some explored successor is an
        ``<<A>>_v`` step" (A is a refinement's action over a substituted state function)."""
        taken = {(a, b) for a, b in self.edges_where(claim.step, claim.env)
                 if claim.vp(Ctx(self.states[a], list(self.states[b])), claim.env)
                 != claim.v(Ctx(self.states[a], None), claim.env)}
        enabled = [False] * len(self.states)
        for a, _b in taken:
            enabled[a] = True
        return enabled, taken

    def fair_claim_violation(
        self, claim: FairClaim, fair: list[FairInfo], index: dict[Any, int]
    ) -> tuple[int, list[int], list[int]] | None:
        """A fair behaviour ending in a cycle that violates ``WF_v(A)``/``SF_v(A)`` of a PROPERTY."""
        assert self.succ is not None
        try:
            enabled, taken = self.enabled_and_taken(claim.action, claim.v, claim.vp, claim.env, False, index)
        except EvalError:
            enabled, taken = self.enabled_on_edges(claim)
        # The cycle may not take an <<A>>_v step.
        cycle_succ = [[(b, lab) for b, lab in out if (a, b) not in taken] for a, out in enumerate(self.succ)]
        search = LivenessSearch(self.succ, fair, cycle_succ)
        on = {i for i, en in enumerate(enabled) if en}
        if claim.kind == "WF":
            return search.search(sorted(on), on, None, self.depth)  # enabled all along the cycle
        everything = set(range(len(self.states)))
        return search.search(sorted(everything), everything, on, self.depth)  # enabled somewhere on it

    def reach_violation(self, starts: list[int], ok: list[bool]) -> list[int] | None:
        """A shortest path in the state graph from one of ``starts`` to a state where ``ok`` is
        false (``P => []Q`` over the behaviours starting in ``starts``), or None."""
        assert self.succ is not None
        parent: dict[int, int] = {s: -1 for s in starts}
        queue = deque(starts)
        while queue:
            a = queue.popleft()
            if not ok[a]:
                path = [a]
                while parent[path[-1]] >= 0:
                    path.append(parent[path[-1]])
                return path[::-1]
            for b, _lab in self.succ[a]:
                if b not in parent:
                    parent[b] = a
                    queue.append(b)
        return None

    def edge_label(self, a: int, b: int) -> str:
        assert self.succ is not None
        for j, lab in self.succ[a]:
            if j == b:
                return lab
        return self.label[b]


def _enabled_steps(
    gen: Gen, v: Pred, vp: Pred, env: dict[str, Value], whole: bool, s: State, nv: int, lookup: dict[Any, int]
) -> tuple[bool, list[int]]:
    """Whether ``<<A>>_v`` is enabled in ``s``, and ``lookup``'s values of the ``<<A>>_v``
    successors of ``s`` that it holds (one enumeration of A gives both)."""
    c = Ctx(s, [UNSET] * nv)
    en = False
    targets: list[int] = []
    if whole:
        # v is the tuple of all variables: <<A>>_v is a step to a different state.
        unset_id = id(UNSET)
        for _ in gen(c, env):
            t = tuple(c.n)  # type: ignore[arg-type]
            if unset_id in map(id, t):
                vp(c, env)  # reports the unassigned variable like the general case
            if t != s:
                en = True
                b = lookup.get(t)
                if b is not None:
                    targets.append(b)
    else:
        vs = v(c, env)
        for _ in gen(c, env):
            if vp(c, env) != vs:  # then the successor differs from s
                en = True
                t = tuple(c.n)  # type: ignore[arg-type]
                b = lookup.get(t)
                if b is not None:
                    targets.append(b)
                elif any(x is UNSET for x in t):
                    # A leaves variables outside v open (a refinement's action does not mention
                    # the implementation's other variables): every successor that agrees on the
                    # variables A assigns is an <<A>>_v step.
                    targets.extend(b for u, b in lookup.items()
                                   if all(x is UNSET or x == y for x, y in zip(t, u, strict=True)))
    return en, targets


def _trace(checker: Checker, stop: _Stop, lasso: bool) -> list[TraceStep]:
    variables = checker.m.variables
    steps: list[TraceStep] = []
    prev = None
    for k, i in enumerate(stop.trace_idx):
        if k == 0:
            label = "Initial predicate"
        elif lasso and checker.succ is not None:
            label = checker.edge_label(prev, i)  # type: ignore[arg-type]
        else:
            label = checker.label[i]
        steps.append(TraceStep(label, {v: render(x) for v, x in zip(variables, checker.states[i], strict=True)}))
        prev = i
    if stop.extra is not None:
        label = stop.extra_label if steps else "Initial predicate"
        steps.append(TraceStep(label, {v: render(x) for v, x in zip(variables, stop.extra, strict=True)}))
    return steps


_KIND_EXIT = {
    "parse": EXIT_ERROR_SPEC_PARSE,
    "semantic": EXIT_ERROR_SPEC_PARSE,
    "unsupported": EXIT_ERROR_SPEC_PARSE,
    "config": EXIT_ERROR_CONFIG_PARSE,
    "eval": EXIT_FAILURE_SPEC_EVAL,
    "assume": EXIT_VIOLATION_ASSUMPTION,
    # Undecodable (binary, non-UTF-8) input: TLC has no code for it; the CLI's usage error.
    "input": 2,
}


def check_model(
    spec_path: Path,
    config_path: Path | None = None,
    *,
    progress: bool = False,
    max_states: int | None = None,
    max_memory_mb: float | None = DEFAULT_MAX_MEMORY_MB,
    workers: int = 1,
) -> CheckResult:
    """Model-check ``spec_path`` under ``config_path`` (default: SPEC.cfg beside the spec).

    Returns a :class:`CheckResult` with ``engine="embedded"`` and TLC's verdicts, counters and
    exit codes. Parse errors, unsupported constructs and configuration errors are returned as
    ``result="error"`` with the located message (call :func:`load_model` to get them raised as
    :class:`TlaError` instead). ``progress=True`` prints TLC's header and a progress line every
    10 s on stderr. The check stops (exit 152) past ``max_states`` distinct states or
    ``max_memory_mb`` MiB of memory, and on Ctrl-C (exit 130), with the summary so far.

    The search runs in a thread with a large stack, so deeply recursive definitions
    (``Sum(10000)``) evaluate without Python's default recursion limit. With ``workers`` > 1,
    forked processes generate the successors of batches of queued states (POSIX only); the
    results, counters and traces are exactly those of the single-process search.
    """
    monitor = Monitor(sys.stderr if progress else None, max_memory_mb)
    box: list[CheckResult | BaseException] = []
    done = threading.Event()

    def work() -> None:
        try:
            box.append(_check(Path(spec_path), config_path, monitor, max_states, workers))
        except BaseException as exc:  # handed to the calling thread, which re-raises it
            box.append(exc)
        finally:
            done.set()

    previous_limit = sys.getrecursionlimit()
    previous_stack = threading.stack_size(_STACK_BYTES)
    try:
        sys.setrecursionlimit(max(previous_limit, _RECURSION_LIMIT))
        worker = threading.Thread(target=work, name="tla-check", daemon=True)
        worker.start()
    finally:
        threading.stack_size(previous_stack)
    try:
        # An Event, not Thread.join: a KeyboardInterrupt inside join() can mark a running
        # thread as finished.
        while not done.is_set():
            try:
                done.wait(0.25)
            except KeyboardInterrupt:
                monitor.interrupt()  # the search stops at its next tick and reports what it found
    finally:
        sys.setrecursionlimit(previous_limit)
    outcome = box[0]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


# With workers > 1: how many queued states one round of worker processes expands.
_PARALLEL_BATCH = 4096
# With workers > 1: this process expands itself the queued states before each worker run, about
# this percentage of the run's length at first (parallel.Pool.balance adjusts it after each run;
# it also replays every successor record). On KVOffload.cfg, with fixed shares on an idle machine,
# the checker waited 0.2 s for the worker's records at 50 (equal CPU time), 0.04 s at 75, and the
# worker idled at 100.
_OWN_SHARE = 75
# Deep recursion (RECURSIVE operators, recursive functions) runs on a 512 MiB thread stack.
_STACK_BYTES = 512 * 1024 * 1024
_RECURSION_LIMIT = 400_000


def _check(
    spec_path: Path, config_path: Path | None, monitor: Monitor, max_states: int | None, workers: int = 1
) -> CheckResult:
    config_path = Path(config_path) if config_path is not None else spec_path.with_suffix(".cfg")
    start = time.monotonic()
    base = {"engine": "embedded", "spec": str(spec_path), "config": str(config_path)}
    model = _load_or_error(spec_path, config_path, start, base)
    if isinstance(model, CheckResult):
        return model
    if not model.has_behaviour:
        return CheckResult(result="success", seconds=time.monotonic() - start,
                           message="No SPECIFICATION or INIT/NEXT in the config: the constants and ASSUMEs "
                                   "were evaluated, no state was explored.\n0 states generated, 0 distinct "
                                   "states found, 0 states left on queue.", **base)  # type: ignore[arg-type]
    monitor.header(str(spec_path), str(config_path))
    heap = SearchHeap()
    checker = Checker(model, monitor=monitor, max_states=max_states, workers=workers, heap=heap)
    stop, lasso_loop = _search(checker, heap)
    checker.release_memos()
    result = CheckResult(
        distinct_states=len(checker.states),
        states_generated=checker.generated,
        states_left_on_queue=len(checker.queue),
        depth=checker.max_depth,
        seconds=time.monotonic() - start,
        result="success",
        **base,  # type: ignore[arg-type]
    )
    _report(result, checker, stop, lasso_loop)
    return result


def _load_or_error(
    spec_path: Path, config_path: Path, start: float, base: dict[str, str]
) -> Compiled | CheckResult:
    """The compiled model, or the error result that says why there is none."""
    try:
        return load_model(spec_path, config_path)
    except TlaError as exc:
        return CheckResult(result="error", message=str(exc), exit_code=_KIND_EXIT.get(exc.kind, 255),
                           seconds=time.monotonic() - start, **base)  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        # A construct the compiler does not expect: say so instead of a traceback.
        return CheckResult(result="error", message=f"{spec_path}:0:0: unsupported construct (internal "
                           f"{type(exc).__name__}: {exc})", exit_code=EXIT_ERROR_SPEC_PARSE,
                           seconds=time.monotonic() - start, **base)  # type: ignore[arg-type]
    except RecursionError:
        return CheckResult(result="error", message=f"{spec_path}:0:0: expression nested too deeply to compile",
                           exit_code=EXIT_ERROR_SPEC_PARSE, seconds=time.monotonic() - start,
                           **base)  # type: ignore[arg-type]


def _search(checker: Checker, heap: SearchHeap) -> tuple[_Stop | None, int | None]:
    """Run the search, then the liveness checks: why it stopped (None: nothing found) and, for a
    liveness counterexample, the index in its trace where the cycle starts."""
    model = checker.m
    stop: _Stop | None = None
    lasso_loop: int | None = None
    try:
        with heap:
            try:
                checker.run()
            except _Stop as s:
                stop = s
            finally:
                if checker.pool is not None:
                    checker.pool.close()
            heap.step()
            if stop is None and (model.liveness or model.fair_claims):
                found = checker.liveness()
                if found is not None:
                    stop, lasso_loop = found
    except Halt as exc:
        stop = _Stop("error", None, [], None, "", exc.message, exc.exit_code)
    except EvalError as exc:
        where = checker.path_to(checker.current) if checker.current >= 0 else []
        stop = _Stop("error", None, where, None, "", f"evaluation error: {exc}", EXIT_FAILURE_SPEC_EVAL)
    except RecursionError:
        where = checker.path_to(checker.current) if checker.current >= 0 else []
        stop = _Stop("error", None, where, None, "",
                     f"evaluation error: recursion deeper than {_RECURSION_LIMIT:,} Python frames "
                     "(a RECURSIVE operator or recursive function without a base case?)", EXIT_FAILURE_SPEC_EVAL)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
        # A value the evaluator did not expect (EagerLetOperator crashed so): one line, no traceback.
        where = checker.path_to(checker.current) if checker.current >= 0 else []
        stop = _Stop("error", None, where, None, "", f"evaluation error: {type(exc).__name__}: {exc}",
                     EXIT_FAILURE_SPEC_EVAL)
    return stop, lasso_loop


def _report(result: CheckResult, checker: Checker, stop: _Stop | None, lasso_loop: int | None) -> None:
    """Fill in ``result``'s verdict, message and trace from why the search stopped."""
    summary = (f"{checker.generated} states generated, {len(checker.states)} distinct states found, "
               f"{len(checker.queue)} states left on queue.")
    if stop is None or stop.result == "success":
        warning = ""
        if not checker.states:
            # TLC warns too: a spec without initial states satisfies every property vacuously.
            warning = "Warning: no state satisfies the initial predicate, so nothing was checked.\n"
            checker.monitor.say(warning.strip())
        result.message = warning + (stop.message + "\n" if stop is not None else "") + \
            "Model checking completed. No error has been found.\n" + summary + \
            f"\nThe depth of the complete state graph search is {checker.max_depth}."
        return
    result.result = stop.result  # type: ignore[assignment]
    result.violated = stop.violated
    result.exit_code = stop.exit_code
    result.trace = _trace(checker, stop, lasso_loop is not None) if (stop.trace_idx or stop.extra) else []
    result.loop_back_to = lasso_loop
    result.message = f"Error: {stop.message}\n{summary}"


def load_model(spec_path: Path, config_path: Path | None = None) -> Compiled:
    """Parse and compile a spec and its model; raises :class:`TlaError` on any static problem."""
    spec_path = Path(spec_path)
    config_path = Path(config_path) if config_path is not None else spec_path.with_suffix(".cfg")
    if not spec_path.exists():
        raise TlaError("spec file not found", str(spec_path), 0, 0, kind="parse")
    if not config_path.exists():
        raise TlaError("config file not found", str(config_path), 0, 0, kind="config")
    cfg = parse_config(config_path)
    rank_model_values(cfg.model_values)
    forget_sortkeys()
    return compile_model(spec_path, cfg)

