"""The engine simulator and `kvoffload simulate`: hits, zero violations, zero leaks, determinism."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from kvoffload.offload.types import OffloadConfig
from kvoffload_lab.sim import Engine, EngineConfig, MultiTurnWorkload, WorkloadConfig
from kvoffload_lab.sim.block_pool import BlockPool
from kvoffload_lab.sim.request import SimRequest, chain_hash
from kvoffload_lab.sim.runner import SimulationOptions, simulate
from support import NoFenceScheduler


def test_default_workload_reuses_offloaded_prefixes_without_violations_or_leaks() -> None:
    result = simulate(SimulationOptions())  # the demo: real tensors through the worker and mover
    assert result["violations"] == 0, result["violation_messages"]
    assert result["leaks"] == 0
    assert result["offload_hit_tokens"] > 0
    assert result["stored_chunks"] > 0 and result["loaded_chunks"] > 0
    assert result["integrity_checked_blocks"] == result["loaded_chunks"]
    assert result["integrity_failures"] == 0
    assert result["finished"] == 24 * 4


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize(("delay", "blocks_per_chunk"), [(0, 1), (2, 2), (3, 1)])
def test_faults_aborts_and_resets_leave_no_violation_or_leak(seed: int, delay: int, blocks_per_chunk: int) -> None:
    result = simulate(
        SimulationOptions(
            users=12,
            turns=3,
            seed=seed,
            num_gpu_blocks=48,
            num_cpu_blocks=40,
            delay=delay,
            blocks_per_chunk=blocks_per_chunk,
            faults=0.1,
        )
    )
    assert (result["violations"], result["leaks"], result["integrity_failures"]) == (0, 0, 0), result
    assert result["aborted"] > 0
    assert result["load_failures"] + result["store_failures"] > 0


@pytest.mark.parametrize("seed", [4, 5])
def test_frequent_reset_cache_during_transfers_is_safe(seed: int) -> None:
    config = EngineConfig(num_gpu_blocks=48, num_cpu_blocks=40, job_delay_steps=2, reset_probability=0.15, seed=seed)
    engine = Engine(config)
    workload = MultiTurnWorkload(WorkloadConfig(users=8, turns=3, seed=seed))
    workload.attach(engine)
    while not (workload.done and engine.idle):
        workload.tick(engine)
        engine.step()
    engine.drain()
    assert engine.stats.resets > 5
    assert engine.scheduler.stats.stale_completions > 0, "some resets happened with transfers in flight"
    assert (engine.stats.violations, engine.leaks(), engine.stats.integrity_failures) == (0, [], 0)


@pytest.mark.parametrize("delay", [0, 1])
def test_gpu_hits_on_blocks_computed_in_the_same_step_are_stored_right(delay: int) -> None:
    # A burst of first turns: requests admitted behind the first of their group hit the system
    # prompt's blocks, which the engine cached when it scheduled them and this step's forward pass
    # writes. Later turns load the prompt back from CPU, so a store that read the blocks before the
    # forward pass would fail the byte-for-byte check.
    result = simulate(
        SimulationOptions(users=6, turns=3, num_gpu_blocks=24, delay=delay, arrival_spread=0, system_prompts=2)
    )
    assert result["same_step_gpu_hits"] > 0
    assert result["loaded_chunks"] > 0 and result["integrity_checked_blocks"] > 0
    assert (result["violations"], result["leaks"], result["integrity_failures"]) == (0, 0, 0), result


def test_block_pool_caches_a_block_when_it_is_scheduled() -> None:
    engine = Engine(EngineConfig(num_gpu_blocks=16, gpu_block_size=4, max_num_batched_tokens=64))
    prompt = list(range(1, 13))
    first, second = engine.add_request(prompt, max_tokens=2), engine.add_request(prompt, max_tokens=2)
    report = engine.step()
    # The second request hit the first's two full prompt blocks (capped below its last token).
    assert report.scheduled == {first.request_id: 12, second.request_id: 4}
    assert second.block_ids[:2] == first.block_ids[:2] and engine.stats.same_step_gpu_hits == 1


def test_runs_repeat_exactly_for_a_seed() -> None:
    first = simulate(SimulationOptions(users=8, turns=2, seed=7, faults=0.05, backend="model"))
    second = simulate(SimulationOptions(users=8, turns=2, seed=7, faults=0.05, backend="model"))
    assert first == second


def test_offloading_saves_prompt_compute_against_a_run_without_cpu_hits() -> None:
    tiny_cpu = simulate(SimulationOptions(num_cpu_blocks=1, backend="model"))
    normal = simulate(SimulationOptions(backend="model"))
    assert normal["computed_tokens"] < tiny_cpu["computed_tokens"]


def test_a_scheduler_that_breaks_the_fence_is_caught_by_the_engine() -> None:
    # Small GPU pool: requests get preempted while their stores are still in flight.
    config = EngineConfig(num_gpu_blocks=12, num_cpu_blocks=64, job_delay_steps=2, max_running=6)
    engine = Engine(config, scheduler=NoFenceScheduler(config.offload_config()))
    for user in range(8):
        engine.add_request([user * 1000 + t for t in range(40)], max_tokens=40)
    names = set()
    for _ in range(600):
        if engine.idle:
            break
        names |= {v.invariant for v in engine.step().violations}
    assert "GpuBlockFence" in names
    assert engine.stats.integrity_failures > 0, "the store read the block after it was rewritten"


def test_block_pool_caches_freed_blocks_until_reused() -> None:
    pool = BlockPool(3)
    blocks = pool.allocate(2)
    assert blocks == [0, 1]
    pool.register(0, 100)
    pool.register(1, 101)
    pool.free(blocks)
    assert pool.cached_prefix([100, 101, 102]) == [0, 1]
    assert pool.allocate(2) == [2, 1], "tail block is evicted before the shared prefix"
    assert pool.cached_prefix([100, 101]) == [0]
    assert pool.allocate(2) is None


def test_request_hashes_chain_over_full_blocks() -> None:
    request = SimRequest("r", [1, 2, 3, 4, 5], max_tokens=3, block_size=2)
    assert request.block_hashes == [chain_hash(None, [1, 2]), chain_hash(chain_hash(None, [1, 2]), [3, 4])]
    request.append_output(6)
    assert len(request.block_hashes) == 3
    assert request.block_hashes[2] == chain_hash(request.block_hashes[1], [5, 6])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"users": 0}, "--users must be >= 1"),
        ({"faults": 2.0}, "--faults must be in"),
        ({"delay": -1}, "--delay"),
        ({"policy": "mru"}, "--policy 'mru' is unknown; known: arc, doorkeeper"),
        ({"num_gpu_blocks": 0}, "--gpu-blocks must be >= 1"),
    ],
)
def test_bad_options_are_rejected(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SimulationOptions(**kwargs)  # type: ignore[arg-type]


def test_engine_rejects_duplicate_ids_and_unknown_aborts() -> None:
    engine = Engine(EngineConfig())
    engine.add_request([1, 2, 3], 2, request_id="x")
    with pytest.raises(ValueError, match="'x' is already in use"):
        engine.add_request([1], 2, request_id="x")
    with pytest.raises(KeyError, match="no live request 'y'"):
        engine.abort("y")
    with pytest.raises(ValueError, match="needs 1537 tokens; the GPU pool holds 1536"):
        engine.add_request([1] * 1500, 37)


def test_conversations_that_outgrow_the_gpu_pool_end_instead_of_hanging() -> None:
    result = simulate(SimulationOptions(users=6, turns=6, num_gpu_blocks=24, seed=5, backend="model"))
    assert (result["violations"], result["leaks"]) == (0, 0)
    assert result["finished"] + result["aborted"] < 36, "some conversations were cut"


def test_simulate_command_prints_one_json_object() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "kvoffload_lab.cli", "simulate", "--json", "--users", "6", "--turns", "2",
         "--backend", "model"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert {"finished", "violations", "leaks", "stored_chunks", "loaded_chunks", "offload_hit_tokens"} <= set(result)
    assert result["violations"] == 0 and result["leaks"] == 0


def test_simulate_command_reports_bad_options_in_one_line() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "kvoffload_lab.cli", "simulate", "--faults", "3"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip() == "kvoffload simulate: error: --faults must be in [0, 1], got 3.0"


def test_offload_config_of_engine_matches_engine_sizes() -> None:
    config = EngineConfig(gpu_block_size=8, blocks_per_chunk=2, num_cpu_blocks=5, policy="arc")
    assert config.offload_config() == OffloadConfig(8, 2, 5, "arc")


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=[pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"), pytest.mark.cuda],
        ),
    ],
)
def test_torch_backend_moves_every_loaded_byte_right_under_faults(device: str) -> None:
    """Aborts, resets, failed jobs and preemption, with every loaded block's bytes checked."""
    options = SimulationOptions(
        users=16, turns=4, num_gpu_blocks=48, num_cpu_blocks=256, faults=0.05, seed=3, device=device
    )
    summary = simulate(options)
    assert summary["device"] == device
    assert (summary["violations"], summary["leaks"], summary["integrity_failures"]) == (0, 0, 0)
    assert summary["loaded_chunks"] > 0 and summary["integrity_checked_blocks"] > 0
    assert summary["load_failures"] + summary["store_failures"] > 0
