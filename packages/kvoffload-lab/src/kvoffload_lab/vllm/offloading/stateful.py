"""The hypothesis stateful checker: random programs of engine events against vLLM's connector.

:class:`OffloadingMachine` is :class:`~kvoffload_lab.vllm.common.search.ConnectorMachine` on this
folder's actions: it adds requests (fresh prompts, or extensions of an earlier prompt so prefixes
are shared and the CPU tier is hit), steps the engine, aborts a live request, and resets the cache
(as ``reset_prefix_cache(reset_connector=True)`` does, whatever runs); the GPU pool is small, so the
engine preempts, and the worker delay and async scheduling are drawn per program. After every rule
every check of the harness must hold; at the end the engine drains, nothing may leak, and vLLM's
connector is shut down. Hypothesis shrinks a failing program to a short one, printed as the step
list.
"""

from __future__ import annotations

from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize

from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.search import ConnectorMachine, run_machine
from kvoffload_lab.vllm.offloading.actions import ACTIONS
from kvoffload_lab.vllm.offloading.build import ConnectorShape
from kvoffload_lab.vllm.offloading.compat import PrivateReads
from kvoffload_lab.vllm.offloading.harness import Harness, HarnessConfig

EXAMPLES = 100
STEPS = 25
SHAPE = ConnectorShape(block_size=4, gpu_blocks=10, cpu_chunks=4)


class OffloadingMachine(ConnectorMachine):
    """Programs against one manager of vLLM's OffloadingConnector (``manager`` and ``reads`` are
    set by a subclass, :func:`run_hypothesis`'s, as they come from the vLLM found)."""

    actions = ACTIONS
    tokens = st.lists(st.integers(1, 3), min_size=4, max_size=12)
    max_tokens = st.integers(1, 4)
    request_prefix = "req-"
    extends_output = False
    manager: ClassVar[str]
    reads: ClassVar[PrivateReads]

    @initialize(delay=st.integers(0, 2), async_scheduling=st.booleans(), empty_step_reports=st.booleans())
    def build(self, delay: int, async_scheduling: bool, empty_step_reports: bool) -> None:
        config = HarnessConfig(shape=SHAPE, delay_steps=delay, async_scheduling=async_scheduling,
                               empty_step_reports=empty_step_reports,
                               eos_probability=0.0, max_batched_tokens=8, max_running=3)
        self.start(Harness(self.manager, config, self.reads), f"Harness({self.manager!r}, {config!r}, reads)")

    def close(self) -> None:
        self.harness.close()


def run_hypothesis(manager: str, reads: PrivateReads, examples: int = EXAMPLES) -> CheckerVerdict:
    """Run the machine; a failure is reported with the shrunk program as the step list."""
    machine = type(f"OffloadingMachine_{manager}", (OffloadingMachine,), {"manager": manager, "reads": reads})
    return run_machine(manager, machine, examples, STEPS)
