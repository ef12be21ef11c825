"""A RECURSIVE operator that walks a set by CHOOSE, evaluated as a loop.

    Sum(f, S) == IF S = {} THEN 0
                 ELSE LET x == CHOOSE x \\in S : TRUE IN f[x] + Sum(f, S \\ {x})

is the commonest recursion of TLA+ specs (sums, unions and other folds over a set). Evaluated as
written, each element costs a call, a LET, a CHOOSE (a scan of the rest of the set for its least
element) and a new set ``S \\ {x}``: quadratic in the set's size, and most of GameOfLife.cfg's
time. The same value comes from one canonical sort and a loop. The loop evaluates the terms in
the recursion's own order, so an evaluation error is the same one too:

- ``term(x) op Op(.., S \\ {x})``: every term, least element first, then the base, then the
  operator from the greatest element down;
- ``Op(.., S \\ {x}) op term(x)``: the base, then each term and the operator from the greatest
  element down.

Recognised (:func:`match`): the body is ``IF S = {} THEN base ELSE LET x == CHOOSE y \\in S :
TRUE IN a op b`` (parentheses anywhere), where ``S`` is a parameter, ``op`` a standard binary
operator, one of ``a``/``b`` the operator itself called with its parameters unchanged except
``S \\ {x}`` for ``S``, and the other (the term) does not mention ``S`` or the operator. Anything
else, or a call whose ``S`` is not a finite set value, is evaluated as written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .modules import OpDef
from .order import canonical
from .syntax import Ctx, Fun, names_in, tname
from .values import Value


@dataclass(frozen=True)
class SetFold:
    """The parts of a recognised definition (AST nodes)."""

    set_param: str  # S
    element: str  # x, the LET name of the chosen element
    base: Any  # the THEN branch
    term: Any  # the operand that is not the recursive call
    op: str  # the binary operator joining term and recursive call
    term_first: bool  # term op Op(...) (else Op(...) op term)


def _bare(node: Any) -> Any:
    while tname(node) == "Parentheses":
        node = node.expression
    return node


def _name(node: Any) -> str | None:
    """The identifier ``node`` is (an operator application without arguments), else None."""
    node = _bare(node)
    if tname(node) == "OperatorApplication" and not node.arguments:
        return str(node.operator)
    return None


def _binary(node: Any, op: str | None = None) -> tuple[str, Any, Any] | None:
    node = _bare(node)
    if tname(node) != "OperatorApplication" or len(node.arguments or []) != 2:
        return None
    if op is not None and node.operator != op:
        return None
    return str(node.operator), node.arguments[0], node.arguments[1]


def _empty_test(node: Any) -> str | None:
    """``S`` for ``S = {}`` or ``{} = S``."""
    parts = _binary(node, "=")
    if parts is None:
        return None
    _op, a, b = parts
    for name_side, set_side in ((a, b), (b, a)):
        s = _bare(set_side)
        if tname(s) == "SetEnumeration" and not s.items:
            return _name(name_side)
    return None


def _chosen(let: Any, set_param: str) -> str | None:
    """``x`` for ``LET x == CHOOSE y \\in S : TRUE IN ...`` (one definition)."""
    if tname(let) != "Let" or len(let.definitions) != 1:
        return None
    d = let.definitions[0]
    if tname(d) != "OperatorDefinition" or d.arity or d.function:
        return None
    choose = _bare(d.definiens)
    if tname(choose) != "Choose" or isinstance(choose.declaration, list):
        return None
    bound = _binary(choose.declaration, "\\in")
    pred = _bare(choose.predicate)
    if bound is None or _name(bound[1]) is None or _name(bound[2]) != set_param:
        return None
    if tname(pred) != "BooleanLiteral" or pred.value != "TRUE":
        return None
    return str(d.name)


def _is_recursion(node: Any, opdef: OpDef, set_param: str, element: str) -> bool:
    """``Op(p1, .., S \\ {x}, .., pn)``: the parameters unchanged but ``S``."""
    node = _bare(node)
    if tname(node) != "OperatorApplication" or node.operator != opdef.name:
        return False
    args = node.arguments or []
    if len(args) != len(opdef.params):
        return False
    for (param, _arity), arg in zip(opdef.params, args, strict=True):
        if param != set_param:
            if _name(arg) != param:
                return False
            continue
        minus = _binary(arg, "\\")
        if minus is None or _name(minus[1]) != set_param:
            return False
        single = _bare(minus[2])
        if tname(single) != "SetEnumeration" or len(single.items) != 1 or _name(single.items[0]) != element:
            return False
    return True


def match(opdef: OpDef, is_standard_binary: Callable[[str], bool]) -> SetFold | None:
    """The fold ``opdef`` (a RECURSIVE definition) is, or None. ``is_standard_binary(op)``: ``op``
    is a standard binary operator that no definition shadows."""
    body = _bare(opdef.body)
    if tname(body) != "If":
        return None
    set_param = _empty_test(body.predicate)
    if set_param is None or set_param not in {p for p, arity in opdef.params if arity == 0}:
        return None
    let = _bare(body.else_)
    element = _chosen(let, set_param)
    if element is None or element == set_param:
        return None
    parts = _binary(let.expression)
    if parts is None or not is_standard_binary(parts[0]):
        return None
    op, left, right = parts
    if _is_recursion(right, opdef, set_param, element):
        term, term_first = left, True
    elif _is_recursion(left, opdef, set_param, element):
        term, term_first = right, False
    else:
        return None
    if names_in(term) & {set_param, opdef.name}:
        return None
    return SetFold(set_param, element, body.then, term, op, term_first)


def evaluator(fold: SetFold, base: Fun, term: Fun, combine: Callable[[Value, Value], Value],
              as_written: Fun) -> Fun:
    """The body of the definition: ``base`` and ``term`` compiled with the parameters (and, for
    ``term``, the element) bound; ``as_written`` the body compiled as it reads."""
    set_param, element = fold.set_param, fold.element
    empty: frozenset[Value] = frozenset()

    # Each term gets an environment of its own, as each level of the recursion does: a lazy
    # value (a filtered set) may keep reading it after the next term is evaluated.
    if fold.term_first:
        def fold_terms_first(c: Ctx, e: dict[str, Value]) -> Value:
            s = e[set_param]
            if type(s) is not frozenset:
                return as_written(c, e)
            terms = []
            for x in canonical(s):
                e2 = dict(e)
                e2[element] = x
                terms.append(term(c, e2))
            at_base = dict(e)
            at_base[set_param] = empty
            acc = base(c, at_base)
            for v in reversed(terms):
                acc = combine(v, acc)
            return acc

        return fold_terms_first

    def fold_recursion_first(c: Ctx, e: dict[str, Value]) -> Value:
        s = e[set_param]
        if type(s) is not frozenset:
            return as_written(c, e)
        at_base = dict(e)
        at_base[set_param] = empty
        acc = base(c, at_base)
        for x in reversed(canonical(s)):
            e2 = dict(e)
            e2[element] = x
            acc = combine(acc, term(c, e2))
        return acc

    return fold_recursion_first
