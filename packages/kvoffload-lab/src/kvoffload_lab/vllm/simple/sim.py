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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvoffload_lab.vllm.check.findings import CheckerVerdict
from kvoffload_lab.vllm.simple.build import SimpleShape
from kvoffload_lab.vllm.simple.compat import SimpleReads
from kvoffload_lab.vllm.simple.harness import LOSS, SimpleConfig, SimpleHarness

if TYPE_CHECKING:
    from kvoffload_lab.vllm.own.harness import OwnHarness

SEEDS = 30
MAX_STEPS = 600
ABORT_PROBABILITY = 0.02
RESET_PROBABILITY = 0.01


def seed_config(seed: int, lazy: bool) -> SimpleConfig:
    """The engine of seed ``seed``."""
    rng = random.Random(seed)
    shape = SimpleShape(block_size=4, gpu_blocks=rng.choice((8, 12, 24)), cpu_blocks=rng.choice((6, 16, 200)),
                        max_batched_tokens=rng.choice((8, 16, 32)), max_seqs=rng.choice((2, 4)), lazy=lazy)
    return SimpleConfig(shape=shape, delay=rng.choice((1, 2, 3)))


@dataclass
class Conversations:
    """Users taking turns: each turn is the conversation so far plus a new message."""

    rng: random.Random
    users: int = 4
    turns: int = 3
    history: dict[int, list[int]] = field(default_factory=dict)
    waiting: dict[int, str] = field(default_factory=dict)  # user -> request id of the turn in flight
    turns_taken: dict[int, int] = field(default_factory=dict)
    count: int = 0

    def tick(self, harness: SimpleHarness | OwnHarness) -> None:
        """Start a turn for each user whose last one finished (with probability one half)."""
        live = set(harness.live_requests())
        for user in range(self.users):
            request_id = self.waiting.get(user)
            if request_id is not None:
                if request_id in live:
                    continue
                added = harness.requests[request_id]
                self.history[user] = list(added.request.all_token_ids)
                del self.waiting[user]
            if self.turns_taken.get(user, 0) >= self.turns or self.rng.random() < 0.5:
                continue
            message = [self.rng.randint(1, 5) for _ in range(self.rng.randint(3, 10))]
            prompt = self.history.get(user, [100 + user] * 4) + message
            max_tokens = self.rng.randint(1, 6)
            shape = harness.config.shape
            if len(prompt) + max_tokens > (shape.gpu_blocks - 1) * shape.block_size:
                # A conversation the GPU cache cannot hold would wait forever: the user starts anew.
                prompt = [100 + user] * 4 + message
            request_id = f"u{user}t{self.turns_taken.get(user, 0)}"
            harness.add_request(request_id, prompt, max_tokens)
            self.waiting[user] = request_id
            self.turns_taken[user] = self.turns_taken.get(user, 0) + 1
            self.count += 1

    @property
    def done(self) -> bool:
        return not self.waiting and all(self.turns_taken.get(u, 0) >= self.turns for u in range(self.users))


def run_seed(seed: int, lazy: bool, reads: SimpleReads) -> SimpleHarness:
    """One seeded run, drained."""
    harness = SimpleHarness(seed_config(seed, lazy), reads)
    rng = random.Random(seed + 1000)
    conversations = Conversations(rng)
    for _ in range(MAX_STEPS):
        conversations.tick(harness)
        if conversations.done and not harness.busy:
            break
        live = harness.live_requests()
        if live and rng.random() < ABORT_PROBABILITY:
            harness.abort(rng.choice(live))
        if rng.random() < RESET_PROBABILITY:
            harness.reset_cache()
        # vLLM's engine steps only while it has work; an idle one waits for the next request.
        if harness.busy:
            harness.step()
        if harness.failed:
            return harness
    harness.drain()
    return harness


def run_sim(mode: str, reads: SimpleReads, seeds: int = SEEDS) -> CheckerVerdict:
    """Run ``seeds`` seeded workloads: the first safety violation is the result, with its step list;
    lost blocks are counted over every seed (``details``), the first with its step list."""
    started = time.perf_counter()
    lazy = mode == "lazy"
    result = CheckerVerdict(mode, "sim")
    steps = requests = violating = 0
    losses: list[str] = []
    lossy_seeds: list[int] = []
    for seed in range(seeds):
        harness = run_seed(seed, lazy, reads)
        steps += harness.steps
        requests += len(harness.requests)
        if harness.failed:
            violating += 1
            if result.result == "success":
                first = harness.findings[0]
                result.result, result.invariant, result.error = "violation", first.invariant, first.message
                result.trace = [f"seed {seed}: {seed_config(seed, lazy)}", *harness.trace()]
        if harness.losses:
            if not lossy_seeds:
                loss_trace = [f"seed {seed}: {seed_config(seed, lazy)}", *harness.trace()]
            lossy_seeds.append(seed)
            losses += harness.losses
    result.details = {"seeds": seeds, "seeds_with_violations": violating, "steps": steps, "requests": requests,
                      "lost_blocks": len(losses), "seeds_with_losses": len(lossy_seeds)}
    if losses:
        loss = {"invariant": LOSS, "error": losses[0], "trace": loss_trace}
        if result.result == "success":
            result.result, result.invariant, result.error, result.trace = "loss", LOSS, losses[0], loss_trace
        else:
            result.details["loss"] = loss
    result.seconds = time.perf_counter() - started
    return result
