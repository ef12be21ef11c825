"""The tier lifecycles are declarations drawn by ``kvoffload diagram --lifecycle NAME``."""

from __future__ import annotations

import pytest

from kvoffload.lifecycles.tier import TIER_LIFECYCLES
from kvoffload.statemachine.declaration import LifecycleDeclaration
from kvoffload.statemachine.diagram import edge_label
from kvoffload_lab.cli import main


@pytest.mark.parametrize("declaration", TIER_LIFECYCLES, ids=lambda d: d.name)
def test_each_tier_lifecycle_is_drawn_with_every_edge(
    declaration: LifecycleDeclaration, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagram", "--lifecycle", declaration.name]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"    [*] --> {declaration.initial}" in lines
    for source, _, transition in declaration.edges():
        assert f"    {source} --> {transition.dest} : {edge_label(transition)}" in lines


def test_reading_chunks_are_never_evicted_and_finalise_is_guarded() -> None:
    residency = next(d for d in TIER_LIFECYCLES if d.name == "tier_chunk")
    assert residency.transition_for("reading", "evict") is None
    assert residency.transition_for("writing", "read") is None
    request = next(d for d in TIER_LIFECYCLES if d.name == "tier_request")
    assert request.transition_for("active", "finalise") is None
    assert request.transition_for("signaled", "finalise").guard == "no_tier_jobs"
