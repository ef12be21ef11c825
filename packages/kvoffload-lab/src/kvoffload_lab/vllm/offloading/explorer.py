"""The explorer's checker: every interleaving of engine events within bounds, through vLLM's connector.

A model for the generic breadth-first explorer (:mod:`kvoffload_lab.statemachine.explore`): the state is
a whole :class:`Harness` (kvoffload's engine model, vLLM's connector scheduler with its real
manager, the pattern worker), cloned with ``copy.deepcopy`` for every successor. Actions: add one
of the requests (two chunks each, sharing the first; each produces one output token), step the
engine, abort a live request, and one ``reset_cache``. The worker completes jobs one step after
submission. Breadth-first order makes the first violation a shortest action sequence. After the
search the connectors of the initial states are shut down (every other state is a clone sharing
their shared-memory region).
"""

from __future__ import annotations

import copy
import mmap
import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from kvoffload.lifecycles.invariants import Violation
from kvoffload_lab.vllm.common.action_explore import ActionExploreModel
from kvoffload_lab.vllm.common.action_explore import run_explorer as run_action_explorer
from kvoffload_lab.vllm.common.connector_actions import ABORT, STEP, Action
from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.offloading.actions import ACTIONS
from kvoffload_lab.vllm.offloading.build import ConnectorShape
from kvoffload_lab.vllm.offloading.compat import PrivateReads
from kvoffload_lab.vllm.offloading.harness import Harness, HarnessConfig

REQUESTS = 2
CHUNKS = 2
MAX_DEPTH = 12
MAX_STATES = 1_500
MAX_RESETS = 1
SHAPE = ConnectorShape(block_size=4, gpu_blocks=5, cpu_chunks=3)

# Objects a clone shares instead of copying: the tiering manager's lock is re-created, its
# shared-memory region (which the pattern worker does not use) is shared.
_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


@contextmanager
def _cloneable() -> Iterator[None]:
    table = copy._deepcopy_dispatch  # type: ignore[attr-defined]
    added: dict[type, Any] = {cls: (lambda x, memo: threading.Lock()) for cls in _LOCK_TYPES if cls not in table}
    added.update({cls: (lambda x, memo: x) for cls in (mmap.mmap, memoryview) if cls not in table})
    table.update(added)
    try:
        yield
    finally:
        for cls in added:
            table.pop(cls, None)


def _prompt(index: int) -> list[int]:
    # Chunk 0 is shared by every request; chunk 1 is the request's own; one more token is left
    # for the engine to compute, so a full hit still schedules a token.
    size = SHAPE.block_size
    return [1] * size + [10 + index] * size * (CHUNKS - 1) + [7]


class VllmExploreModel(ActionExploreModel):
    """The explorer's model of vLLM's OffloadingConnector (see :mod:`kvoffload_lab.vllm.common.action_explore`)."""

    action_list = ACTIONS
    prompts = tuple(_prompt(index) for index in range(REQUESTS))
    request_prefix = "req-"

    def __init__(self, manager: str, reads: PrivateReads) -> None:
        super().__init__()
        self.manager = manager
        self.reads = reads
        # Every harness build() made (the explorer calls initial() again to replay a counterexample).
        self.roots: list[Harness] = []

    def build(self) -> Harness:
        config = HarnessConfig(shape=SHAPE, delay_steps=1, eos_probability=0.0, max_batched_tokens=4, max_running=2)
        self.roots.append(Harness(self.manager, config, self.reads))
        return self.roots[-1]

    def close(self) -> list[Violation]:
        """Shut down the connectors build() made; what their shutdown raised. Only those: every
        other state is a deepcopy that shares their shared-memory region (``_cloneable``)."""
        for harness in self.roots:
            harness.close()
        return [v for harness in self.roots for v in harness.findings]

    def clone(self, harness: Harness) -> Harness:
        with _cloneable():
            return copy.deepcopy(harness)

    def other_choices(self, harness: Harness, action: Action, used: int) -> list[dict[str, Any]]:
        if action == STEP:
            return [{}] if harness.busy else []
        if action == ABORT:
            return [{"request_id": rid} for rid in harness.live_requests()]
        return [{}] if used < MAX_RESETS and not (harness.reset_blocked or harness.connector.finishes_in_flight) else []

    def harness_fingerprint(self, harness: Harness) -> Hashable:
        engine, worker, connector = harness.engine, harness.worker, harness.connector
        requests = tuple(
            (r.request_id, r.status, r.num_computed_tokens, len(r.output), tuple(r.block_ids))
            for r in engine.requests.values()
        )
        jobs = tuple(sorted(
            (j.kind, j.request_id, tuple(j.gpu_blocks), tuple(j.cpu_blocks), j.due - worker.step)
            for j in [*worker.pending.values(), *worker.deferred]
        ))
        ledger = connector.proxy.ledger
        return (
            requests, tuple(sorted(engine.held)), jobs,
            tuple(sorted(ledger.signals.items())), tuple(sorted((k, len(p)) for k, p in ledger.pins.items())),
            tuple(self.reads.tracked_requests(connector.connector)),
            len(self.reads.jobs_in_flight(connector.connector)),
            *connector.finishes_not_yet_reported, harness.reset_since_step,
            tuple(engine.pool.ref_cnt),
            bytes(worker.cpu.numpy().tobytes()),
        )


def run_explorer(manager: str, reads: PrivateReads) -> CheckerVerdict:
    """Explore within the bounds; the first violation found is a shortest one."""
    return run_action_explorer(manager, lambda losses: VllmExploreModel(manager, reads), MAX_DEPTH, MAX_STATES,
                               {"requests": REQUESTS, "chunks": CHUNKS})
