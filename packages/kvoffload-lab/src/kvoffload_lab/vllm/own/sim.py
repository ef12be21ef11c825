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

from kvoffload_lab.vllm.common.connector_actions import ABORT, FAIL_TRANSFER, RESET
from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.seeded import Rate, SeedTally, run_seeded
from kvoffload_lab.vllm.own.build import OwnShape
from kvoffload_lab.vllm.own.harness import OwnConfig, OwnHarness

SEEDS = 30
MAX_STEPS = 500
# Between two steps: this folder's actions besides adding requests (the conversations') and stepping;
# half the aborts arrive inside the next step, half the resets preempt the running requests.
RATES = (Rate(ABORT, 0.03, lambda rng: {"mid_step": rng.random() < 0.5}),
         Rate(RESET, 0.01, lambda rng: {"running": rng.random() < 0.5}),
         Rate(FAIL_TRANSFER, 0.02))


def seed_config(seed: int, async_scheduling: bool, mutant: str | None = None) -> OwnConfig:
    """The engine of seed ``seed``."""
    rng = random.Random(seed)
    shape = OwnShape(block_size=4, gpu_blocks=rng.choice((8, 12, 24)), cpu_chunks=rng.choice((4, 8, 64)),
                     blocks_per_chunk=rng.choice((1, 2)), max_batched_tokens=rng.choice((8, 16, 32)),
                     max_seqs=rng.choice((2, 4)))
    return OwnConfig(shape=shape, delay=rng.choice((1, 2, 3)), async_scheduling=async_scheduling, mutant=mutant)


def run_sim(scheduling: str, mutant: str | None = None, seeds: int = SEEDS) -> CheckerVerdict:
    """Run ``seeds`` seeded workloads under ``scheduling`` ("sync" or "async"); the first violation
    is the result, with its step list."""
    started = time.perf_counter()
    result = CheckerVerdict(scheduling, "sim")
    tally = SeedTally(result, seeds)
    reached: Counter[str] = Counter()
    for seed in range(seeds):
        config = seed_config(seed, scheduling == "async", mutant)
        harness = run_seeded(OwnHarness(config), seed, RATES, MAX_STEPS)
        reached.update(harness.reached)
        tally.add(seed, config, harness)
    result.details = {**tally.details(), "reached": dict(sorted(reached.items()))}
    result.seconds = time.perf_counter() - started
    return result
