"""The hypothesis stateful checker: random programs of engine events through vLLM's scheduler and
``SimpleCPUOffloadConnector``.

Rules add requests (fresh prompts, or the whole of an earlier request, output included, plus a new
message, so that prefixes are shared and a finished request's last blocks are asked for), step the
engine, abort a live request and reset the prefix cache with the connector; the engine's shape and
copy delay are drawn per program. After every rule every safety check must hold; at the end the
engine drains and nothing may be held. Hypothesis shrinks a failing program, printed as the step
list. Losses are searched for in a second pass, once no safety violation was found, so that a
lost block never hides a safety violation.
"""

from __future__ import annotations

import time
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from kvoffload_lab.vllm.check.findings import CheckerVerdict
from kvoffload_lab.vllm.check.stateful import Finding, search
from kvoffload_lab.vllm.simple.build import SimpleShape
from kvoffload_lab.vllm.simple.compat import SimpleReads
from kvoffload_lab.vllm.simple.harness import LOSS, SimpleConfig, SimpleHarness

EXAMPLES = 60
STEPS = 30
TOKENS = st.lists(st.integers(1, 3), min_size=3, max_size=10)


def machine_for(mode: str, reads: SimpleReads, losses: bool) -> type[RuleBasedStateMachine]:
    """The machine for ``mode`` ("eager" or "lazy"): it fails on a safety violation, or, with
    ``losses``, only on a lost block (the safety pass reports the rest)."""

    class SimpleConnectorMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.harness: SimpleHarness | None = None
            self.count = 0

        @initialize(gpu_blocks=st.sampled_from((6, 10, 16)), cpu_blocks=st.sampled_from((4, 12, 100)),
                     budget=st.sampled_from((8, 16)), delay=st.integers(1, 3))
        def build(self, gpu_blocks: int, cpu_blocks: int, budget: int, delay: int) -> None:
            shape = SimpleShape(block_size=4, gpu_blocks=gpu_blocks, cpu_blocks=cpu_blocks,
                                max_batched_tokens=budget, max_seqs=3, lazy=mode == "lazy")
            self.harness = SimpleHarness(SimpleConfig(shape=shape, delay=delay), reads)

        @property
        def h(self) -> SimpleHarness:
            assert self.harness is not None
            return self.harness

        @rule(tokens=TOKENS, extend=st.booleans(), max_tokens=st.integers(1, 5))
        def add_request(self, tokens: list[int], extend: bool, max_tokens: int) -> None:
            earlier = list(self.h.requests.values())
            prompt = list(earlier[-1].request.all_token_ids) + tokens if extend and earlier else tokens
            # The whole conversation must fit the GPU cache, or vLLM refuses the request.
            if len(prompt) + max_tokens > (self.h.config.shape.gpu_blocks - 1) * self.h.config.shape.block_size:
                prompt = tokens
            self.h.add_request(f"r{self.count}", prompt, max_tokens)
            self.count += 1

        @rule()
        def step(self) -> None:
            self.h.step()

        @precondition(lambda self: self.harness is not None and bool(self.harness.live_requests()))
        @rule(data=st.data())
        def abort(self, data: Any) -> None:
            self.h.abort(data.draw(st.sampled_from(self.h.live_requests())))

        @rule()
        def reset_prefix_cache(self) -> None:
            self.h.reset_cache()

        @invariant()
        def checks_hold(self) -> None:
            if self.harness is not None and self.harness.findings and not losses:
                first = self.harness.findings[0]
                raise Finding(f"{first.invariant}: {first.message}")

        def teardown(self) -> None:
            # Hypothesis runs teardown after a failing rule too: a finding there was raised already,
            # and kvoffload's harness failing (UnsupportedVllmApi) leaves nothing to drain.
            if self.harness is None or self.harness.unsupported is not None or (self.harness.findings and not losses):
                return
            if not self.harness.findings:
                self.harness.drain()
            if self.harness.findings and not losses:
                first = self.harness.findings[0]
                raise Finding(f"{first.invariant}: {first.message} (after the drain)")
            if losses and self.harness.losses:
                raise Finding(f"{LOSS}: {self.harness.losses[0]} (after the drain)")

    return SimpleConnectorMachine


def run_hypothesis(mode: str, reads: SimpleReads, examples: int = EXAMPLES) -> CheckerVerdict:
    """Search for a safety violation, then for a loss; each found is reported with its shrunk program
    (a loss beside a violation in ``details["loss"]``)."""
    started = time.perf_counter()
    result = CheckerVerdict(mode, "hypothesis", details={"examples": examples, "steps_per_example": STEPS})
    for losses in (False, True):
        found = search(machine_for(mode, reads, losses), examples, STEPS)
        if found is None:
            continue
        finding, program = found
        invariant_name, _, message = str(finding).partition(": ")
        if result.result == "success":
            result.result = "loss" if losses else "violation"
            result.invariant, result.error, result.trace = invariant_name, message, program
        else:
            result.details["loss"] = {"invariant": invariant_name, "error": message, "trace": program}
    result.seconds = time.perf_counter() - started
    return result
