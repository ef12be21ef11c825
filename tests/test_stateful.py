"""Hypothesis stateful tests: random programs against the simulated engine + the real connector.

The state machine drives :class:`kvoffload_lab.sim.Engine` with a model worker whose jobs never finish
on their own (``job_delay_steps`` is huge): the program chooses which in-flight jobs complete or
fail, and in which order. Rules add requests (fresh, or extending an earlier prompt, so prefixes
are shared and the CPU tier is hit), step the engine, abort requests, complete or fail jobs,
call reset_cache, drop the GPU prefix cache; a small GPU pool makes the engine preempt. Each
program starts from a "warm" CPU tier (one finished conversation offloaded), so loads are common.

After every rule: every invariant of ``kvoffload.lifecycles`` on the scheduler's snapshot, the engine's
own checks (GpuBlockFence, DataIntegrity of loaded blocks), DataIntegrity at the source (a store
reads GPU blocks that hold its keys), and the lifecycle trace so far replays through the spec's
mirror (``kvoffload_lab.verify.mirror``). At the end the engine drains and nothing may be left (NoLeak,
EventuallyCleaned), and every traced request reached ``cleaned``.

Completions reach the connector only through ``Engine.step`` (``update_connector_output`` inside
the step, as in vLLM, where worker results travel in the model runner's output): the
:class:`ChosenCompletions` backend holds the outcomes the program chose and reports them in the
next step, so the test needs no private hook into the engine.

Every bug-zoo mutant must make this machine fail; the unmutated code must pass.
"""

from __future__ import annotations

import functools
import io
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvoffload.lifecycles import check_invariants
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import ConnectorMetadata, JobId, OffloadConfig, WorkerOutput
from kvoffload.statemachine.runtime import LifecycleError
from kvoffload.statemachine.trace import TraceWriter
from kvoffload_lab.sim import Engine, EngineConfig
from kvoffload_lab.sim.kv_model import ModelWorker
from kvoffload_lab.statemachine.explore import CRASH
from kvoffload_lab.verify.bugzoo import MUTANTS, Mutant
from kvoffload_lab.verify.explore_model import WorkerReport
from kvoffload_lab.verify.mirror import TraceMirror, parse_line

# Jobs complete only when the program says so (or when the scheduler flushes them).
NEVER = 10**9
GPU_BLOCKS = 10
BLOCK_SIZE = 4
# Longest request (prompt + output) in tokens: it must fit the GPU pool on its own, or the engine
# can never admit it and draining cannot end.
MAX_REQUEST_TOKENS = GPU_BLOCKS * BLOCK_SIZE - BLOCK_SIZE
# A tiny alphabet, so fresh prompts also share blocks with each other now and then.
TOKENS = st.lists(st.integers(1, 3), min_size=4, max_size=14)
OUTPUT_TOKENS = st.integers(1, 8)
DRAIN_STEPS = 2_000

SchedulerFactory = Callable[[OffloadConfig, CPUOffloadingManager | None], OffloadingScheduler]
ManagerFactory = Callable[[int, str], CPUOffloadingManager]


class ChosenCompletions:
    """A :class:`ModelWorker` whose completions the test chooses; satisfies ``KVBackend``.

    ``complete`` finishes jobs now (a store copies its blocks now, a failed load writes garbage)
    and queues their outcomes; the next ``execute`` reports them with the worker's own (flushes).
    ``late_flush_reports``: a flushed job is waited for in its step (its copy is done) but
    reported one step later, as a worker that collects completions at the end of a step does; the
    scheduler must keep a preempted request out until the report arrives.
    ``report``: a worker-side bug of the zoo (``Mutant.worker_report``), applied to what is reported.
    """

    def __init__(
        self, worker: ModelWorker, report: WorkerReport | None = None, late_flush_reports: bool = False
    ) -> None:
        self.worker = worker
        self.report = report
        self.late_flush_reports = late_flush_reports
        self._queued: dict[JobId, bool] = {}
        # DataIntegrity at the source: stores that read GPU blocks not holding their keys' KV.
        self.problems: list[str] = []

    def write_block(self, block: int, content: int | None) -> None:
        self.worker.write_block(block, content)

    def block_matches(self, block: int, content: int) -> bool:
        return self.worker.block_matches(block, content)

    def blocks_read_by_stores(self) -> dict[int, set[JobId]]:
        return self.worker.blocks_read_by_stores()

    def in_flight(self) -> set[JobId]:
        return self.worker.in_flight() | set(self._queued)

    def running_jobs(self) -> list[JobId]:
        """Jobs submitted and not yet completed (queued outcomes excluded), in id order."""
        return sorted(self.worker.in_flight())

    def complete(self, job_ids: list[JobId], ok: bool) -> None:
        for job_id, done in self.worker.complete(job_ids, ok).completed.items():
            self._queued[job_id] = done

    def execute(self, metadata: ConnectorMetadata) -> WorkerOutput:
        self._check_store_sources(metadata)
        queued, self._queued = self._queued, {}
        completed = dict(self.worker.execute(metadata).completed)
        if self.late_flush_reports:
            self._queued = {job_id: completed.pop(job_id) for job_id in metadata.flush if job_id in completed}
        completed.update(queued)
        output = WorkerOutput(completed)
        return output if self.report is None else self.report(output)

    def _check_store_sources(self, metadata: ConnectorMetadata) -> None:
        """A store is submitted for chunks computed in earlier steps, so each chunk's last GPU block
        already holds that chunk's key (the chained hash of the prefix it ends)."""
        blocks_per_chunk = self.worker.blocks_per_chunk
        for job in metadata.stores:
            if len(job.gpu_block_ids) != len(job.keys) * blocks_per_chunk:
                self.problems.append(
                    f"DataIntegrity: store job {job.job_id} of {job.request_id!r} reads {len(job.gpu_block_ids)} "
                    f"GPU block(s) for {len(job.keys)} chunk(s) of {blocks_per_chunk} block(s)"
                )
                continue
            for index, key in enumerate(job.keys):
                block = job.gpu_block_ids[(index + 1) * blocks_per_chunk - 1]
                if self.worker.gpu.get(block) != key:
                    self.problems.append(
                        f"DataIntegrity: store job {job.job_id} of {job.request_id!r} stores key {key:#x} "
                        f"from GPU block {block}, which does not hold it"
                    )


F = TypeVar("F", bound=Callable[..., Any])


def _marks_unhealthy(method: F) -> F:
    """Teardown drains only after a clean run: after a failure the state is broken anyway, and an
    exception raised in teardown would replace the failure hypothesis is reporting."""

    @functools.wraps(method)
    def wrapper(self: OffloadMachine, *args: Any, **kwargs: Any) -> Any:
        self.healthy = False
        result = method(self, *args, **kwargs)
        self.healthy = True
        return result

    return wrapper  # type: ignore[return-value]


class OffloadMachine(RuleBasedStateMachine):
    """Random programs over the engine; subclasses swap in a mutant's scheduler / manager."""

    make_scheduler: ClassVar[SchedulerFactory | None] = None
    make_manager: ClassVar[ManagerFactory | None] = None
    worker_report: ClassVar[WorkerReport | None] = None
    # Speculative decoding: draft tokens per decode step (half of them rejected on average).
    speculative_tokens: ClassVar[int] = 0

    prompts = Bundle("prompts")

    def __init__(self) -> None:
        super().__init__()
        self.engine: Engine | None = None
        self.backend: ChosenCompletions | None = None
        self.healthy = True
        self.reset_at = 0
        # Every transition is traced and replayed through the spec's mirror as the program runs.
        self.trace = io.StringIO()
        self.writer = TraceWriter(self.trace)
        self.mirror = TraceMirror()
        self.trace_read = 0
        self.trace_lines = 0

    # ------------------------------------------------------------------ setup
    @initialize(
        target=prompts,
        blocks_per_chunk=st.sampled_from([1, 2]),
        cpu_blocks=st.sampled_from([1, 2, 3, 4, 64]),
        policy=st.sampled_from(["lru", "arc"]),
        warm=st.lists(st.integers(1, 3), min_size=8, max_size=12),
        late_flush_reports=st.booleans(),
    )
    @_marks_unhealthy
    def build_engine(
        self,
        blocks_per_chunk: int,
        cpu_blocks: int,
        policy: str,
        warm: list[int] | None = None,
        late_flush_reports: bool = False,
    ) -> MultipleResults[tuple[int, ...]]:
        """The engine, with ``warm``: a finished conversation whose KV is left in the CPU tier
        only, so follow-ups of it load (loads need several rules in a row otherwise, and are rare).
        Small CPU pools are favoured: eviction races are where the bugs are. Direct callers (the
        regression tests) may leave ``warm`` out for an empty start."""
        config = EngineConfig(
            num_gpu_blocks=GPU_BLOCKS,
            gpu_block_size=BLOCK_SIZE,
            blocks_per_chunk=blocks_per_chunk,
            num_cpu_blocks=cpu_blocks,
            policy=policy,
            max_num_batched_tokens=24,
            max_running=4,
            eos_probability=0.0,
            job_delay_steps=NEVER,
            seed=0,
            speculative_tokens=type(self).speculative_tokens,
            speculative_acceptance=0.5,
        )
        offload = config.offload_config()
        cls = type(self)
        manager = cls.make_manager(offload.num_cpu_blocks, offload.policy) if cls.make_manager else None
        scheduler = cls.make_scheduler(offload, manager) if cls.make_scheduler else None
        worker = ModelWorker(blocks_per_chunk, NEVER, 0.0, seed=1)
        self.backend = ChosenCompletions(worker, cls.worker_report, late_flush_reports)
        engine = Engine(config, scheduler=scheduler, backend=self.backend)
        self.engine = engine
        engine.scheduler.attach_trace(self.writer)
        if warm is None:
            return multiple()
        prompt = self._add(warm, 1)
        for _ in range(len(prompt) // BLOCK_SIZE + 3):
            engine.step()
            self.backend.complete(self.backend.running_jobs(), ok=True)
        engine.step()
        engine.pool.reset()
        return multiple(prompt)

    # ------------------------------------------------------------------ rules
    def _add(self, prompt: list[int], max_tokens: int) -> tuple[int, ...]:
        assert self.engine is not None
        prompt = prompt[: MAX_REQUEST_TOKENS - max_tokens]
        self.engine.add_request(prompt, max_tokens)
        return tuple(prompt)

    @rule(target=prompts, tokens=TOKENS, max_tokens=OUTPUT_TOKENS)
    @_marks_unhealthy
    def add_request(self, tokens: list[int], max_tokens: int) -> tuple[int, ...]:
        return self._add(tokens, max_tokens)

    @rule(target=prompts, base=prompts, tokens=TOKENS, max_tokens=OUTPUT_TOKENS, cold=st.booleans())
    @_marks_unhealthy
    def add_follow_up(self, base: tuple[int, ...], tokens: list[int], max_tokens: int, cold: bool) -> tuple[int, ...]:
        """The next turn of a conversation: an earlier prompt, extended. ``cold``: the GPU prefix
        cache dropped its free blocks first, so the shared prefix can only come from the CPU tier."""
        assert self.engine is not None
        if cold:
            self.engine.pool.reset()
        return self._add([*base, *tokens], max_tokens)

    @rule(steps=st.integers(1, 6))
    @_marks_unhealthy
    def step(self, steps: int) -> None:
        assert self.engine is not None
        for _ in range(steps):
            report = self.engine.step()
            assert not report.violations, [str(v) for v in report.violations]

    @precondition(lambda self: self.engine is not None and self.engine.requests)
    @rule(index=st.integers(0, 7))
    @_marks_unhealthy
    def abort(self, index: int) -> None:
        assert self.engine is not None
        live = sorted(self.engine.requests)
        self.engine.abort(live[index % len(live)])

    @precondition(lambda self: self.backend is not None and self.backend.running_jobs())
    @rule(picks=st.lists(st.integers(0, 15), min_size=1, max_size=4, unique=True), ok=st.booleans())
    @_marks_unhealthy
    def complete_jobs(self, picks: list[int], ok: bool) -> None:
        """Complete (ok) or fail some in-flight jobs, in the order picked."""
        assert self.backend is not None
        running = self.backend.running_jobs()
        chosen = list(dict.fromkeys(running[pick % len(running)] for pick in picks))
        self.backend.complete(chosen, ok)

    @precondition(lambda self: self.backend is not None and self.backend.running_jobs())
    @rule(ok=st.booleans())
    @_marks_unhealthy
    def complete_all_jobs(self, ok: bool) -> None:
        assert self.backend is not None
        self.backend.complete(self.backend.running_jobs(), ok)

    @rule()
    @_marks_unhealthy
    def forget_gpu_prefix_cache(self) -> None:
        """The GPU prefix cache drops its free blocks (as under memory pressure), so the next
        request with a known prefix has to load it from the CPU tier."""
        assert self.engine is not None
        self.engine.pool.reset()

    # Only after a few steps since the last reset: a reset undoes everything offloaded, and
    # programs that reset back to back explore nothing.
    @precondition(lambda self: self.engine is not None and self.engine.stats.steps >= self.reset_at + 3)
    # Requests keep running, and keep their GPU blocks, through the connector's reset;
    # preempt_running (vLLM's reset_prefix_cache(reset_running_requests=True)) is for the programs
    # written below: drawing it here changed which programs the mutant hunt's budget reaches.
    @rule()
    @_marks_unhealthy
    def reset_cache(self, preempt_running: bool = False) -> None:
        assert self.engine is not None
        self.engine.reset_cache(preempt_running=preempt_running)
        self.reset_at = self.engine.stats.steps

    # ------------------------------------------------------------------ checks
    @invariant()
    def every_invariant_holds(self) -> None:
        if self.engine is None:
            return
        self.healthy = False
        violations = check_invariants(self.engine.scheduler.snapshot())
        assert not violations, [str(v) for v in violations]
        stats = self.engine.stats
        assert stats.violations == 0, stats.violation_messages
        assert stats.integrity_failures == 0, stats.violation_messages
        assert self.backend is not None and not self.backend.problems, self.backend.problems
        self._replay_trace()
        self.healthy = True

    def _replay_trace(self) -> None:
        text = self.trace.getvalue()
        new, self.trace_read = text[self.trace_read :], len(text)
        for raw in new.splitlines():
            self.trace_lines += 1
            problem = self.mirror.feed(parse_line(raw, self.trace_lines), self.trace_lines)
            assert problem is None, f"trace {problem}: {raw}"

    def teardown(self) -> None:
        engine, backend = self.engine, self.backend
        if engine is None or backend is None or not self.healthy:
            self.writer.close()
            return
        # Let every job finish: the queued ones report in the next step, new ones in their step.
        backend.complete(backend.running_jobs(), ok=True)
        backend.worker.delay_steps = 0
        engine.drain(DRAIN_STEPS)
        violations = check_invariants(engine.scheduler.snapshot())
        assert not violations, [str(v) for v in violations]
        assert engine.stats.violations == 0, engine.stats.violation_messages
        assert engine.stats.integrity_failures == 0, engine.stats.violation_messages
        assert engine.leaks() == [], f"NoLeak: {engine.leaks()}"
        self._replay_trace()
        self.writer.close()
        replay = self.mirror.replay
        assert replay.unfinished("request") == [], "EventuallyCleaned: the trace leaves requests not cleaned"
        assert replay.unfinished("job") == [], "EventuallyCleaned: the trace leaves jobs not ended"
        assert replay.counts.instances["request"] == engine.scheduler.stats.cleaned


class SpeculativeDecodingMachine(OffloadMachine):
    """The same programs with three draft tokens per decode step."""

    speculative_tokens = 3


@pytest.mark.slow
def test_offload_machine_with_speculative_decoding() -> None:
    run_state_machine_as_test(SpeculativeDecodingMachine)


@pytest.mark.slow
def test_offload_machine() -> None:
    """Random programs under the active hypothesis profile (ci or thorough) on the real code."""
    run_state_machine_as_test(OffloadMachine)


# ---------------------------------------------------------------------- mutants
def machine_for(mutant: Mutant | None) -> type[OffloadMachine]:
    """The state machine with a mutant's scheduler / manager / worker bug swapped in (None: ours)."""
    if mutant is None:
        return OffloadMachine
    attributes: dict[str, Any] = {
        "make_scheduler": staticmethod(mutant.make_scheduler),
        "make_manager": staticmethod(mutant.make_manager),
        "worker_report": staticmethod(mutant.worker_report) if mutant.worker_report else None,
        # A bug only speculative decoding reaches needs drafts, as the explorer does.
        "speculative_tokens": 3 if ("speculative_decoding", True) in mutant.explore_options else 0,
    }
    return type(f"OffloadMachine_{mutant.name}", (OffloadMachine,), attributes)


# The mutant hunt's budget is fixed whatever the profile: derandomized, so whether a mutant is
# caught does not depend on the run; no shrinking, since only "caught or not" is asserted.
MUTANT_SETTINGS = settings(
    max_examples=300,
    stateful_step_count=120,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
    print_blob=False,
)


def caught_as(failure: BaseException) -> str:
    """What caught a mutant: the invariant a LifecycleViolation names, ``DeclaredLifecycle`` when the
    declared machine refused a move, the text of a failed check (every check names its invariant),
    or ``Crash`` for any other exception the code raised."""
    invariant = getattr(failure, "invariant", None)
    if isinstance(invariant, str):
        return invariant
    if isinstance(failure, LifecycleError):
        return "DeclaredLifecycle"
    return str(failure) if isinstance(failure, AssertionError) else CRASH


def hunt(machine: type[OffloadMachine]) -> BaseException | None:
    """Run ``machine`` under MUTANT_SETTINGS; the failure it found, or None."""
    try:
        run_state_machine_as_test(machine, settings=MUTANT_SETTINGS)
    except HypothesisException:
        raise
    except Exception as failure:
        return failure
    return None


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_mutant_is_caught(name: str) -> None:
    mutant = MUTANTS[name]
    machine = machine_for(mutant)
    started = time.perf_counter()
    failure = hunt(machine)
    elapsed = time.perf_counter() - started
    assert failure is not None, (
        f"mutant {name!r} ({mutant.summary}) survived {MUTANT_SETTINGS.max_examples} programs "
        f"({elapsed:.1f} s); the invariant it breaks: {mutant.invariant}"
    )
    # Caught for the right reason: the failure names one of the mutant's invariants, not just any error.
    found = caught_as(failure)
    expected = mutant.caught_by
    assert any(invariant in found for invariant in expected), f"{name}: caught by {failure!r}, expected {expected}"


@pytest.mark.slow
def test_unmutated_code_passes_the_mutant_budget() -> None:
    """The mutant hunt's settings do not fail the real code: a caught mutant means a real bug."""
    failure = hunt(machine_for(None))
    assert failure is None, f"the unmutated code fails: {failure!r}"


def test_stale_lookup_start_after_reset() -> None:
    """A regression found by this machine (fixed in get_num_new_matched_tokens).

    Shrunk by hypothesis: req-4 was looked up with a 7-block GPU prefix but not admitted (pool
    full); reset_cache dropped the GPU prefix cache; its next lookup (during the reset) returned
    early and kept lookup_start_chunk=7, then admission with 6 blocks raised ValueError."""
    state = OffloadMachine()
    state.build_engine(blocks_per_chunk=1, cpu_blocks=3, policy="lru")
    first = state.add_request(tokens=[1] * 9, max_tokens=1)
    state.abort(index=0)
    second = state.add_follow_up(base=first, tokens=[1] * 8, max_tokens=1, cold=False)
    state.abort(index=0)
    state.add_request(tokens=[1] * 4, max_tokens=1)
    state.add_request(tokens=[1] * 6, max_tokens=4)
    state.add_follow_up(base=second, tokens=[1] * 12, max_tokens=2, cold=False)
    state.step(steps=5)
    state.reset_cache()
    state.step(steps=1)
    state.every_invariant_holds()
    state.teardown()


def test_abort_after_a_reset_that_preempted_the_request() -> None:
    """A regression found by this machine (fixed in build_connector_meta's preemption check).

    A reset preempts every running request (vLLM's reset_running_requests=True), which the next
    SchedulerOutput reports; the request is aborted in between, so that output lists a request
    the connector already saw finish. The scheduler raised IllegalTransition (preempt in
    finished_pending_store)."""
    state = OffloadMachine()
    state.build_engine(blocks_per_chunk=1, cpu_blocks=3, policy="lru")
    state.add_request(tokens=[1] * 9, max_tokens=4)
    state.add_request(tokens=[2] * 6, max_tokens=4)
    state.step(steps=2)
    state.reset_cache(preempt_running=True)
    state.abort(index=0)
    state.step(steps=1)
    state.every_invariant_holds()
    state.teardown()
