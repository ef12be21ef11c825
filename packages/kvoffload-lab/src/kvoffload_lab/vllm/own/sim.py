"""The simulator's checker: seeded multi-turn conversations through vLLM's scheduler and
``KVOffloadConnector``.

Each seed draws an engine (GPU blocks few enough to preempt or plenty, a CPU tier that evicts or one
that does not, 1 or 2 blocks per chunk, token budget, batch size, the polls a copy takes) and a
workload: users whose turns extend their conversation so far (prefix hits on the GPU and in the CPU
tier), and between steps aborts (half of them arriving inside the next step, just before its
output is processed), ``reset_prefix_cache(reset_connector=True)`` (half of them with
``reset_running_requests``) and transfers that fail; then a drain. The first violation ends the
check with its step list.
"""

from __future__ import annotations

import random
import time
from collections import Counter

from kvoffload_lab.vllm.check.findings import CheckerVerdict
from kvoffload_lab.vllm.own.build import OwnShape
from kvoffload_lab.vllm.own.harness import OwnConfig, OwnHarness
from kvoffload_lab.vllm.simple.sim import Conversations

SEEDS = 30
MAX_STEPS = 500
ABORT_PROBABILITY = 0.03
RESET_PROBABILITY = 0.01
FAIL_PROBABILITY = 0.02


def seed_config(seed: int, async_scheduling: bool, mutant: str | None = None) -> OwnConfig:
    """The engine of seed ``seed``."""
    rng = random.Random(seed)
    shape = OwnShape(block_size=4, gpu_blocks=rng.choice((8, 12, 24)), cpu_chunks=rng.choice((4, 8, 64)),
                     blocks_per_chunk=rng.choice((1, 2)), max_batched_tokens=rng.choice((8, 16, 32)),
                     max_seqs=rng.choice((2, 4)))
    return OwnConfig(shape=shape, delay=rng.choice((1, 2, 3)), async_scheduling=async_scheduling, mutant=mutant)


def run_seed(seed: int, config: OwnConfig) -> OwnHarness:
    """One seeded run, drained."""
    harness = OwnHarness(config)
    rng = random.Random(seed + 1000)
    conversations = Conversations(rng)
    for _ in range(MAX_STEPS):
        conversations.tick(harness)
        if conversations.done and not harness.busy:
            break
        live = harness.live_requests()
        if live and rng.random() < ABORT_PROBABILITY:
            harness.abort(rng.choice(live), mid_step=rng.random() < 0.5)
        if rng.random() < RESET_PROBABILITY:
            harness.reset_cache(running=rng.random() < 0.5)
        if rng.random() < FAIL_PROBABILITY:
            harness.fail_next_transfer()
        if harness.busy:
            harness.step()
        if harness.failed:
            return harness
    harness.drain()
    return harness


def run_sim(scheduling: str, mutant: str | None = None, seeds: int = SEEDS) -> CheckerVerdict:
    """Run ``seeds`` seeded workloads under ``scheduling`` ("sync" or "async"); the first violation
    is the result, with its step list."""
    started = time.perf_counter()
    result = CheckerVerdict(scheduling, "sim")
    steps = requests = violating = 0
    reached: Counter[str] = Counter()
    for seed in range(seeds):
        config = seed_config(seed, scheduling == "async", mutant)
        harness = run_seed(seed, config)
        steps += harness.steps
        requests += len(harness.requests)
        reached.update(harness.reached)
        if harness.failed:
            violating += 1
            if result.result == "success":
                first = harness.findings[0]
                result.result, result.invariant, result.error = "violation", first.invariant, first.message
                result.trace = [f"seed {seed}: {config}", *harness.trace()]
    result.details = {"seeds": seeds, "seeds_with_violations": violating, "steps": steps, "requests": requests,
                      "reached": dict(sorted(reached.items()))}
    result.seconds = time.perf_counter() - started
    return result
