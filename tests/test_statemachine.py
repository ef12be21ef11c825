"""The declared-machine framework: declaration checks, table vs `transitions`, errors, observers."""

from __future__ import annotations

import itertools

import pytest
from transitions import MachineError

from kvoffload.lifecycles.request import REQUEST_LIFECYCLE
from kvoffload.statemachine.declaration import (
    DeclarationError,
    LifecycleDeclaration,
    StateDecl,
    TransitionDecl,
)
from kvoffload.statemachine.runtime import DeclaredMachine, GuardRejected, IllegalTransition


class Thing:
    def __init__(self, state: str, guard_value: bool = True) -> None:
        self.state = state
        self.request_id = "req-1"
        self.guard_value = guard_value


def machine(guard_value_attr: str = "guard_value") -> DeclaredMachine:
    return DeclaredMachine(
        REQUEST_LIFECYCLE,
        guards={"no_jobs_in_flight": lambda thing: getattr(thing, guard_value_attr)},
        id_attribute="request_id",
    )


@pytest.mark.parametrize("guard_holds", [True, False])
def test_compiled_table_agrees_with_transitions_machine_on_every_pair(guard_holds: bool) -> None:
    runtime = machine()
    reference = runtime.transitions_machine
    for state, trigger in itertools.product(REQUEST_LIFECYCLE.state_names, REQUEST_LIFECYCLE.triggers):
        ours = Thing(state, guard_holds)
        theirs = Thing(state)
        theirs.no_jobs_in_flight = guard_holds  # the condition name, as transitions resolves it
        reference.add_model(theirs, initial=state)
        try:
            try:
                accepted_by_transitions = theirs.trigger(trigger)
            except MachineError:
                accepted_by_transitions = False
            try:
                runtime.fire(ours, trigger)
                accepted_by_table = True
            except (IllegalTransition, GuardRejected):
                accepted_by_table = False
            assert accepted_by_table == accepted_by_transitions, (state, trigger, guard_holds)
            assert ours.state == theirs.state, (state, trigger, guard_holds)
        finally:
            reference.remove_model(theirs)


def test_table_matches_the_declaration_exactly() -> None:
    runtime = machine()
    expected = {(source, trigger): (t.dest, t.guard) for source, trigger, t in REQUEST_LIFECYCLE.edges()}
    assert runtime.table == expected


def test_sources_name_exactly_the_states_that_declare_each_trigger() -> None:
    # The scheduler's hot loops read sources[trigger] in place of declares(): they must agree on every pair.
    runtime = machine()
    assert set(runtime.sources) == set(REQUEST_LIFECYCLE.triggers)
    for state, trigger in itertools.product(REQUEST_LIFECYCLE.state_names, REQUEST_LIFECYCLE.triggers):
        assert (state in runtime.sources[trigger]) == runtime.declares(Thing(state), trigger), (state, trigger)


def test_illegal_trigger_names_request_state_trigger_and_changes_nothing() -> None:
    thing = Thing("signaled")
    with pytest.raises(IllegalTransition) as raised:
        machine().fire(thing, "finish")
    message = str(raised.value)
    assert "'req-1'" in message and "'finish'" in message and "'signaled'" in message
    assert "allowed here: clean" in message
    assert thing.state == "signaled"


def test_guard_rejection_changes_nothing() -> None:
    thing = Thing("signaled", guard_value=False)
    with pytest.raises(GuardRejected, match="no_jobs_in_flight"):
        machine().fire(thing, "clean")
    assert thing.state == "signaled"


def test_observers_see_every_accepted_transition_and_no_rejected_one() -> None:
    runtime = machine()
    seen = []
    runtime.add_observer(
        lambda event, instance: seen.append((event.instance_id, event.trigger, event.source, event.dest))
    )
    thing = Thing("waiting")
    for trigger in ("load", "load_done", "finish", "signal", "clean"):
        runtime.fire(thing, trigger)
    with pytest.raises(IllegalTransition):
        runtime.fire(thing, "clean")
    assert seen == [
        ("req-1", "load", "waiting", "loading"),
        ("req-1", "load_done", "loading", "running"),
        ("req-1", "finish", "running", "finished_pending_store"),
        ("req-1", "signal", "finished_pending_store", "signaled"),
        ("req-1", "clean", "signaled", "cleaned"),
    ]


def test_missing_guard_implementation_is_reported_at_construction() -> None:
    with pytest.raises(ValueError, match="no implementation for guard"):
        DeclaredMachine(REQUEST_LIFECYCLE, guards={}, id_attribute="request_id")


def _declaration(**changes: object) -> LifecycleDeclaration:
    base: dict[str, object] = {
        "name": "door",
        "states": (StateDecl("open"), StateDecl("closed")),
        "initial": "open",
        "terminal": frozenset(),
        "transitions": (TransitionDecl("close", ("open",), "closed"),),
    }
    base.update(changes)
    return LifecycleDeclaration(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"initial": "ajar"}, "initial state 'ajar' is not declared"),
        ({"transitions": (TransitionDecl("close", ("open",), "shut"),)}, "undeclared state 'shut'"),
        (
            {"transitions": (TransitionDecl("close", ("open",), "closed"), TransitionDecl("close", ("open",), "open"))},
            "must be deterministic",
        ),
        ({"transitions": (TransitionDecl("close", ("open",), "closed", guard="locked"),)}, "guard 'locked'"),
        (
            {"terminal": frozenset({"closed"}), "transitions": (TransitionDecl("open", ("closed",), "open"),)},
            "leaves terminal state",
        ),
        ({"states": (StateDecl("open"), StateDecl("open"))}, "declared twice"),
    ],
)
def test_declaration_errors_say_what_to_fix(changes: dict[str, object], message: str) -> None:
    with pytest.raises(DeclarationError, match=message):
        _declaration(**changes)


def test_the_framework_runs_a_lifecycle_that_is_not_about_kv_caches() -> None:
    door = _declaration()
    runtime = DeclaredMachine(door, guards={}, id_attribute="name")

    class Door:
        name = "front"
        state = "open"

    instance = Door()
    assert runtime.fire(instance, "close") == "closed"
    with pytest.raises(IllegalTransition, match="door 'front'"):
        runtime.fire(instance, "close")
