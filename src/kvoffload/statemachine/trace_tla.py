"""A TLA+ trace-validation module generated from a recorded trace (``kvoffload trace tla``).

The module holds the trace as a sequence constant and a variable ``i`` indexing it; ``line`` is
the trace file's line number of ``Trace[i]``, so a counterexample names the line it stopped at.
``Next`` consumes line ``i`` only if every check holds for it; once the whole trace is consumed
the model stutters in ``Done``. Each check is an invariant of its own, so a violation names the
check and (through ``line``) the line; a clean run means the whole trace was explained.

Checks generated from the declarations (any number of lifecycles, named by the module:
``TraceRequest``, ``TraceJob``, ``TraceRequestJob``):

- ``DeclaredEdges``: a transition line of a declared lifecycle starts in the instance's current
  state (the initial state on its first line, never after a terminal one), follows a declared
  edge, and satisfies the edge's guard, evaluated on the variables the line recorded (each
  :class:`GuardDecl` is ``variable op value``; a line that lacks the variable fails the guard);
- ``InOrder``: ``seq`` counts up by one and ``step`` never decreases.

A caller adds checks of its own with :class:`TraceRules` (variables, their updates per line, and
invariants over the current line ``e``), as the product's protocol rules do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvoffload.statemachine.declaration import GuardDecl, LifecycleDeclaration

# The state of an instance before its first line; not a declared state name.
UNSEEN = "__unseen__"
_TLA_OPS = {"==": "=", "!=": "#", "<": "<", "<=": "=<", ">": ">", ">=": ">="}


@dataclass(frozen=True)
class TraceRules:
    """Checks beyond the declarations: TLA+ text over the current line ``e`` and the state.

    ``fields``: the recorded variables the rules read, each with the value that stands for a
    recorded ``null``; ``variables``: ``(name, initial value)``; ``updates``: ``(name, next value)``
    (an expression of ``e`` and the variables); ``invariants``: ``(name, predicate of e)``;
    ``definitions``: operators the others use.
    """

    fields: Mapping[str, Any]
    variables: tuple[tuple[str, str], ...]
    updates: tuple[tuple[str, str], ...]
    invariants: tuple[tuple[str, str], ...]
    definitions: str = ""


def module_name(declarations: Sequence[LifecycleDeclaration]) -> str:
    """``Trace`` followed by each declaration's name: ``TraceRequest``, ``TraceRequestJob``."""
    return "Trace" + "".join(part.capitalize() for d in declarations for part in d.name.split("_"))


def _string(value: str) -> str:
    # TLA+ strings take the same escapes as JSON for the characters an id may hold.
    return json.dumps(value)


def _set(items: Sequence[str] | set[str]) -> str:
    return "{" + ", ".join(items) + "}"


def _value(value: Any, null: Any) -> str:
    if value is None:
        value = null
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return "<<" + ", ".join(_value(item, null) for item in value) + ">>"
    return _string(str(value))


def _guard_expr(guard: GuardDecl) -> str:
    if guard.variable is None:
        return "FALSE"  # a guard without a predicate cannot be decided from a trace
    value = _value(guard.value, 0)
    return f"{_string(guard.variable)} \\in e.recorded /\\ e.{guard.variable} {_TLA_OPS[guard.op]} {value}"


def _record(number: int, record: Mapping[str, Any], fields: Mapping[str, Any]) -> str:
    call = "call" in record and "trigger" not in record
    parts = {
        "line": str(number),
        "seq": str(record.get("seq", -1)),
        "step": str(record.get("step", -1)),
        "object": _string(str(record.get("object", ""))),
        "call": _string(str(record.get("call", ""))) if call else '""',
        "lifecycle": '""' if call else _string(str(record.get("lifecycle", ""))),
        "id": _string(str(record.get("id", ""))),
        "trigger": _string(str(record.get("trigger", ""))),
        "from": _string(str(record.get("from", ""))),
        "to": _string(str(record.get("to", ""))),
        "recorded": _set(sorted(_string(name) for name in fields if name in record)),
    }
    for name, null in fields.items():
        parts[name] = _value(record.get(name, null), null)
    return "[" + ", ".join(f"{key} |-> {value}" for key, value in parts.items()) + "]"


def trace_module(
    records: Sequence[Mapping[str, Any]],
    declarations: Sequence[LifecycleDeclaration],
    line_numbers: Sequence[int] | None = None,
    rules: TraceRules | None = None,
) -> tuple[str, str, str]:
    """``(module name, .tla text, .cfg text)`` checking ``records`` against ``declarations``.

    ``line_numbers``: each record's line in the trace file (default 1, 2, ...).
    """
    numbers = list(line_numbers) if line_numbers is not None else list(range(1, len(records) + 1))
    if len(numbers) != len(records):
        raise ValueError(f"{len(numbers)} line numbers for {len(records)} records")
    name = module_name(declarations)
    fields: dict[str, Any] = {
        d.guard(g).variable: 0 for d in declarations for g in d.guards if d.guard(g).variable is not None
    }
    if rules is not None:
        fields.update(rules.fields)
    lifecycles = {d.name for d in declarations}
    keys = sorted({
        f"<<{_string(str(r['lifecycle']))}, {_string(str(r['id']))}>>"
        for r in records
        if "trigger" in r and r.get("lifecycle") in lifecycles
    })
    trace_text = ",\n    ".join(_record(n, r, fields) for n, r in zip(numbers, records, strict=True))

    def per_lifecycle(render: Any) -> str:
        return "[" + ", ".join(f"{d.name} |-> {render(d)}" for d in declarations) + "]"

    edges = per_lifecycle(
        lambda d: _set([f"<<{_string(s)}, {_string(t)}, {_string(tr.dest)}>>" for s, t, tr in d.edges()])
    )
    guard_checks = []
    for d in declarations:
        for guard_name in d.guards:
            guard = d.guard(guard_name)
            guarded = _set([f"<<{_string(s)}, {_string(t)}>>" for s, t, tr in d.edges() if tr.guard == guard_name])
            guard_checks.append(
                f"    /\\ (e.lifecycle = {_string(d.name)} /\\ <<e.from, e.trigger>> \\in {guarded})\n"
                f"          => ({_guard_expr(guard)})  \\* {guard_name}: {guard.meaning}"
            )
    rule_vars = [v for v, _ in rules.variables] if rules else []
    all_vars = ["i", "line", "st", "lastSeq", "lastStep", *rule_vars]
    invariants = [("InOrder", "Ordered(e)"), ("DeclaredEdges", "Moves(e)")]
    if rules is not None:
        invariants += list(rules.invariants)
    checks = "\n".join(f"            /\\ {pred}" for _, pred in invariants)
    invariant_defs = "\n".join(
        f"{inv} == i <= Len(Trace) => LET e == Trace[i] IN {pred}" for inv, pred in invariants
    )
    rule_variables = rules.variables if rules else ()
    rule_updates = rules.updates if rules else ()
    rule_init = "".join(f"\n        /\\ {v} = {init}" for v, init in rule_variables)
    rule_next = "".join(f"\n        /\\ {v}' = LET e == Trace[i] IN {expr}" for v, expr in rule_updates)
    tla = f"""---------------------------- MODULE {name} ----------------------------
(* Trace validation of the {', '.join(sorted(lifecycles))} lifecycle(s), generated by kvoffload trace tla. *)
(* Every line of Trace must satisfy every check, in order; the first that fails names the *)
(* check (an invariant) and, through the variable line, the trace file's line.           *)
EXTENDS Integers, Sequences, FiniteSets

Trace == <<
    {trace_text}
    >>

Lifecycles == {_set(sorted(_string(n) for n in lifecycles))}
Keys == {_set(keys)}
Initial == {per_lifecycle(lambda d: _string(d.initial))}
Terminal == {per_lifecycle(lambda d: _set(sorted(_string(s) for s in d.terminal)))}
Edges == {edges}
Unseen == {_string(UNSEEN)}

VARIABLES {", ".join(all_vars)}
vars == <<{", ".join(all_vars)}>>

IsTransition(e) == e.call = "" /\\ e.lifecycle \\in Lifecycles
Key(e) == <<e.lifecycle, e.id>>

GuardHolds(e) ==
    /\\ TRUE
{chr(10).join(guard_checks)}

Moves(e) ==
    IsTransition(e) =>
        /\\ IF st[Key(e)] = Unseen THEN e.from = Initial[e.lifecycle]
                                  ELSE /\\ st[Key(e)] \\notin Terminal[e.lifecycle]
                                       /\\ st[Key(e)] = e.from
        /\\ <<e.from, e.trigger, e.to>> \\in Edges[e.lifecycle]
        /\\ GuardHolds(e)

Ordered(e) ==
    /\\ (e.seq >= 0 /\\ lastSeq >= 0) => e.seq = lastSeq + 1
    /\\ (e.step >= 0 /\\ lastStep >= 0) => e.step >= lastStep
{rules.definitions if rules else ""}
{invariant_defs}

Init == /\\ i = 1
        /\\ line = IF Len(Trace) > 0 THEN Trace[1].line ELSE 0
        /\\ st = [k \\in Keys |-> Unseen]
        /\\ lastSeq = -1
        /\\ lastStep = -1{rule_init}

Step == /\\ i <= Len(Trace)
        /\\ LET e == Trace[i] IN
{checks}
        /\\ st' = IF IsTransition(Trace[i]) THEN [st EXCEPT ![Key(Trace[i])] = Trace[i].to] ELSE st
        /\\ lastSeq' = IF Trace[i].seq >= 0 THEN Trace[i].seq ELSE lastSeq
        /\\ lastStep' = IF Trace[i].step >= 0 THEN Trace[i].step ELSE lastStep{rule_next}
        /\\ i' = i + 1
        /\\ line' = IF i + 1 <= Len(Trace) THEN Trace[i + 1].line ELSE 0

Done == /\\ i = Len(Trace) + 1
        /\\ UNCHANGED vars

Next == Step \\/ Done

Spec == Init /\\ [][Next]_vars
=============================================================================
"""
    cfg = f"""\\* Generated by kvoffload trace tla: the whole trace must be consumed.
\\* expect: success
\\* spec: {name}.tla
SPECIFICATION Spec
INVARIANTS
{chr(10).join(f"    {inv}" for inv, _ in invariants)}
"""
    return name, tla, cfg


def write_trace_module(
    records: Sequence[Mapping[str, Any]],
    declarations: Sequence[LifecycleDeclaration],
    out_dir: str | Path,
    line_numbers: Sequence[int] | None = None,
    rules: TraceRules | None = None,
) -> tuple[Path, Path]:
    """Write the module's ``.tla`` and ``.cfg`` into ``out_dir`` (created); returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name, tla, cfg = trace_module(records, declarations, line_numbers, rules)
    tla_path = out / f"{name}.tla"
    cfg_path = out / f"{name}.cfg"
    tla_path.write_text(tla, encoding="utf-8")
    cfg_path.write_text(cfg, encoding="utf-8")
    return tla_path, cfg_path
