"""Predicates of a step (action properties, ``<>[][A]_v`` conjuncts of a SPECIFICATION) are
evaluated once per distinct step of a state, unless they have side effects, and a violation on a
step generated many times is still found."""

from __future__ import annotations

from pathlib import Path

import pytest

from tlacheck import check_model
from tlacheck.steps import StepOutcomes, first_violated
from tlacheck.syntax import Ctx

# Each state has 2 distinct successors, each generated 6 times (k is not part of the state).
REPEATS = r"""---- MODULE Repeats ----
EXTENDS Naturals, TLC
VARIABLE x
Init == x = 0
Next == \E k \in 1..6 : \E d \in {1, 2} : x' = (x + d) % 7
Below(n) == [][x' # n]_x
NotThree == Below(3)
Loud == [][PrintT(<<x, x'>>)]_x
====
"""


def _spec(tmp_path: Path, prop: str) -> Path:
    spec = tmp_path / "Repeats.tla"
    spec.write_text(REPEATS)
    (tmp_path / "Repeats.cfg").write_text(f"INIT Init\nNEXT Next\nPROPERTY {prop}\n")
    return spec


def test_a_step_is_evaluated_once_per_state_it_is_generated_from() -> None:
    calls: list[tuple[object, object]] = []

    def prop(c: Ctx, e: dict[str, object]) -> bool:
        calls.append((c.s, tuple(c.n or ())))
        return c.n != [3]

    implied = StepOutcomes(first_violated([("NotThree", prop, {})]), side_effects=False)
    s, t, u = (0,), (1,), (3,)
    c = Ctx(s, [1])
    assert [implied.of(s, c, t) for _ in range(4)] == [None] * 4
    c.n = [3]
    assert [implied.of(s, c, u) for _ in range(2)] == ["NotThree"] * 2
    assert len(calls) == 2
    other = tuple([0])  # an equal state is another state being expanded: its steps are evaluated anew
    c = Ctx(other, [1])
    implied.of(other, c, t)
    assert len(calls) == 3

    loud = StepOutcomes(first_violated([("NotThree", prop, {})]), side_effects=True)
    for _ in range(3):
        loud.of(s, c, t)
    assert len(calls) == 6


@pytest.mark.parametrize("workers", [1, 2])
def test_a_violation_on_a_repeated_step_is_found(tmp_path: Path, workers: int) -> None:
    result = check_model(_spec(tmp_path, "NotThree"), workers=workers)
    assert (result.result, result.violated, result.exit_code) == ("safety failure", "NotThree", 13)
    assert [step.state["x"] for step in result.trace] == ["0", "1", "3"]


def test_a_property_with_side_effects_is_evaluated_on_every_generated_step(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    result = check_model(_spec(tmp_path, "Loud"))
    assert result.result == "success"
    printed = capfd.readouterr().err.splitlines()
    assert result.states_generated == 7 * 12 + 1
    assert len(printed) == 7 * 12
    assert len(set(printed)) == 7 * 2


# Each step is generated three times. A cycle that resets x to 0 breaks Reaches; the SPECIFICATION's
# <>[][x' # 0]_x leaves no such cycle, and WF no stuttering one (TLC: success; exit 13 without it).
SUFFIX = r"""---- MODULE Suffix ----
EXTENDS Naturals
VARIABLE x
Init == x = 0
Next == \E k \in 1..3 : \/ x < 2 /\ x' = x + 1
                        \/ x' = 0
Spec == Init /\ [][Next]_x /\ WF_x(Next) /\ <>[][x' # 0]_x
Loose == Init /\ [][Next]_x /\ WF_x(Next)
Reaches == <>(x = 2)
====
"""


@pytest.mark.parametrize(("spec", "verdict"), [("Spec", "success"), ("Loose", "liveness failure")])
@pytest.mark.parametrize("workers", [1, 2])
def test_the_cycle_of_a_counterexample_takes_only_suffix_steps(
    tmp_path: Path, spec: str, verdict: str, workers: int
) -> None:
    (tmp_path / "Suffix.tla").write_text(SUFFIX)
    (tmp_path / "Suffix.cfg").write_text(f"SPECIFICATION {spec}\nPROPERTY Reaches\n")
    result = check_model(tmp_path / "Suffix.tla", workers=workers)
    assert (result.result, result.distinct_states) == (verdict, 3)
