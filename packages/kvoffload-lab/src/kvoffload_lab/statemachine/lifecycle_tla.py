"""A declaration as a TLA+ module: its states, edges and guards, for specs to refine.

``lifecycle_module(declaration)`` writes module ``<Name>Lifecycle`` (``RequestLifecycle``,
``JobLifecycle``) defining ``States``, ``Initial``, ``Terminal``, ``Triggers``, ``Edges`` (the set of
``<<from, trigger, to>>``), ``Guarded`` (``<<from, trigger, guard>>``) and two operators a
hand-written spec uses to say how its actions move an instance:

- ``Step(from, t, to)``: ``from --t--> to`` is a declared edge;
- ``Steps2(from, t1, t2, to)``: two declared edges taken in one atomic action, through any state
  (e.g. ``signal`` then ``clean`` when a finished request has nothing in flight).

A spec ``INSTANCE``s the module and states a refinement property over its own variables; the
module holds no variables, so it can be instanced anywhere. Output is deterministic (declaration
order), so the generated file can be committed and compared with a fresh rendering.
"""

from __future__ import annotations

import json

from kvoffload.statemachine.declaration import LifecycleDeclaration


def module_name(declaration: LifecycleDeclaration) -> str:
    """``<Name>Lifecycle``: ``request`` -> ``RequestLifecycle``, ``transfer_job`` -> ``TransferJobLifecycle``."""
    return "".join(part.capitalize() for part in declaration.name.split("_")) + "Lifecycle"


def _s(text: str) -> str:
    return json.dumps(text)


def _set(items: list[str]) -> str:
    if not items:
        return "{}"
    return "{\n    " + ",\n    ".join(items) + "\n}"


def lifecycle_module(declaration: LifecycleDeclaration, source: str = "", regenerate: str = "") -> tuple[str, str]:
    """``(module name, .tla text)`` for ``declaration``; ``source`` says where it is declared,
    ``regenerate`` the command that writes the module again (both go into its header)."""
    name = module_name(declaration)
    edges = [f"<<{_s(s)}, {_s(t)}, {_s(tr.dest)}>>" for s, t, tr in declaration.edges()]
    guarded = [f"<<{_s(s)}, {_s(t)}, {_s(tr.guard)}>>" for s, t, tr in declaration.edges() if tr.guard]
    origin = f" ({source})" if source else ""
    how = f" with `{regenerate}`" if regenerate else ""
    guard_notes = "".join(
        f"\\* {guard}: {declaration.guard(guard).meaning}\n" for guard in declaration.guards
    )
    text = f"""{'-' * 28} MODULE {name} {'-' * 28}
\\* The {declaration.name} lifecycle, generated from its declaration{origin}.
\\* Do not edit: regenerate it{how}.
\\* A spec that instances it states, as a property, that its actions move instances only along
\\* these edges.

States == {{{", ".join(_s(state) for state in declaration.state_names)}}}
Initial == {_s(declaration.initial)}
Terminal == {{{", ".join(_s(state) for state in sorted(declaration.terminal))}}}
Triggers == {{{", ".join(_s(trigger) for trigger in declaration.triggers)}}}

\\* <<from, trigger, to>> for every (state, trigger) the runtime accepts.
Edges == {_set(edges)}

\\* <<from, trigger, guard>>: the edge is taken only when the guard holds.
{guard_notes}Guarded == {_set(guarded)}

\\* from --t--> to is a declared edge.
Step(from, t, to) == <<from, t, to>> \\in Edges

\\* from --t1--> mid --t2--> to: two declared edges taken in one atomic action.
Steps2(from, t1, t2, to) == \\E mid \\in States : Step(from, t1, mid) /\\ Step(mid, t2, to)
{'=' * 77}
"""
    return name, text
