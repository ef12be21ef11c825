"""The declared lifecycles and invariants use the TLA+ spec's names (docs/design.md: one vocabulary everywhere)."""

from __future__ import annotations

import re
from pathlib import Path

from kvoffload.lifecycles.invariants import INVARIANTS, OTHER_PROPERTIES
from kvoffload.lifecycles.request import REQUEST_LIFECYCLE

TLA = Path(__file__).resolve().parent.parent / "tla" / "KVOffload.tla"


def tla_text() -> str:
    return TLA.read_text()


def tla_definitions() -> set[str]:
    return set(re.findall(r"^([A-Z][A-Za-z0-9]*)(?:\([^)]*\))?\s*==", tla_text(), flags=re.MULTILINE))


def test_every_python_invariant_is_defined_in_the_tla_spec() -> None:
    missing = sorted(set(INVARIANTS) - tla_definitions())
    assert missing == [], f"define these in {TLA.name} (or rename them in lifecycles/invariants.py): {missing}"


def test_liveness_property_is_defined_in_the_tla_spec() -> None:
    assert "EventuallyCleaned" in tla_definitions()
    assert "EventuallyCleaned" in OTHER_PROPERTIES


def test_tla_lifecycle_states_are_the_declared_states() -> None:
    match = re.search(r"LifecycleStates\s*==\s*\{([^}]*)\}", tla_text())
    assert match is not None, "KVOffload.tla must define LifecycleStates"
    tla_states = set(re.findall(r'"([a-z_]+)"', match.group(1)))
    assert tla_states == set(REQUEST_LIFECYCLE.state_names)


def test_models_check_the_named_invariants() -> None:
    config = (TLA.parent / "KVOffload.cfg").read_text()
    checked = set(re.findall(r"^\s*([A-Z][A-Za-z]+)\s*$", config, flags=re.MULTILINE))
    assert set(INVARIANTS) <= checked, f"KVOffload.cfg does not check {sorted(set(INVARIANTS) - checked)}"
    assert "EventuallyCleaned" in checked
