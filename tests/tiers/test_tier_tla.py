"""tla/KVOffloadTiers.tla: the fixed model passes, the eager-finalise model (#49635's tiering form)
fails with the expected invariant, and the invariant names match the simulator's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvoffload.tiers.invariants import TIER_INVARIANTS
from tlacheck import check_model, expectation

TLA_DIR = Path(__file__).resolve().parents[2] / "tla"
SPEC = TLA_DIR / "KVOffloadTiers.tla"
CFGS = sorted(TLA_DIR.glob("KVOffloadTiers*.cfg"))


def test_both_tier_models_exist_and_name_their_spec() -> None:
    assert [c.name for c in CFGS] == ["KVOffloadTiers.cfg", "KVOffloadTiers_EagerFinalise.cfg"]
    for config in CFGS:
        assert expectation.spec_for_config(config) == SPEC


def test_the_spec_defines_the_simulators_invariants_and_every_cfg_name() -> None:
    defined = set(re.findall(r"^([A-Za-z_]\w*)(?:\([^)]*\))? ==", SPEC.read_text(), re.MULTILINE))
    assert set(TIER_INVARIANTS) <= defined
    for config in CFGS:
        text = re.sub(r"\\\*.*", "", config.read_text())
        names = re.findall(r"^    ([A-Za-z]\w*)$", text, re.MULTILINE)
        assert names and set(names) <= defined, f"{config.name}: {set(names) - defined}"


@pytest.mark.parametrize("config", CFGS, ids=lambda c: c.name)
def test_each_tier_model_meets_its_expectation(config: Path) -> None:
    result = check_model(SPEC, config)
    assert expectation.read_expectation(config).met_by(result), (result.result, result.violated)
    if result.result != "success":
        # The crash itself: a store completing after the early drop cascades for a dropped request.
        assert result.violated == "NoTierCallAfterFinalise"
        assert len(result.trace) == 6
