"""Where the explorer's engine model offers ``reset_cache``, and what the scheduler does with a
reset that falls where vLLM never delivers one (docs/checkers.md, "Where resets fall")."""

from __future__ import annotations

from typing import Any

from kvoffload_lab.verify.explore_model import OffloadExploreModel, World

STEP = ("step", None, None, True)
RESET = ("reset",)
# The counterexample the explorer printed before its model followed vLLM's call order: r1 is
# preempted, r2 is admitted and computes the shared chunk in the next step, r1 is re-admitted with
# a GPU hit on that block plus a CPU load, and reset_cache comes before that step's build.
UP_TO_THE_RESET: tuple[tuple[Any, ...], ...] = (
    ("admit", "r1", False), STEP, STEP, STEP, ("step", "r1", None, True), STEP,
    ("admit", "r2", False), ("admit", "r1", True),
)


def _walk(model: OffloadExploreModel, actions: tuple[tuple[Any, ...], ...]) -> World:
    world = model.initial()
    for action in actions:
        assert action in model.actions(world), f"{model.action_name(action)} is not enabled"
        world = model.step(world, action)
        assert model.invariants(world) == [], model.action_name(action)
    return world


def test_reset_is_offered_between_steps_and_never_between_an_admission_and_its_build() -> None:
    model = OffloadExploreModel()
    assert RESET in model.actions(model.initial())
    world = _walk(model, UP_TO_THE_RESET[:6])
    assert RESET in model.actions(world), "between two steps"
    world = _walk(model, UP_TO_THE_RESET)
    assert RESET not in model.actions(world), "inside schedule(): an admission waits for its build"
    world = model.step(world, STEP)
    assert RESET in model.actions(world), "the step's build ended schedule()"


def test_a_reset_inside_schedule_leaves_the_gpu_hit_unstored_until_it_is_written() -> None:
    # The scheduler survives the call order vLLM never makes too: the step after the reset
    # computes the shared chunk into block 0, and no store reads block 0 before that.
    model = OffloadExploreModel(resets_within_schedule=True)
    world = _walk(model, (*UP_TO_THE_RESET, RESET, STEP, STEP, STEP))
    assert world.problems == [] and model.invariants(world) == []
    assert model.drain(world) == []
