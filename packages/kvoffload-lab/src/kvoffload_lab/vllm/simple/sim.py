"""The simulator's checker: seeded multi-turn conversations through vLLM's scheduler and connector.

Each seed draws an engine (GPU blocks few enough to preempt or plenty; a CPU tier that fills or one
too big to fill, where an eager connector's losses are counted; token budget; copy delay) and a workload: users whose
turns extend their conversation so far (prefix hits on the GPU and the CPU tier), aborts of live
requests and ``reset_prefix_cache(reset_connector=True)`` between steps, then a drain. A safety
violation ends the check with its step list; losses are summed over every seed.
"""

from __future__ import annotations

import random
import time

from kvoffload_lab.vllm.common.connector_actions import ABORT, RESET
from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.seeded import Rate, SeedTally, run_seeded
from kvoffload_lab.vllm.simple.build import SimpleShape
from kvoffload_lab.vllm.simple.compat import SimpleReads
from kvoffload_lab.vllm.simple.harness import LOSS, SimpleConfig, SimpleHarness

SEEDS = 30
MAX_STEPS = 600
# Between two steps: this folder's actions besides adding requests (the conversations') and stepping.
RATES = (Rate(ABORT, 0.02), Rate(RESET, 0.01))


def seed_config(seed: int, lazy: bool) -> SimpleConfig:
    """The engine of seed ``seed``."""
    rng = random.Random(seed)
    shape = SimpleShape(block_size=4, gpu_blocks=rng.choice((8, 12, 24)), cpu_blocks=rng.choice((6, 16, 200)),
                        max_batched_tokens=rng.choice((8, 16, 32)), max_seqs=rng.choice((2, 4)), lazy=lazy)
    return SimpleConfig(shape=shape, delay=rng.choice((1, 2, 3)))


def run_sim(mode: str, reads: SimpleReads, seeds: int = SEEDS) -> CheckerVerdict:
    """Run ``seeds`` seeded workloads: the first safety violation is the result, with its step list;
    lost blocks are counted over every seed (``details``), the first with its step list."""
    started = time.perf_counter()
    lazy = mode == "lazy"
    result = CheckerVerdict(mode, "sim")
    tally = SeedTally(result, seeds)
    losses: list[str] = []
    lossy_seeds: list[int] = []
    for seed in range(seeds):
        harness = run_seeded(SimpleHarness(seed_config(seed, lazy), reads), seed, RATES, MAX_STEPS)
        tally.add(seed, seed_config(seed, lazy), harness)
        if harness.losses:
            if not lossy_seeds:
                loss_trace = [f"seed {seed}: {seed_config(seed, lazy)}", *harness.trace()]
            lossy_seeds.append(seed)
            losses += harness.losses
    result.details = {**tally.details(), "lost_blocks": len(losses), "seeds_with_losses": len(lossy_seeds)}
    if losses:
        loss = {"invariant": LOSS, "error": losses[0], "trace": loss_trace}
        if result.result == "success":
            result.result, result.invariant, result.error, result.trace = "loss", LOSS, losses[0], loss_trace
        else:
            result.details["loss"] = loss
    result.seconds = time.perf_counter() - started
    return result
