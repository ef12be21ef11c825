"""The hypothesis stateful checker: random programs of engine events against vLLM's connector.

Rules add requests (fresh prompts, or extensions of an earlier prompt so prefixes are shared and
the CPU tier is hit), step the engine, abort a live request, and reset the cache (as
``reset_prefix_cache(reset_connector=True)`` does, whatever runs); the GPU pool is small, so the
engine preempts, and the worker delay and async scheduling are drawn per program. After every rule
every check of the harness must hold; at the end the engine drains, nothing may leak, and vLLM's
connector is shut down. Hypothesis shrinks a failing program to a short one, printed as the step
list. :class:`~kvoffload_lab.vllm.check.findings.UnsupportedVllmApi` (kvoffload's harness failing, not
vLLM) is no finding: it leaves the checker as raised.
"""

from __future__ import annotations

import io
import time
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.reporting import with_reporter
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvoffload_lab.vllm.check.build import ConnectorShape
from kvoffload_lab.vllm.check.compat import PrivateReads
from kvoffload_lab.vllm.check.findings import CheckerVerdict
from kvoffload_lab.vllm.check.harness import Harness, HarnessConfig

EXAMPLES = 100
STEPS = 25
SHAPE = ConnectorShape(block_size=4, gpu_blocks=10, cpu_chunks=4)
TOKENS = st.lists(st.integers(1, 3), min_size=4, max_size=12)


class Finding(AssertionError):
    """A check of the harness failed."""


def machine_for(manager: str, reads: PrivateReads) -> type[RuleBasedStateMachine]:
    class VllmConnectorMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.harness: Harness | None = None
            self.prompts: list[list[int]] = []

        @initialize(delay=st.integers(0, 2), async_scheduling=st.booleans(), empty_step_reports=st.booleans())
        def build(self, delay: int, async_scheduling: bool, empty_step_reports: bool) -> None:
            config = HarnessConfig(shape=SHAPE, delay_steps=delay, async_scheduling=async_scheduling,
                                   empty_step_reports=empty_step_reports,
                                   eos_probability=0.0, max_batched_tokens=8, max_running=3)
            self.harness = Harness(manager, config, reads)

        @property
        def h(self) -> Harness:
            assert self.harness is not None
            return self.harness

        @rule(tokens=TOKENS, extend=st.booleans(), max_tokens=st.integers(1, 4))
        def add_request(self, tokens: list[int], extend: bool, max_tokens: int) -> None:
            prompt = (self.prompts[-1] + tokens) if extend and self.prompts else tokens
            if len(prompt) + max_tokens > SHAPE.gpu_blocks * SHAPE.block_size - SHAPE.block_size:
                prompt = tokens
            self.prompts.append(prompt)
            self.h.engine.add_request(prompt, max_tokens)

        @rule()
        def step(self) -> None:
            self.h.step()

        @precondition(lambda self: self.harness is not None and bool(self.harness.engine.requests))
        @rule(data=st.data())
        def abort(self, data: Any) -> None:
            victim = data.draw(st.sampled_from(sorted(self.h.engine.requests)))
            self.h.abort(victim)

        @precondition(lambda self: self.harness is not None and not self.harness.reset_blocked)
        @rule()
        def reset_cache(self) -> None:
            self.h.reset_cache()

        @invariant()
        def checks_hold(self) -> None:
            if self.harness is not None and self.harness.findings:
                first = self.harness.findings[0]
                raise Finding(f"{first.invariant}: {first.message}")

        def teardown(self) -> None:
            # Hypothesis runs teardown after a failing rule too: a finding there was raised already.
            if self.harness is None:
                return
            found_before = self.harness.failed
            try:
                if not found_before:
                    self.harness.drain()
            finally:
                self.harness.close()
            if self.harness.findings and not found_before:
                first = self.harness.findings[0]
                raise Finding(f"{first.invariant}: {first.message} (after the drain)")

    return VllmConnectorMachine


def search(machine: type[RuleBasedStateMachine], examples: int, steps: int) -> tuple[Finding, list[str]] | None:
    """Run ``machine`` (derandomized, no database); the first :class:`Finding` it raises with
    hypothesis' shrunk program as lines you can paste, or None when every example passed."""
    out = io.StringIO()
    budget = settings(max_examples=examples, stateful_step_count=steps, deadline=None, derandomize=True,
                      database=None, suppress_health_check=list(HealthCheck), print_blob=False,
                      report_multiple_bugs=False)
    try:
        with with_reporter(lambda text: out.write(f"{text}\n")):
            run_state_machine_as_test(machine, settings=budget)
    except Finding as finding:
        printed = out.getvalue().splitlines() + [
            line for note in getattr(finding, "__notes__", []) for line in str(note).splitlines()
        ]
        program = []
        for line in printed:
            if line.startswith("Explanation"):
                break
            if line.strip() and "checks_hold()" not in line and not line.startswith(("Falsifying", "Failing")):
                program.append(line)
        return finding, program
    return None


def run_hypothesis(manager: str, reads: PrivateReads, examples: int = EXAMPLES) -> CheckerVerdict:
    """Run the machine; a failure is reported with hypothesis' shrunk program as the step list."""
    started = time.perf_counter()
    result = CheckerVerdict(manager, "hypothesis", details={"examples": examples, "steps_per_example": STEPS})
    found = search(machine_for(manager, reads), examples, STEPS)
    if found is not None:
        finding, program = found
        invariant_name, _, message = str(finding).partition(": ")
        result.result = "violation"
        result.invariant = invariant_name
        result.error = message
        result.trace = program
    result.seconds = time.perf_counter() - started
    return result
