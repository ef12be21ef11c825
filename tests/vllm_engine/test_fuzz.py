"""Differential fuzzing in the real engine, short profile (``make check-vllm-engine``): random
workloads (tests/vllm_engine/fuzz.py) through the engine without offloading and through every
kvoffload integration, token for token, resets and late arrivals between steps included; and one
workload over a file tier. The long profile is ``make fuzz-vllm-engine``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

import fuzz
from vllm_mutant_connector import mutant_transfer_config

from kvoffload.offload.policies import POLICIES
from kvoffload.vllm.harness import build_tiny_model

SEEDS = range(1, 1 + int(os.environ.get("KVOFFLOAD_FUZZ_SEEDS", "4")))
# A workload with both kinds of resets inside its batches, late arrivals and chunked prefills,
# through both integrations over a file tier.
FILE_TIER_SEED = 3
# The bug-zoo mutant of the split-prefix bug, and a seed whose workload shows it.
MUTANT = "store_gpu_hit_early"
MUTANT_SEED = 1


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.mark.parametrize("seed", SEEDS)
def test_random_workload_gives_the_tokens_of_the_run_without_offloading(
    model_dir: Path, seed: int, tmp_path: Path
) -> None:
    # Every policy behind KVOffloadSpec; the connector with the default and one policy per seed.
    policies = sorted(POLICIES)
    chosen = fuzz.integrations(policies, ["doorkeeper", policies[seed % len(policies)]])
    findings, coverage = fuzz.fuzz_seed(model_dir, seed, chosen, shrink_budget_s=60, out_dir=tmp_path)
    assert not findings, "\n\n".join(finding.report() for finding in findings)
    assert coverage["requests"] > 0


def test_fuzzing_catches_the_split_prefix_mutant_and_shrinks_it(model_dir: Path, tmp_path: Path) -> None:
    chosen = [(MUTANT, lambda sizes: mutant_transfer_config(MUTANT, sizes.num_cpu_chunks, sizes.blocks_per_chunk))]
    findings, _ = fuzz.fuzz_seed(model_dir, MUTANT_SEED, chosen, shrink_budget_s=45, out_dir=tmp_path)
    assert len(findings) == 1, "the fuzzer did not catch the mutant"
    finding = findings[0]
    original = fuzz.generate(MUTANT_SEED)
    assert sum(map(len, finding.plan.batches)) < sum(map(len, original.batches)), "the plan was not shrunk"
    assert "output token" in finding.difference
    # The shrunk plan was written where the report's replay command reads it.
    assert finding.plan_file is not None
    assert fuzz.Plan.from_json(json.loads(finding.plan_file.read_text())) == finding.plan


def test_short_profile_makes_the_calls_between_steps() -> None:
    """The short profile's seeds (no engine needed) reset inside batches, with and without
    preempting the running requests, submit turns late and split prefills; and their plans
    survive the JSON a finding is written as."""
    workloads = [fuzz.generate(seed) for seed in SEEDS]
    kinds = {event.kind for w in workloads for batch in w.events for event in batch}
    assert kinds == set(fuzz.EVENT_KINDS)
    assert any(turn.arrive_after for w in workloads for batch in w.batches for turn in batch)
    assert any(w.sizes.step_tokens for w in workloads)
    assert any(e.kind == "reset_running" for batch in fuzz.generate(FILE_TIER_SEED).events for e in batch)
    plan = fuzz.Plan(
        1, workloads[0].sizes, ((fuzz.Request((1, 2), 3, None, 2),),), (False,), ((fuzz.Event(2, "reset"),),)
    )
    assert fuzz.Plan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_random_workload_over_a_file_tier(model_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("xxhash", reason="the tiers' extra is not installed here: `make check-vllm-engine` installs it")
    chosen = fuzz.integrations([], [], tier_dir=tmp_path)
    assert [name for name, _ in chosen] == ["spec+file:lru", "connector+file:lru"]
    findings, coverage = fuzz.fuzz_seed(model_dir, FILE_TIER_SEED, chosen, shrink_budget_s=60, out_dir=tmp_path)
    assert not findings, "\n\n".join(finding.report() for finding in findings)
    # The file tier served the connector's loads: chunks went down, were evicted from the small CPU
    # tier, came back and were loaded (KVOffloadSpec looks up one chunk at a time through vLLM's
    # OffloadingManager and, on this seed, loaded none it promoted).
    loaded = coverage["tier_loaded_keys"]
    assert loaded["connector+file:lru"] > 0, loaded
