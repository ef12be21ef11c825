"""Diagrams of any :class:`LifecycleDeclaration`: mermaid ``stateDiagram-v2`` and Graphviz dot.

Both draw every declared state, mark the initial state (an arrow from the start marker) and the
terminal states (an arrow to the end marker in mermaid, a double circle in dot), and label each
edge ``trigger [guard]``. A trigger with several sources gets one edge per source, so the drawing
shows exactly the (state, trigger) pairs the runtime accepts. Output is deterministic (declaration
order), so it can be committed and diffed.
"""

from __future__ import annotations

import re

from kvoffload.statemachine.declaration import LifecycleDeclaration, TransitionDecl

FORMATS: tuple[str, ...] = ("mermaid", "dot")


def edge_label(transition: TransitionDecl) -> str:
    """``trigger`` or ``trigger [guard]``."""
    return f"{transition.trigger} [{transition.guard}]" if transition.guard else transition.trigger


def _mermaid_id(name: str) -> str:
    # Mermaid state ids must be plain words; declared names already are, this guards the rest.
    return re.sub(r"\W", "_", name)


def _mermaid_text(text: str) -> str:
    # ':' and ';' end a mermaid statement, '>' may read as an arrow: keep a description one phrase.
    return re.sub(r"\s+", " ", text.replace(":", " -").replace(";", ",").replace(">", ""))


def to_mermaid(declaration: LifecycleDeclaration, describe: bool = False) -> str:
    """The declaration as a mermaid ``stateDiagram-v2`` (``describe``: add each state's doc)."""
    lines = ["stateDiagram-v2"]
    if describe:
        lines += [
            f"    {_mermaid_id(state.name)} : {_mermaid_text(state.doc)}" for state in declaration.states if state.doc
        ]
    lines.append(f"    [*] --> {_mermaid_id(declaration.initial)}")
    for source, _, transition in declaration.edges():
        lines.append(f"    {_mermaid_id(source)} --> {_mermaid_id(transition.dest)} : {edge_label(transition)}")
    for state in declaration.state_names:
        if state in declaration.terminal:
            lines.append(f"    {_mermaid_id(state)} --> [*]")
    return "\n".join(lines) + "\n"


def _dot_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(declaration: LifecycleDeclaration) -> str:
    """The declaration as a Graphviz digraph (``dot -Tsvg``)."""
    lines = [
        f"digraph {_dot_string(declaration.name)} {{",
        "    rankdir=LR;",
        '    node [shape=box, style=rounded, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
        '    __start__ [shape=point, width=0.15, label=""];',
    ]
    for state in declaration.states:
        shape = ', shape=doublecircle, style=""' if state.name in declaration.terminal else ""
        tooltip = f", tooltip={_dot_string(state.doc)}" if state.doc else ""
        lines.append(f"    {_dot_string(state.name)} [label={_dot_string(state.name)}{shape}{tooltip}];")
    lines.append(f"    __start__ -> {_dot_string(declaration.initial)};")
    for source, _, transition in declaration.edges():
        label = _dot_string(edge_label(transition))
        lines.append(f"    {_dot_string(source)} -> {_dot_string(transition.dest)} [label={label}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(declaration: LifecycleDeclaration, fmt: str = "mermaid") -> str:
    """``to_mermaid`` or ``to_dot`` by name; ValueError for another format."""
    if fmt == "mermaid":
        return to_mermaid(declaration)
    if fmt == "dot":
        return to_dot(declaration)
    raise ValueError(f"unknown diagram format {fmt!r}; choose one of {', '.join(FORMATS)}")
