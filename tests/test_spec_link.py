"""The declarations and the TLA+ spec are linked by checks that fail: a removed or added edge, or a
generated module left stale, makes ``kvoffload link`` (and so ``make tla``) fail."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from kvoffload.lifecycles import JOB_LIFECYCLE, REQUEST_LIFECYCLE
from kvoffload.statemachine.declaration import LifecycleDeclaration, TransitionDecl
from kvoffload_lab.cli import main
from kvoffload_lab.verify.spec_link import (
    DECLARATIONS,
    check_link,
    coverage_problems,
    refinement_problems,
    stale_modules,
)
from tlacheck import check_model

TLA = Path(__file__).resolve().parents[1] / "tla"


def _without(declaration: LifecycleDeclaration, trigger: str, source: str) -> LifecycleDeclaration:
    transitions = []
    for t in declaration.transitions:
        if t.trigger == trigger and source in t.sources:
            sources = tuple(s for s in t.sources if s != source)
            if not sources:
                continue
            t = dataclasses.replace(t, sources=sources)
        transitions.append(t)
    return dataclasses.replace(declaration, transitions=tuple(transitions))


@pytest.mark.slow
def test_the_committed_link_holds(capsys: pytest.CaptureFixture[str]) -> None:
    report = check_link(TLA)
    assert report.ok, report.problems
    assert report.covered_edges == len(list(REQUEST_LIFECYCLE.edges())) - 1  # one edge listed as unmodelled
    assert main(["link", str(TLA)]) == 0
    assert "OK" in capsys.readouterr().out


def test_a_removed_request_edge_fails_the_refinement() -> None:
    smaller = _without(REQUEST_LIFECYCLE, "resume", "preempted")
    problems = refinement_problems((smaller, JOB_LIFECYCLE), TLA)
    assert len(problems) == 1 and "FollowsRequestLifecycle is violated: action Readmit" in problems[0]


def test_a_removed_composite_half_fails_the_refinement() -> None:
    # BuildMeta's signal-then-clean needs both edges.
    smaller = _without(REQUEST_LIFECYCLE, "clean", "signaled")
    problems = refinement_problems((smaller, JOB_LIFECYCLE), TLA)
    assert problems and "FollowsRequestLifecycle is violated" in problems[0]


def test_a_removed_job_edge_fails_the_refinement() -> None:
    smaller = _without(JOB_LIFECYCLE, "flush", "submitted")
    problems = refinement_problems((REQUEST_LIFECYCLE, smaller), TLA)
    assert len(problems) == 1 and "FollowsJobLifecycle is violated: action Preempt" in problems[0]


def test_an_added_request_edge_fails_the_coverage() -> None:
    larger = dataclasses.replace(
        REQUEST_LIFECYCLE,
        transitions=(*REQUEST_LIFECYCLE.transitions, TransitionDecl("preempt", ("loading",), "preempted")),
    )
    problems, _ = coverage_problems((larger, JOB_LIFECYCLE), TLA)
    assert problems == [
        f"{TLA / 'KVOffloadRefinement.tla'}: declared request edge loading --preempt--> preempted is taken by no "
        f"action; model it, or list it in UnmodelledRequestEdges with the reason"
    ]


@pytest.mark.slow
def test_a_stale_module_fails_and_write_repairs_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "tla"
    shutil.copytree(TLA, copy)
    module = copy / "RequestLifecycle.tla"
    module.write_text(module.read_text().replace('<<"preempted", "resume", "waiting">>,\n', ""))
    assert stale_modules(DECLARATIONS, copy) == [
        f"{module}: differs from the request declaration (src/kvoffload/lifecycles/request.py); regenerate it with "
        f"`kvoffload link {copy} --write`"
    ]
    assert main(["link", str(copy)]) == 1
    assert "differs from the request declaration" in capsys.readouterr().out
    # `kvoffload tla check-all` (make tla's other half) checks the committed module: Readmit fails it.
    result = check_model(copy / "KVOffloadRefinement.tla", copy / "KVOffloadRefinement.cfg")
    assert result.violated == "FollowsRequestLifecycle" and result.trace[-1].action.startswith("Readmit")
    assert main(["link", str(copy), "--write"]) == 0
    assert module.read_text() == (TLA / "RequestLifecycle.tla").read_text()


def test_missing_spec_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["link", str(tmp_path)]) == 2
    assert "KVOffload.tla: no such file" in capsys.readouterr().err
