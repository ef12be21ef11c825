"""The hypothesis stateful checker: random programs of engine events through vLLM's scheduler and
``KVOffloadConnector``.

Rules add requests (fresh prompts, or the whole of an earlier request, output included, plus a new
message, so that prefixes are shared on the GPU and in the CPU tier), step the engine, abort a live
request (between steps, or inside the next step just before its output is processed), reset the
prefix cache with the connector (with or without ``reset_running_requests``) and make the next
transfer fail; the engine's shape and the polls a copy takes are drawn per program. After every
rule every check must hold; at the end the engine drains and nothing may be held. Hypothesis
shrinks a failing program, printed as the step list.
"""

from __future__ import annotations

import time
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kvoffload_lab.vllm.check.findings import CheckerVerdict
from kvoffload_lab.vllm.check.stateful import Finding, search
from kvoffload_lab.vllm.own.build import OwnShape
from kvoffload_lab.vllm.own.harness import OwnConfig, OwnHarness

# The mutant needs an abort inside the step after a sampled token: ~300 programs reach it.
EXAMPLES = 300
STEPS = 30
TOKENS = st.lists(st.integers(1, 3), min_size=3, max_size=10)


def machine_for(scheduling: str, mutant: str | None = None) -> type[RuleBasedStateMachine]:
    """The machine for ``scheduling`` ("sync" or "async"): it fails on the first violation."""

    class OwnConnectorMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.harness: OwnHarness | None = None
            self.count = 0

        @initialize(gpu_blocks=st.sampled_from((6, 10, 16)), cpu_chunks=st.sampled_from((2, 6, 64)),
                    blocks_per_chunk=st.sampled_from((1, 2)), budget=st.sampled_from((8, 16)),
                    delay=st.integers(1, 3))
        def build(self, gpu_blocks: int, cpu_chunks: int, blocks_per_chunk: int, budget: int, delay: int) -> None:
            shape = OwnShape(block_size=4, gpu_blocks=gpu_blocks, cpu_chunks=cpu_chunks,
                             blocks_per_chunk=blocks_per_chunk, max_batched_tokens=budget, max_seqs=3)
            self.harness = OwnHarness(OwnConfig(shape=shape, delay=delay, async_scheduling=scheduling == "async",
                                                mutant=mutant))

        @property
        def h(self) -> OwnHarness:
            assert self.harness is not None
            return self.harness

        @rule(tokens=TOKENS, extend=st.booleans(), max_tokens=st.integers(1, 5))
        def add_request(self, tokens: list[int], extend: bool, max_tokens: int) -> None:
            earlier = list(self.h.requests.values())
            prompt = list(earlier[-1].request.all_token_ids) + tokens if extend and earlier else tokens
            # The whole conversation must fit the GPU cache, or vLLM refuses the request.
            shape = self.h.config.shape
            if len(prompt) + max_tokens > (shape.gpu_blocks - 1) * shape.block_size:
                prompt = tokens
            self.h.add_request(f"r{self.count}", prompt, max_tokens)
            self.count += 1

        @rule()
        def step(self) -> None:
            self.h.step()

        @precondition(lambda self: self.harness is not None and bool(self.harness.live_requests()))
        @rule(data=st.data(), mid_step=st.booleans())
        def abort(self, data: Any, mid_step: bool) -> None:
            self.h.abort(data.draw(st.sampled_from(self.h.live_requests())), mid_step)

        @rule(running=st.booleans())
        def reset_prefix_cache(self, running: bool) -> None:
            self.h.reset_cache(running)

        @rule()
        def fail_next_transfer(self) -> None:
            self.h.fail_next_transfer()

        @invariant()
        def checks_hold(self) -> None:
            if self.harness is not None and self.harness.findings:
                first = self.harness.findings[0]
                raise Finding(f"{first.invariant}: {first.message}")

        def teardown(self) -> None:
            # Hypothesis runs teardown after a failing rule too: that finding was raised already.
            if self.harness is None or self.harness.findings:
                return
            self.harness.drain()
            if self.harness.findings:
                first = self.harness.findings[0]
                raise Finding(f"{first.invariant}: {first.message} (after the drain)")

    return OwnConnectorMachine


def run_hypothesis(scheduling: str, mutant: str | None = None, examples: int = EXAMPLES) -> CheckerVerdict:
    """Search for a violation; one found is reported with its shrunk program."""
    started = time.perf_counter()
    result = CheckerVerdict(scheduling, "hypothesis", details={"examples": examples, "steps_per_example": STEPS})
    found = search(machine_for(scheduling, mutant), examples, STEPS)
    if found is not None:
        finding, program = found
        result.result = "violation"
        result.invariant, _, result.error = str(finding).partition(": ")
        result.trace = program
    result.seconds = time.perf_counter() - started
    return result
