"""Diagrams: every state and every trigger of a declaration is drawn, initial and terminal marked."""

from __future__ import annotations

import re

import pytest

from kvoffload.lifecycles import JOB_LIFECYCLE, REQUEST_LIFECYCLE
from kvoffload.statemachine.declaration import LifecycleDeclaration, StateDecl, TransitionDecl
from kvoffload.statemachine.diagram import edge_label, render, to_dot, to_mermaid
from kvoffload_lab.cli import main
from kvoffload_lab.statemachine.lifecycle_tla import lifecycle_module

DOOR = LifecycleDeclaration(
    name="door",
    states=(StateDecl("closed", "shut"), StateDecl("open"), StateDecl("locked"), StateDecl("gone")),
    initial="closed",
    terminal=frozenset({"gone"}),
    guards={"has_key": "the caller holds the key"},
    transitions=(
        TransitionDecl("open", ("closed",), "open"),
        TransitionDecl("close", ("open",), "closed"),
        TransitionDecl("lock", ("closed",), "locked", guard="has_key"),
        TransitionDecl("unlock", ("locked",), "closed", guard="has_key"),
        TransitionDecl("demolish", ("closed", "open", "locked"), "gone"),
    ),
)


@pytest.mark.parametrize("declaration", [REQUEST_LIFECYCLE, JOB_LIFECYCLE, DOOR], ids=["request", "job", "door"])
def test_mermaid_has_every_state_and_edge(declaration: LifecycleDeclaration) -> None:
    text = to_mermaid(declaration)
    lines = text.splitlines()
    assert lines[0] == "stateDiagram-v2"
    assert f"    [*] --> {declaration.initial}" in lines
    for terminal in declaration.terminal:
        assert f"    {terminal} --> [*]" in lines
    edges = {(m[1], m[2], m[3]) for m in (re.match(r"^    (\w+) --> (\w+) : (.+)$", x) for x in lines) if m}
    expected = {(source, t.dest, edge_label(t)) for source, _, t in declaration.edges()}
    assert edges == expected
    drawn_states = {s for edge in edges for s in edge[:2]}
    assert drawn_states == set(declaration.state_names)
    assert {label.split(" [")[0] for *_, label in edges} == set(declaration.triggers)


def test_guards_are_on_the_labels() -> None:
    text = to_mermaid(REQUEST_LIFECYCLE)
    assert "preempted --> waiting : resume [no_jobs_in_flight]" in text
    assert "signaled --> cleaned : clean [no_jobs_in_flight]" in text
    assert "waiting --> running : schedule\n" in text


def test_mermaid_descriptions_are_sanitised() -> None:
    text = to_mermaid(REQUEST_LIFECYCLE, describe=True)
    description_lines = [x for x in text.splitlines() if re.match(r"^    \w+ : ", x)]
    assert len(description_lines) == len(REQUEST_LIFECYCLE.states)
    for x in description_lines:
        description = x.split(" : ", 1)[1]
        assert ";" not in description and ":" not in description and ">" not in description


@pytest.mark.parametrize("declaration", [REQUEST_LIFECYCLE, JOB_LIFECYCLE, DOOR], ids=["request", "job", "door"])
def test_dot_has_every_state_and_edge(declaration: LifecycleDeclaration) -> None:
    text = to_dot(declaration)
    assert text.startswith(f'digraph "{declaration.name}" {{') and text.rstrip().endswith("}")
    assert f'__start__ -> "{declaration.initial}";' in text
    for state in declaration.state_names:
        node = re.search(rf'^    "{state}" \[(.*)\];$', text, re.MULTILINE)
        assert node is not None, state
        assert ("doublecircle" in node[1]) == (state in declaration.terminal)
    edges = set(re.findall(r'^    "(\w+)" -> "(\w+)" \[label="([^"]+)"\];$', text, re.MULTILINE))
    assert edges == {(source, t.dest, edge_label(t)) for source, _, t in declaration.edges()}


def test_render_rejects_an_unknown_format() -> None:
    assert render(DOOR, "dot") == to_dot(DOOR)
    with pytest.raises(ValueError, match="unknown diagram format 'svg'"):
        render(DOOR, "svg")


def test_diagram_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram"]) == 0
    assert capsys.readouterr().out == to_mermaid(REQUEST_LIFECYCLE)
    assert main(["diagram", "--format", "dot"]) == 0
    assert capsys.readouterr().out == to_dot(REQUEST_LIFECYCLE)


def test_diagram_command_takes_any_declaration_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagram", "--lifecycle", "job"]) == 0
    assert capsys.readouterr().out == to_mermaid(JOB_LIFECYCLE)
    assert main(["diagram", "--lifecycle", "job", "--format", "tla"]) == 0
    text = capsys.readouterr().out
    assert text == lifecycle_module(JOB_LIFECYCLE)[1] and "MODULE JobLifecycle" in text
    assert '<<"submitted", "flush", "flushed">>' in text and '<<"new", "prepare", "request_not_signaled">>' in text
