"""Every public call of the scheduler and the manager is all-or-nothing.

A hypothesis state machine drives the simulated engine with valid traffic (new requests sharing
prefixes, steps with delayed and failing jobs, aborts, reset_cache) and, between steps or in the
middle of a step (after admission prepared its loads, before ``build_connector_meta`` hands them
out), throws a malformed call at the connector: unknown and duplicate ids, wrong states, negative,
oversized and wrongly typed numbers, completions of jobs never issued, already completed or not yet
handed out. Each malformed call must raise, and the whole state of the scheduler and its manager
(every attribute, recursively) must be identical before and after it. At the end the valid traffic
drains with no violation and no leak.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from kvoffload.lifecycles.request import FINISHED_PENDING_STORE, LOADING, PREEMPTED, RUNNING, SIGNALED, WAITING
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import ConnectorMetadata, OffloadConfig, SchedulerOutput, WorkerOutput
from kvoffload_lab.sim import Engine, EngineConfig
from support import full_state

BLOCK_SIZE = 4
GPU_BLOCKS = 12
TOKENS = st.lists(st.integers(1, 3), min_size=4, max_size=16)

Probe = tuple[str, Callable[[], Any]]


@dataclass
class Ghost:
    """A request the connector never saw (or one whose fields lie)."""

    request_id: str = "ghost"
    block_hashes: list[int] = field(default_factory=list)
    num_tokens: int = 8


class ProbedScheduler(OffloadingScheduler):
    """The real scheduler; ``before_build`` runs first in ``build_connector_meta``, when the loads
    prepared during admission exist but were not handed to the worker yet."""

    def __init__(self, config: OffloadConfig, manager: CPUOffloadingManager | None = None) -> None:
        super().__init__(config, manager)
        self.before_build: Callable[[], None] | None = None

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> ConnectorMetadata:
        hook, self.before_build = self.before_build, None
        if hook is not None:
            hook()
        return super().build_connector_meta(scheduler_output)


def malformed_calls(scheduler: OffloadingScheduler) -> list[Probe]:
    """Calls that must raise in the scheduler's current state, each with a name for the report."""
    manager = scheduler.manager
    trackers = scheduler.trackers
    by_state: dict[str, list[str]] = {}
    for rid, tracker in trackers.items():
        by_state.setdefault(tracker.state, []).append(rid)
    chunk = scheduler.config.chunk_tokens
    probes: list[Probe] = [
        ("lookup with negative tokens", lambda: scheduler.get_num_new_matched_tokens(Ghost(), -1)),
        ("lookup past the request's end", lambda: scheduler.get_num_new_matched_tokens(Ghost(), 9)),
        ("lookup with a str count", lambda: scheduler.get_num_new_matched_tokens(Ghost(), "0")),
        ("lookup with a float count", lambda: scheduler.get_num_new_matched_tokens(Ghost(), 0.0)),
        ("alloc for an unknown request", lambda: scheduler.update_state_after_alloc(Ghost(), [0], 0)),
        ("schedule an unknown request", lambda: scheduler.build_connector_meta(SchedulerOutput({"ghost": 1}))),
        ("preempt an unknown request", lambda: scheduler.build_connector_meta(SchedulerOutput(preempted=["ghost"]))),
        ("new blocks for an unknown request",
         lambda: scheduler.build_connector_meta(SchedulerOutput(new_block_ids={"ghost": [0]}))),
        ("complete a job never issued",
         lambda: scheduler.update_connector_output(WorkerOutput({scheduler._next_job_id + 3: True}))),
        ("complete job id 0", lambda: scheduler.update_connector_output(WorkerOutput({0: True}))),
        ("complete a str job id", lambda: scheduler.update_connector_output(WorkerOutput({"1": True}))),  # type: ignore[dict-item]
        ("complete a float job id", lambda: scheduler.update_connector_output(WorkerOutput({1.0: True}))),  # type: ignore[dict-item]
        ("manager lookup for an unknown request", lambda: manager.lookup("ghost", [1])),
        ("manager touch for an unknown request", lambda: manager.touch("ghost", [1])),
        ("manager finish of an unknown request", lambda: manager.on_request_finished("ghost")),
        ("manager complete_load of an unknown request", lambda: manager.complete_load("ghost", [1])),
    ]
    # A valid part first, so a call that applies entries one by one shows the half it applied
    # (one token each: build_connector_meta advances counts as it checks, and must take them back).
    valid_tokens = {rid: 1 for rid in by_state.get(RUNNING, []) if not trackers[rid].draft_tokens}
    valid_preempt = list(by_state.get(RUNNING, []))
    probes.append(("schedule valid requests, then an unknown one", lambda: scheduler.build_connector_meta(
        SchedulerOutput({**valid_tokens, "ghost": 1}))))
    for rid in by_state.get(RUNNING, []):
        probes += [
            (f"schedule {rid} for -1 tokens", lambda rid=rid: scheduler.build_connector_meta(
                SchedulerOutput({**valid_tokens, rid: -1}, preempted=[r for r in valid_preempt if r != rid]))),
            (f"schedule {rid} for '1' tokens", lambda rid=rid: scheduler.build_connector_meta(
                SchedulerOutput({**valid_tokens, rid: "1"}))),  # type: ignore[dict-item]
            (f"preempt and schedule {rid}", lambda rid=rid: scheduler.build_connector_meta(
                SchedulerOutput({**valid_tokens, rid: 1}, preempted=[rid]))),
            (f"preempt {rid} twice", lambda rid=rid: scheduler.build_connector_meta(
                SchedulerOutput(preempted=[rid, rid]))),
            (f"new block -1 for {rid}", lambda rid=rid: scheduler.build_connector_meta(
                SchedulerOutput(valid_tokens, new_block_ids={rid: [-1]}))),
            (f"alloc block 'a' for {rid}", lambda rid=rid: scheduler.update_state_after_alloc(
                trackers[rid].request, ["a"], 0)),  # type: ignore[list-item]
            (f"finish {rid} with block -1", lambda rid=rid: scheduler.request_finished(trackers[rid].request, [-1])),
            (f"lookup for running {rid}", lambda rid=rid: scheduler.get_num_new_matched_tokens(
                trackers[rid].request, 0)),
            (f"more drafts than scheduled tokens for {rid}", lambda rid=rid: scheduler.build_connector_meta(
                SchedulerOutput({**valid_tokens, rid: 1}, num_draft_tokens={rid: 2}))),
            (f"drafts for {rid} not scheduled", lambda rid=rid: scheduler.build_connector_meta(
                SchedulerOutput(valid_tokens, num_draft_tokens={"ghost": 1, rid: 0}))),
            (f"more rejections than drafts for {rid}", lambda rid=rid: scheduler.build_connector_meta(
                SchedulerOutput(valid_tokens, num_rejected_tokens={rid: trackers[rid].draft_tokens + 1}))),
        ]
        if trackers[rid].draft_tokens:
            probes.append((f"schedule {rid} without reporting its rejected drafts", lambda rid=rid:
                           scheduler.build_connector_meta(SchedulerOutput({**valid_tokens, rid: 1}))))
    for state in (LOADING, FINISHED_PENDING_STORE, SIGNALED, PREEMPTED):
        for rid in by_state.get(state, []):
            probes += [
                (f"schedule {state} {rid}", lambda rid=rid: scheduler.build_connector_meta(
                    SchedulerOutput({**valid_tokens, rid: 1}, preempted=valid_preempt))),
                (f"alloc for {state} {rid}", lambda rid=rid: scheduler.update_state_after_alloc(
                    trackers[rid].request, trackers[rid].gpu_block_ids, 0)),
            ]
            if state == LOADING:
                # A finished request's preemption is accepted: vLLM reports a preemption by
                # reset_prefix_cache(reset_running_requests=True) in the next step, after an abort.
                probes.append((f"preempt {state} {rid}", lambda rid=rid: scheduler.build_connector_meta(
                    SchedulerOutput(preempted=[*valid_preempt, rid]))))
            if state != PREEMPTED:
                probes.append((f"lookup for {state} {rid}", lambda rid=rid: scheduler.get_num_new_matched_tokens(
                    trackers[rid].request, 0)))
            if state in (FINISHED_PENDING_STORE, SIGNALED):
                probes.append((f"finish {rid} twice", lambda rid=rid: scheduler.request_finished(
                    trackers[rid].request, [])))
    for rid in by_state.get(WAITING, []):
        offered = trackers[rid].lookup_hit_chunks * chunk
        for bad in (-chunk, offered + chunk, *([offered + 1] if chunk > 1 else [])):
            probes.append((f"alloc {rid} with {bad} external tokens", lambda rid=rid, bad=bad:
                           scheduler.update_state_after_alloc(trackers[rid].request, list(range(GPU_BLOCKS)), bad)))
    in_flight = sorted(scheduler._jobs)
    valid_done = {in_flight[0]: True} if in_flight else {}
    issued = set(range(1, scheduler._next_job_id))
    done = sorted(issued - set(scheduler.jobs_in_flight) - {job.job_id for job in scheduler._pending_loads})
    if done:
        probes.append(("complete a job already completed",
                       lambda: scheduler.update_connector_output(WorkerOutput({**valid_done, done[-1]: True}))))
    if in_flight:
        probes.append(("complete with a str outcome",
                       lambda: scheduler.update_connector_output(WorkerOutput({in_flight[-1]: "yes"}))))  # type: ignore[dict-item]
        probes.append(("complete a valid job and a future one", lambda: scheduler.update_connector_output(
            WorkerOutput({**valid_done, scheduler._next_job_id: True}))))
    for job in scheduler._pending_loads:
        probes.append((f"complete load {job.job_id} not yet handed out", lambda job=job:
                       scheduler.update_connector_output(WorkerOutput({**valid_done, job.job_id: True}))))
    for rid, record in manager.requests_in_flight().items():
        for key in record.storing:
            probes.append((f"manager complete_store {key:#x} twice in one call",
                           lambda rid=rid, key=key: manager.complete_store(rid, [key, key], True)))
        probes.append(("manager reset_cache with transfers in flight", manager.reset_cache))
    for rid in trackers:
        if manager.is_known(rid):
            probes += [
                (f"manager announces {rid} again", lambda rid=rid: manager.on_new_request(rid)),
                (f"manager store of str key for {rid}", lambda rid=rid: manager.prepare_store(rid, ["a"])),  # type: ignore[list-item]
                (f"manager store of a duplicate key for {rid}", lambda rid=rid: manager.prepare_store(rid, [7, 7])),
                (f"manager load of a missing key for {rid}", lambda rid=rid: manager.prepare_load(rid, [-5])),
                (f"manager complete_load not in flight for {rid}", lambda rid=rid: manager.complete_load(rid, [-5])),
                (f"manager complete_store not in flight for {rid}",
                 lambda rid=rid: manager.complete_store(rid, [-5], True)),
            ]
    return probes


def assert_rejected_without_change(scheduler: OffloadingScheduler, probe: Probe) -> None:
    name, call = probe
    before = full_state(scheduler)
    with pytest.raises((ValueError, TypeError, RuntimeError)):
        call()
        pytest.fail(f"malformed call accepted: {name}")
    assert full_state(scheduler) == before, f"malformed call changed state before raising: {name}"


class AtomicityMachine(RuleBasedStateMachine):
    """Valid engine traffic interleaved with malformed connector calls."""

    def __init__(self) -> None:
        super().__init__()
        self.engine: Engine | None = None
        self.prompts: list[list[int]] = []
        self.probes_run = 0

    @initialize(
        blocks_per_chunk=st.sampled_from([1, 2]),
        cpu_blocks=st.sampled_from([2, 4, 16]),
        delay=st.integers(0, 2),
        faults=st.sampled_from([0.0, 0.2]),
        speculative_tokens=st.sampled_from([0, 2]),
    )
    def build(self, blocks_per_chunk: int, cpu_blocks: int, delay: int, faults: float, speculative_tokens: int) -> None:
        config = EngineConfig(
            num_gpu_blocks=GPU_BLOCKS, gpu_block_size=BLOCK_SIZE, blocks_per_chunk=blocks_per_chunk,
            num_cpu_blocks=cpu_blocks, policy="lru", max_num_batched_tokens=16, max_running=3,
            eos_probability=0.0, fault_rate=faults, job_delay_steps=delay, speculative_tokens=speculative_tokens,
        )
        offload = config.offload_config()
        self.engine = Engine(config, ProbedScheduler(offload, CPUOffloadingManager(cpu_blocks, "lru")))

    @property
    def scheduler(self) -> ProbedScheduler:
        assert self.engine is not None
        return self.engine.scheduler  # type: ignore[return-value]

    @rule(prompt=TOKENS, extend=st.booleans(), max_tokens=st.integers(1, 6))
    def add_request(self, prompt: list[int], extend: bool, max_tokens: int) -> None:
        assert self.engine is not None
        if extend and self.prompts:
            prompt = (self.prompts[-1] + prompt)[: GPU_BLOCKS * BLOCK_SIZE - max_tokens]
        self.prompts.append(prompt)
        self.engine.add_request(prompt, max_tokens)

    @rule()
    def step(self) -> None:
        assert self.engine is not None
        self.engine.step()

    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        assert self.engine is not None
        if self.engine.requests:
            self.engine.abort(data.draw(st.sampled_from(sorted(self.engine.requests))))

    @rule()
    def reset_cache(self) -> None:
        assert self.engine is not None
        self.engine.reset_cache()

    @rule()
    def finish_unknown_request(self) -> None:
        before = self.scheduler.stats.unknown_finished
        assert self.scheduler.request_finished(Ghost("never-seen"), [1, 2]) is False
        assert self.scheduler.stats.unknown_finished == before + 1

    @rule(data=st.data())
    def malformed_between_steps(self, data: st.DataObject) -> None:
        assert_rejected_without_change(self.scheduler, data.draw(st.sampled_from(malformed_calls(self.scheduler))))

    @precondition(lambda self: self.engine is not None and bool(self.engine.waiting))
    @rule(data=st.data())
    def malformed_mid_step(self, data: st.DataObject) -> None:
        assert self.engine is not None
        scheduler = self.scheduler

        def probe() -> None:
            assert_rejected_without_change(scheduler, data.draw(st.sampled_from(malformed_calls(scheduler))))

        scheduler.before_build = probe
        self.engine.step()

    def teardown(self) -> None:
        if self.engine is None:
            return
        self.engine.drain(5_000)
        assert self.engine.stats.violations == 0, self.engine.stats.violation_messages
        assert self.engine.stats.integrity_failures == 0
        assert self.engine.leaks() == []


def test_every_malformed_call_raises_and_changes_nothing() -> None:
    run_state_machine_as_test(AtomicityMachine)


def test_full_state_sees_a_change_deep_inside() -> None:
    scheduler = ProbedScheduler(OffloadConfig(4, 1, 4, "lru"))
    before = full_state(scheduler)
    scheduler.manager.policy.on_insert(5, None)
    assert full_state(scheduler) != before
