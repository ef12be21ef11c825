"""The hypothesis stateful checker: random programs of engine events through vLLM's scheduler and
``KVOffloadConnector``.

:class:`KVOffloadMachine` is :class:`~kvoffload_lab.vllm.common.search.ConnectorMachine` on this
folder's actions: it adds requests (fresh prompts, or the whole of an earlier request, output
included, plus a new message, so that prefixes are shared on the GPU and in the CPU tier), steps the
engine, aborts a live request (between steps, or inside the next step just before its output is
processed), resets the prefix cache with the connector (with or without ``reset_running_requests``)
and makes the next transfer fail; the engine's shape and the polls a copy takes are drawn per
program. After every rule every check must hold; at the end the engine drains and nothing may be
held. Hypothesis shrinks a failing program, printed as the step list.
"""

from __future__ import annotations

from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize

from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.search import ConnectorMachine, run_machine
from kvoffload_lab.vllm.own.actions import ACTIONS
from kvoffload_lab.vllm.own.build import OwnShape
from kvoffload_lab.vllm.own.harness import OwnConfig, OwnHarness

# The mutant needs an abort inside the step after a sampled token: ~300 programs reach it.
EXAMPLES = 300
STEPS = 30
# Each scheduling's search seed, pinned: with the async one the search catches the mutant of
# tests/vllm_engine/test_vllm_async_scheduling.py within EXAMPLES, as the machine this one replaced
# did. They are the seeds hypothesis 6.170 derived from the class names "KVOffloadMachine_async__" and
# "KVOffloadMachine_sync__", which had been picked for it; a seed derived from a name changes with the
# name and with hypothesis.
SEARCH_SEEDS = {
    "sync": 0xFB44B2FBE30BE6D599FEB459D565F9ECD55A66A5385901C601DEAA8E81A32498CE73F1D33F5AE7EB6AB07D1575CBCDEF,
    "async": 0x3075F53360960DB3B985721DEEDE26B8D884430B713A4A0AC12E6640F1313F4AEBEAEC6CD552EF27E68DABFDCC93CAF1,
}


class KVOffloadMachine(ConnectorMachine):
    """Programs under one scheduling (``scheduling``, "sync" or "async", and ``mutant`` are set by a
    subclass, :func:`run_hypothesis`'s)."""

    actions = ACTIONS
    abort_options = st.fixed_dictionaries({"mid_step": st.booleans()})
    reset_options = st.fixed_dictionaries({"running": st.booleans()})
    scheduling: ClassVar[str]
    mutant: ClassVar[str | None]

    @initialize(gpu_blocks=st.sampled_from((6, 10, 16)), cpu_chunks=st.sampled_from((2, 6, 64)),
                blocks_per_chunk=st.sampled_from((1, 2)), budget=st.sampled_from((8, 16)),
                delay=st.integers(1, 3))
    def build(self, gpu_blocks: int, cpu_chunks: int, blocks_per_chunk: int, budget: int, delay: int) -> None:
        shape = OwnShape(block_size=4, gpu_blocks=gpu_blocks, cpu_chunks=cpu_chunks,
                         blocks_per_chunk=blocks_per_chunk, max_batched_tokens=budget, max_seqs=3)
        config = OwnConfig(shape=shape, delay=delay, async_scheduling=self.scheduling == "async", mutant=self.mutant)
        self.start(OwnHarness(config), f"OwnHarness({config!r})")


def run_hypothesis(scheduling: str, mutant: str | None = None, examples: int = EXAMPLES) -> CheckerVerdict:
    """Search for a violation; one found is reported with its shrunk program."""
    machine = type(f"KVOffloadMachine_{scheduling}", (KVOffloadMachine,), {
        "scheduling": scheduling, "mutant": mutant, "search_seed": SEARCH_SEEDS[scheduling]})
    return run_machine(scheduling, machine, examples, STEPS)
