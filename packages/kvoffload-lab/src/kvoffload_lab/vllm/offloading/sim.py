"""The simulator's checker: kvoffload's seeded multi-turn workload through vLLM's connector.

Several seeded runs with preemptions (a small GPU pool), aborts, ``reset_cache`` (between steps,
whatever runs) and worker delays of 0-2 steps, half of them with async scheduling; no
transfer failures (vLLM's worker has no failure path). Each run drains at the end, then shuts
vLLM's connector down.
"""

from __future__ import annotations

import random
import time
from dataclasses import replace

from kvoffload_lab.sim.workload import MultiTurnWorkload, WorkloadConfig
from kvoffload_lab.vllm.common.findings import CheckerVerdict, relevant_events, requests_named
from kvoffload_lab.vllm.offloading.build import ConnectorShape
from kvoffload_lab.vllm.offloading.compat import PrivateReads
from kvoffload_lab.vllm.offloading.harness import Harness, HarnessConfig

SEEDS = 20
MAX_STEPS = 3_000
RESET_PROBABILITY = 0.02


def workload_config(seed: int) -> WorkloadConfig:
    return WorkloadConfig(
        users=6, turns=3, system_prompt_tokens=8, message_tokens=(3, 10), output_tokens=(2, 8),
        think_steps=(1, 6), arrival_spread_steps=8, seed=seed,
    )


def run_sim(manager: str, reads: PrivateReads, seeds: int = SEEDS) -> CheckerVerdict:
    """Run ``seeds`` seeded workloads; the first violation ends the check."""
    started = time.perf_counter()
    result = CheckerVerdict(manager, "sim")
    steps = requests = 0
    base = HarnessConfig(shape=ConnectorShape(gpu_blocks=20, cpu_chunks=12), abort_probability=0.01)
    for seed in range(seeds):
        config = replace(base, seed=seed, delay_steps=seed % 3, async_scheduling=bool(seed % 2),
                         empty_step_reports=bool(seed // 2 % 2))
        harness = Harness(manager, config, reads)
        try:
            workload = MultiTurnWorkload(workload_config(seed))
            workload.attach(harness.engine)
            rng = random.Random(seed + 1000)
            for _ in range(MAX_STEPS):
                workload.tick(harness.engine)
                if workload.done and harness.engine.idle:
                    break
                if rng.random() < RESET_PROBABILITY:
                    harness.reset_cache()
                harness.step()
                if harness.failed:
                    break
            if not harness.failed:
                harness.drain()
        finally:
            harness.close()
        steps += harness.engine.stats.steps
        requests += harness.engine.stats.admitted
        if harness.failed:
            first = harness.findings[0]
            result.result = "violation"
            result.invariant = first.invariant
            result.error = first.message
            named = requests_named(first.message)
            result.trace = [
                f"seed {seed}, worker delay {config.delay_steps}, async scheduling {config.async_scheduling}, "
                f"empty-step reports {config.empty_step_reports}",
                *relevant_events(harness.connector.events, named),
            ]
            break
    result.details = {"runs": seed + 1, "engine_steps": steps, "admissions": requests}
    result.seconds = time.perf_counter() - started
    return result
