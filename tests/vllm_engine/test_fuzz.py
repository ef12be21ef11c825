"""Differential fuzzing in the real engine, short profile (``make check-vllm-engine``): random
workloads (tests/vllm_engine/fuzz.py) through the engine without offloading and through every
kvoffload integration, token for token, resets and late arrivals between steps included; one
workload over a file tier; and a workload on each other model kind (fuzz_models.py: sliding window
+ full attention with vLLM's hybrid KV cache manager, MLA), through both integrations and a mutant
that loads wrong bytes for that kind. The long profile is ``make fuzz-vllm-engine``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

import fuzz
from fuzz_models import model_dirs
from vllm_mutant_connector import mutant_transfer_config

from kvoffload.offload.policies import POLICIES
from kvoffload_lab.vllm.common.engine import build_tiny_model, connector_transfer_config

SEEDS = range(1, 1 + int(os.environ.get("KVOFFLOAD_FUZZ_SEEDS", "4")))
# A workload with both kinds of resets inside its batches, late arrivals and chunked prefills,
# through both integrations over a file tier.
FILE_TIER_SEED = 3
# The bug-zoo mutant of the split-prefix bug, and a seed whose workload shows it.
MUTANT = "store_gpu_hit_early"
MUTANT_SEED = 1
# A seed per other model kind whose workload reuses prefixes after they left the GPU (floods,
# resets), and the mutant that loads wrong bytes for that kind: one group's blocks of a chunk
# (vllm_group_mutants), half of each latent page (vllm_mla_mutants). Shrinking is left to the long
# profile: each cut reruns two engines.
MODEL_SEEDS = {"sliding_window": 3, "mla": 7}
MODEL_MUTANTS = {
    "sliding_window": ("vllm_group_mutants", "OneGroupLoadConnector"),
    "mla": ("vllm_mla_mutants", "KHalfConnector"),
}


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
    def config(sizes: fuzz.Sizes) -> dict[str, Any]:
        return mutant_transfer_config(MUTANT, sizes.num_cpu_chunks, sizes.blocks_per_chunk)

    # Named as the integration it changes: a MutantConnector is a KVOffloadConnector.
    chosen = [(f"connector:{MUTANT}", config)]
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


@pytest.fixture(scope="module", params=sorted(MODEL_SEEDS))
def other_model_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[fuzz.Finding], dict[str, Any]]:
    """One seed on a model kind other than the Llama: one baseline, then KVOffloadSpec (LRU),
    KVOffloadConnector (doorkeeper) and the kind's mutant connector."""
    model: str = request.param
    model_dir: Callable[[str], Path] = model_dirs(tmp_path_factory.mktemp("models"))
    module, name = MODEL_MUTANTS[model]
    mutant = f"connector:{name}"
    chosen = [
        *fuzz.integrations(["lru"], ["doorkeeper"]),
        (mutant, lambda sizes: connector_transfer_config(
            sizes.num_cpu_chunks, blocks_per_chunk=sizes.blocks_per_chunk, connector_module=module,
            connector_name=name,
        )),
    ]
    out_dir = tmp_path_factory.mktemp(f"fuzz-{model}")
    findings, coverage = fuzz.fuzz_seed(
        model_dir(model), MODEL_SEEDS[model], chosen, shrink_budget_s=0, out_dir=out_dir, model=model
    )
    return model, findings, coverage


def test_other_model_kinds_give_the_tokens_of_the_run_without_offloading(
    other_model_run: tuple[str, list[fuzz.Finding], dict[str, Any]],
) -> None:
    model, findings, coverage = other_model_run
    assert coverage["model"] == model
    assert coverage["integrations"] == ["spec:lru", "connector:doorkeeper", f"connector:{MODEL_MUTANTS[model][1]}"]
    correct = [finding for finding in findings if finding.integration in ("spec:lru", "connector:doorkeeper")]
    assert not correct, "\n\n".join(finding.report() for finding in correct)


def test_the_offload_tier_serves_later_turns_of_other_model_kinds(
    other_model_run: tuple[str, list[fuzz.Finding], dict[str, Any]],
) -> None:
    """vLLM's own counters: offload-tier (external) hits, and later turns served more tokens from
    cache than without offloading."""
    _, _, coverage = other_model_run
    for name in ("spec:lru", "connector:doorkeeper"):
        assert coverage["external_hit_tokens"][name] > 0, coverage["external_hit_tokens"]
        assert coverage["later_turn_hits"][name] > 0, coverage["later_turn_hits"]


def test_the_hybrid_kv_cache_manager_stays_on_for_sliding_window(
    other_model_run: tuple[str, list[fuzz.Finding], dict[str, Any]],
) -> None:
    model, _, coverage = other_model_run
    groups = 2 if model == "sliding_window" else 1
    assert set(coverage["kv_cache_groups"].values()) == {groups}, coverage["kv_cache_groups"]
    if model == "sliding_window":
        # The engine's vllm_config: disable_hybrid_kv_cache_manager False with every integration.
        assert all(coverage["hybrid_kv_cache_manager"].values()), coverage["hybrid_kv_cache_manager"]


def test_fuzzing_catches_the_other_model_kinds_mutants(
    other_model_run: tuple[str, list[fuzz.Finding], dict[str, Any]],
) -> None:
    model, findings, _ = other_model_run
    caught = [finding for finding in findings if finding.integration == f"connector:{MODEL_MUTANTS[model][1]}"]
    assert len(caught) == 1, f"the fuzzer did not catch {MODEL_MUTANTS[model][1]} on {model}"
    assert "output token" in caught[0].difference
    # The written plan names its model, so the replay runs the same engine.
    assert caught[0].plan_file is not None
    assert fuzz.Plan.from_json(json.loads(caught[0].plan_file.read_text())).model == model
    assert f"model {model}" in caught[0].report()
