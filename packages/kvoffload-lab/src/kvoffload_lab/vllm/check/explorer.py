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
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any

from kvoffload.lifecycles.invariants import Violation
from kvoffload_lab.statemachine.explore import explore
from kvoffload_lab.vllm.check.build import ConnectorShape
from kvoffload_lab.vllm.check.compat import PrivateReads
from kvoffload_lab.vllm.check.findings import CheckerVerdict, UnsupportedVllmApi
from kvoffload_lab.vllm.check.harness import Harness, HarnessConfig

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


class VllmExploreModel:
    """The explorer's model (see :mod:`kvoffload_lab.statemachine.explore` for the protocol)."""

    def __init__(self, manager: str, reads: PrivateReads) -> None:
        self.manager = manager
        self.reads = reads
        # Every harness initial() built (the explorer calls it again to replay a counterexample).
        self.roots: list[Harness] = []
        # kvoffload's harness failing in a step: the explorer reports what a step raises as a
        # violation, so it is kept here and raised once the search is over.
        self.unsupported: UnsupportedVllmApi | None = None

    def initial(self) -> tuple[Harness, int, int]:
        config = HarnessConfig(shape=SHAPE, delay_steps=1, eos_probability=0.0, max_batched_tokens=4, max_running=2)
        self.roots.append(Harness(self.manager, config, self.reads))
        return self.roots[-1], 0, 0

    def close(self) -> list[Violation]:
        """Shut down the connectors initial() built; what their shutdown raised. Only those: every
        other state is a deepcopy that shares their shared-memory region (``_cloneable``)."""
        for harness in self.roots:
            harness.close()
        return [v for harness in self.roots for v in harness.findings]

    def actions(self, state: tuple[Harness, int, int]) -> list[tuple[str, str]]:
        harness, added, resets = state
        if harness.failed:
            return []
        found: list[tuple[str, str]] = []
        if added < REQUESTS:
            found.append(("add", f"req-{added}"))
        if harness.engine.requests or not harness.engine.idle:
            found.append(("step", ""))
        found += [("abort", rid) for rid in sorted(harness.engine.requests)]
        if resets < MAX_RESETS and not (harness.reset_blocked or harness.connector.finishes_in_flight):
            found.append(("reset_cache", ""))
        return found

    def action_name(self, action: tuple[str, str]) -> str:
        kind, arg = action
        return f"{kind}({arg})" if arg else kind

    def step(self, state: tuple[Harness, int, int], action: tuple[str, str]) -> tuple[Harness, int, int]:
        harness, added, resets = state
        with _cloneable():
            harness = copy.deepcopy(harness)
        kind, arg = action
        try:
            if kind == "add":
                harness.engine.add_request(_prompt(added), 1, arg)
                added += 1
            elif kind == "step":
                harness.step()
            elif kind == "abort":
                harness.abort(arg)
            else:
                harness.reset_cache()
                resets += 1
        except UnsupportedVllmApi as error:
            self.unsupported = self.unsupported or error
            raise
        return harness, added, resets

    def invariants(self, state: tuple[Harness, int, int]) -> list[tuple[str, str]]:
        return [(v.invariant, v.message) for v in state[0].findings[:1]]

    def is_final(self, state: tuple[Harness, int, int]) -> bool:
        harness, added, _ = state
        return added == REQUESTS and not harness.engine.requests

    def drain(self, state: tuple[Harness, int, int]) -> list[tuple[str, str]]:
        with _cloneable():
            harness = copy.deepcopy(state[0])
        harness.drain()
        return [(v.invariant, v.message) for v in harness.findings[:1]]

    def fingerprint(self, state: tuple[Harness, int, int]) -> Hashable:
        harness, added, resets = state
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
            added, resets, requests, tuple(sorted(engine.held)), jobs,
            tuple(sorted(ledger.signals.items())), tuple(sorted((k, len(p)) for k, p in ledger.pins.items())),
            tuple(self.reads.tracked_requests(connector.connector)),
            len(self.reads.jobs_in_flight(connector.connector)),
            *connector.finishes_not_yet_reported, harness.reset_since_step,
            tuple(engine.pool.ref_cnt),
            bytes(worker.cpu.numpy().tobytes()), bool(harness.findings),
        )


def run_explorer(manager: str, reads: PrivateReads) -> CheckerVerdict:
    """Explore within the bounds; the first violation found is a shortest one."""
    started = time.perf_counter()
    model = VllmExploreModel(manager, reads)
    try:
        outcome = explore(model, max_depth=MAX_DEPTH, max_states=MAX_STATES, drain="final")
    finally:
        shutdown = model.close()
    if model.unsupported is not None:
        raise model.unsupported
    result = CheckerVerdict(manager, "explore", details={
        "requests": REQUESTS, "chunks": CHUNKS, "max_depth": MAX_DEPTH, "states": outcome.states,
        "transitions": outcome.transitions, "depth": outcome.depth, "complete": outcome.complete,
    })
    if outcome.violations:
        first = outcome.violations[0]
        result.result = "violation"
        result.invariant = first.invariant
        result.error = first.message
        result.trace = [step.action + (f" -> raised {step.error}" if step.error else "") for step in first.trace]
    elif shutdown:
        result.result = "violation"
        result.invariant = shutdown[0].invariant
        result.error = shutdown[0].message
        result.trace = ["shut the connector down"]
    result.seconds = time.perf_counter() - started
    return result
