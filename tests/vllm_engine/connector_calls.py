"""Records the calls vLLM's scheduler makes to the scheduler-side KV connector of a live engine.

The explorer's model lets ``reset_cache`` fall only between engine steps, never between an
admission (``update_state_after_alloc``) and that step's ``build_connector_meta``. This recorder
is the real engine's side of that claim: it wraps the methods of the connector object the engine's
scheduler holds (``KVOffloadConnector``, or vLLM's ``OffloadingConnector`` around
``KVOffloadSpec``: the object vLLM's ``Scheduler`` calls in both cases), keeps the order of the
calls with what they carried, and lets a test check where the resets landed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# What vLLM's Scheduler calls on the connector (vllm/v1/core/sched/scheduler.py in 0.32.0):
# get_num_new_matched_tokens and update_state_after_alloc while admitting (~979, ~1289),
# build_connector_meta at the end of schedule() (~1561), update_connector_output in
# update_from_output (~3219), request_finished when a request is freed (~3051; the connectors
# that support several KV-cache groups get request_finished_all_groups, ~3055) and reset_cache
# from reset_prefix_cache(reset_connector=True) (~2885).
RECORDED = (
    "get_num_new_matched_tokens",
    "update_state_after_alloc",
    "build_connector_meta",
    "update_connector_output",
    "request_finished",
    "request_finished_all_groups",
    "reset_cache",
)


@dataclass(frozen=True)
class Call:
    """One connector call: ``step`` counts the ``build_connector_meta`` calls before it, so the
    calls of one ``schedule()`` share a step and its build closes it."""

    name: str
    step: int
    request: str | None = None
    # get_num_new_matched_tokens: the local (GPU) hit, the connector's answer, the preemptions so far.
    local_hit: int = 0
    external: int | None = None
    preemptions: int = 0
    # get_num_new_matched_tokens: the hashes of the blocks of the GPU hit.
    hit_blocks: frozenset[Any] = frozenset()
    # build_connector_meta: per scheduled request, (first token computed this step, tokens), and
    # the hashes of the blocks this step's forward pass fills.
    scheduled: tuple[tuple[str, int, int], ...] = ()
    filled_blocks: frozenset[Any] = frozenset()
    # build_connector_meta: the requests vLLM preempted since the last build (scheduler.py
    # ~1614; the connector learns of a preemption only here).
    preempted: tuple[str, ...] = ()


@dataclass
class CallLog:
    """The calls in order, and resets the test attempted (``mark``) for the report."""

    calls: list[Call] = field(default_factory=list)
    steps: int = 0

    def mark(self, name: str) -> None:
        """Note something the test did between calls (a reset it asked for, an abort, a step)."""
        self.calls.append(Call(name, self.steps))

    def inside_a_step(self, name: str = "reset_cache") -> list[int]:
        """Indices of ``name`` calls that fell between an admission call of a ``schedule()``
        (``get_num_new_matched_tokens`` or ``update_state_after_alloc``) and that step's
        ``build_connector_meta``: for ``reset_cache``, what the explorer's model rules out."""
        found = []
        admitting = False
        for index, call in enumerate(self.calls):
            if call.name in ("get_num_new_matched_tokens", "update_state_after_alloc"):
                admitting = True
            elif call.name == "build_connector_meta":
                admitting = False
            elif call.name == name and admitting:
                found.append(index)
        return found

    def admissions(self) -> list[Call]:
        """The get_num_new_matched_tokens calls that an update_state_after_alloc of the same
        request followed in the same step (vLLM asks again each step a request waits)."""
        admitted = {(c.request, c.step) for c in self.calls if c.name == "update_state_after_alloc"}
        return [c for c in self.calls if c.name == "get_num_new_matched_tokens" and (c.request, c.step) in admitted]

    def same_step_hits(self) -> list[Call]:
        """Admissions whose GPU hit includes a block that the same step's forward pass fills (for
        another request): the split-prefix case; with a connector load (``external``) and
        ``preemptions`` > 0, issue 36's admission."""
        filled = {c.step: c.filled_blocks for c in self.calls if c.name == "build_connector_meta"}
        return [call for call in self.admissions() if call.hit_blocks & filled.get(call.step, frozenset())]

    def names(self) -> list[str]:
        return [call.name for call in self.calls]


def _request_id(args: tuple[Any, ...]) -> str | None:
    return getattr(args[0], "request_id", None) if args else None


def record_calls(connector: Any, requests: Callable[[], dict[str, Any]], block_size: int) -> CallLog:
    """Wrap ``connector``'s scheduler-side methods (instance attributes shadow the class's, and
    vLLM's Scheduler calls them through this object) and return the log they append to;
    ``requests`` gives the scheduler's live requests, read when a step is built."""
    log = CallLog()

    def filled(request: Any, start: int, tokens: int) -> set[Any]:
        # The blocks that become full in [start, start + tokens): vLLM caches a block by its hash
        # as soon as its tokens are scheduled, before the forward pass writes it.
        hashes = request.block_hashes
        return {hashes[i] for i in range(start // block_size, min((start + tokens) // block_size, len(hashes)))}

    def wrap(name: str) -> None:
        original = getattr(connector, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            if name == "get_num_new_matched_tokens":
                request = args[0]
                log.calls.append(Call(
                    name, log.steps, request.request_id, local_hit=int(args[1]),
                    external=result[0], preemptions=int(request.num_preemptions),
                    hit_blocks=frozenset(request.block_hashes[: int(args[1]) // block_size]),
                ))
            elif name == "build_connector_meta":
                live = requests()
                scheduled = tuple(
                    (rid, int(live[rid].num_computed_tokens), int(n))
                    for rid, n in args[0].num_scheduled_tokens.items() if rid in live
                )
                blocks = set().union(*(filled(live[rid], start, n) for rid, start, n in scheduled))
                preempted = tuple(sorted(args[0].preempted_req_ids or ()))
                log.calls.append(Call(
                    name, log.steps, scheduled=scheduled, filled_blocks=frozenset(blocks), preempted=preempted
                ))
                log.steps += 1
            else:
                log.calls.append(Call(name.removesuffix("_all_groups"), log.steps, _request_id(args)))
            return result

        setattr(connector, name, recorded)

    for name in RECORDED:
        if hasattr(connector, name):
            wrap(name)
    return log
