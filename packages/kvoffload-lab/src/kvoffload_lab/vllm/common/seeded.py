"""The seeded run of a connector's simulator checker: conversations, and the folder's actions drawn
between engine steps.

:class:`Conversations` are users taking turns (each turn the conversation so far plus a new
message, so that prefixes are hit on the GPU and in the CPU tier). :func:`run_seeded` steps the
harness as vLLM's engine would (only while it has work) and, between two steps, draws each of the
folder's :class:`Rate`\\ s: an abort of a live request, a cache reset, a failed transfer, with the
options the folder draws for it; then the harness drains.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvoffload_lab.vllm.common.connector_actions import ABORT, ADD, STEP, Action
from kvoffload_lab.vllm.common.findings import CheckerVerdict


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

    def tick(self, harness: Any) -> None:
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
            ADD.apply(harness, {"request_id": request_id, "prompt": prompt, "max_tokens": max_tokens})
            self.waiting[user] = request_id
            self.turns_taken[user] = self.turns_taken.get(user, 0) + 1
            self.count += 1

    @property
    def done(self) -> bool:
        return not self.waiting and all(self.turns_taken.get(u, 0) >= self.turns for u in range(self.users))


def _no_options(rng: random.Random) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Rate:
    """``action`` between two steps with ``probability`` (an abort only while a request is live, on
    one of them), with the keyword arguments ``options`` draws."""

    action: Action
    probability: float
    options: Callable[[random.Random], dict[str, Any]] = _no_options


def run_seeded(harness: Any, seed: int, rates: tuple[Rate, ...], max_steps: int) -> Any:
    """One seeded run of ``harness``, drained unless a step found something."""
    rng = random.Random(seed + 1000)
    conversations = Conversations(rng)
    for _ in range(max_steps):
        conversations.tick(harness)
        if conversations.done and not harness.busy:
            break
        for rate in rates:
            live = harness.live_requests()
            if (rate.action == ABORT and not live) or rng.random() >= rate.probability:
                continue
            args = {"request_id": rng.choice(live)} if rate.action == ABORT else {}
            rate.action.apply(harness, {**args, **rate.options(rng)})
        # vLLM's engine steps only while it has work; an idle one waits for the next request.
        if harness.busy:
            STEP.apply(harness, {})
        if harness.failed:
            return harness
    harness.drain()
    return harness


@dataclass
class SeedTally:
    """What a connector's seeded runs found: their counts, and the first violation with its step
    list (the seed and its engine, then the harness's trace)."""

    result: CheckerVerdict
    seeds: int
    steps: int = 0
    requests: int = 0
    violating: int = 0

    def add(self, seed: int, config: Any, harness: Any) -> None:
        self.steps += harness.steps
        self.requests += len(harness.requests)
        if not harness.failed:
            return
        self.violating += 1
        if self.result.result == "success":
            first = harness.findings[0]
            self.result.result, self.result.invariant, self.result.error = "violation", first.invariant, first.message
            self.result.trace = [f"seed {seed}: {config}", *harness.trace()]

    def details(self) -> dict[str, Any]:
        return {"seeds": self.seeds, "seeds_with_violations": self.violating, "steps": self.steps,
                "requests": self.requests}
