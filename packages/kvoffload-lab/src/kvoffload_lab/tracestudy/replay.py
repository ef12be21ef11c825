"""Replay a Mooncake block trace through the REAL offloading scheduler, manager and lifecycle.

Model (fast mode, documented choices):

- Unit: one 512-token block is one scheduling unit. The scheduler runs with ``gpu_block_size=1``
  and ``blocks_per_chunk=1``, so a "token" of the scheduler is a 512-token block and a chunk (one
  CPU block) is one block. A request of ``input_length`` tokens has ``n = input_length // 512`` full
  blocks, keyed by the chained trace hash ids, plus one more unit: the partial tail (or, for a
  block-aligned prompt, the last token, which an engine always recomputes to get logits). So every
  full block can be a hit, the same measure as the offline bounds.
- Decode is compressed to one step of one unit: output tokens are never reused by the trace (a
  later turn's prompt carries them under its own hash ids), so only their scheduling is modelled.
- Concurrency: sequential. Each request, in timestamp order (stable), is looked up in the GPU
  prefix cache, then in the CPU tier through the connector, loads, prefills, decodes one step,
  finishes, and its stores drain before the next request arrives. The arrival times only order the
  requests. This is the simplest model in which prefix reuse and eviction are exact, and it makes
  the run deterministic.
- GPU tier: the engine's prefix cache of ``gpu_blocks`` blocks, modelled on vLLM's block pool:
  blocks of the running request are pinned; freed blocks stay cached (by chained key) in an LRU
  free queue until reallocated; a request's blocks are freed tail first, so eviction eats a
  prefix from its end and the head stays servable.
- CPU tier: the real ``CPUOffloadingManager`` of ``cpu_blocks`` blocks with the named policy (or
  a policy object; a :class:`~kvoffload_lab.tracestudy.cpu_oracle.ClairvoyantPolicy`, such as the CPU oracle
  :class:`~kvoffload_lab.tracestudy.cpu_oracle.BeladyCPUPolicy`, has its clock moved before each request).
- Worker: completes every job successfully ``worker_delay`` steps after the step that issued it
  (default 1), so stores are still in flight when the request finishes and the scheduler's
  hold-and-release path for GPU blocks is exercised.

Invariants of ``kvoffload.lifecycles`` are checked on a snapshot every ``check_every`` requests while
stores are in flight, and once at the end (quiescent, so NoLeak too). A LifecycleViolation or any
other error from the scheduler stops the replay and is reported as a violation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvoffload.lifecycles.invariants import check_invariants
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.policies import EvictionPolicy
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import (
    DEFAULT_POLICY,
    ConnectorMetadata,
    JobId,
    OffloadConfig,
    SchedulerOutput,
    WorkerOutput,
)
from kvoffload_lab.sim.block_pool import BlockPool
from kvoffload_lab.tracestudy.bounds import belady, infinite_cache
from kvoffload_lab.tracestudy.cpu_oracle import BeladyCPUPolicy, ClairvoyantPolicy
from kvoffload_lab.tracestudy.mooncake import TraceRequest, block_chains

# How many violation messages a result keeps (the count is always complete).
MAX_MESSAGES = 20


# A request that needs more engine steps than this to load or drain means the scheduler stopped
# making progress: reported as a violation instead of looping forever.
MAX_WAIT_STEPS = 1000


class ReplayError(RuntimeError):
    """The replay cannot run with these sizes (e.g. a request larger than the GPU tier)."""


class ReplayAnomaly(RuntimeError):
    """The real scheduler did something an engine cannot accept (reported as a violation)."""


@dataclass(slots=True)
class _Request:
    """What the scheduler reads of an engine request (the EngineRequest protocol)."""

    request_id: str
    block_hashes: list[int]
    num_tokens: int


@dataclass
class ReplayResult:
    """Counts of one replay; ``as_dict`` is the JSON the command prints. ``seconds`` is the replay
    through the scheduler alone; ``bounds_seconds`` the offline bounds and the CPU oracle's replay
    (``cpu_oracle_hit_ratio``: the same replay with :class:`BeladyCPUPolicy` as the CPU policy)."""

    policy: str
    gpu_blocks: int
    cpu_blocks: int
    requests: int = 0
    blocks: int = 0
    gpu_hits: int = 0
    cpu_hits: int = 0
    violations: int = 0
    violation_messages: list[str] = field(default_factory=list)
    leaks: int = 0
    leak_messages: list[str] = field(default_factory=list)
    invariant_checks: int = 0
    steps: int = 0
    stored_blocks: int = 0
    evictions: int = 0
    rejected_by_admission: int = 0
    store_allocation_failures: int = 0
    seconds: float = 0.0
    bounds_seconds: float = 0.0
    belady_hit_ratio: float | None = None
    infinite_hit_ratio: float | None = None
    cpu_oracle_hit_ratio: float | None = None
    error: str | None = None

    @property
    def hit_ratio(self) -> float:
        return (self.gpu_hits + self.cpu_hits) / self.blocks if self.blocks else 0.0

    def as_dict(self) -> dict[str, Any]:
        blocks = self.blocks or 1
        ratio_to_belady = self.hit_ratio / self.belady_hit_ratio if self.belady_hit_ratio else None
        oracle = self.cpu_oracle_hit_ratio
        return {
            "requests": self.requests,
            "blocks": self.blocks,
            "hit_ratio": self.hit_ratio,
            "gpu_hit_ratio": self.gpu_hits / blocks,
            "cpu_hit_ratio": self.cpu_hits / blocks,
            "belady_hit_ratio": self.belady_hit_ratio,
            "infinite_hit_ratio": self.infinite_hit_ratio,
            "ratio_to_belady": ratio_to_belady,
            "cpu_oracle_hit_ratio": oracle,
            "ratio_to_cpu_oracle": self.hit_ratio / oracle if oracle else None,
            "violations": self.violations,
            "violation_messages": self.violation_messages,
            "leaks": self.leaks,
            "leak_messages": self.leak_messages,
            "invariant_checks": self.invariant_checks,
            "seconds": self.seconds,
            "bounds_seconds": self.bounds_seconds,
            "policy": self.policy,
            "gpu_blocks": self.gpu_blocks,
            "cpu_blocks": self.cpu_blocks,
            "steps": self.steps,
            "stored_blocks": self.stored_blocks,
            "evictions": self.evictions,
            "rejected_by_admission": self.rejected_by_admission,
            "store_allocation_failures": self.store_allocation_failures,
            "error": self.error,
        }


class _Worker:
    """Completes every job it was handed ``delay`` steps later, always successfully."""

    def __init__(self, delay: int) -> None:
        self.delay = delay
        self._queue: list[list[JobId]] = []

    def run(self, meta: ConnectorMetadata) -> WorkerOutput:
        # Flushed jobs were already handed out; waiting for them means completing them now.
        jobs = [job.job_id for job in (*meta.stores, *meta.loads)]
        flush = set(meta.flush)
        done: list[JobId] = []
        if flush:
            for pending in self._queue:
                done += [job for job in pending if job in flush]
                pending[:] = [job for job in pending if job not in flush]
        self._queue.append(jobs)
        while len(self._queue) > self.delay:
            done += self._queue.pop(0)
        return WorkerOutput({job: True for job in done})

    @property
    def idle(self) -> bool:
        return not any(self._queue)


ProgressCallback = Callable[[int], None]


class TraceReplay:
    """Drives the real ``OffloadingScheduler`` over a block trace; see the module docstring."""

    def __init__(
        self,
        gpu_blocks: int,
        cpu_blocks: int,
        policy: str | EvictionPolicy = DEFAULT_POLICY,
        *,
        worker_delay: int = 1,
        check_every: int = 100,
    ) -> None:
        if gpu_blocks < 2:
            raise ReplayError(f"gpu_blocks must be at least 2, got {gpu_blocks}")
        if worker_delay < 0 or check_every < 1:
            raise ReplayError("worker_delay must be >= 0 and check_every >= 1")
        # One scheduler "token" is one 512-token block: see the module docstring.
        name = policy if isinstance(policy, str) else (policy.name or type(policy).__name__)
        self.config = OffloadConfig(gpu_block_size=1, blocks_per_chunk=1, num_cpu_blocks=cpu_blocks, policy=name)
        self.manager = CPUOffloadingManager(cpu_blocks, policy)
        self.oracle = policy if isinstance(policy, ClairvoyantPolicy) else None
        self.scheduler = OffloadingScheduler(self.config, self.manager)
        self.gpu = BlockPool(gpu_blocks)
        self.worker = _Worker(worker_delay)
        self.check_every = check_every
        self.result = ReplayResult(name, gpu_blocks, cpu_blocks)
        self._waited = 0

    # ------------------------------------------------------------------ engine loop
    def _step(self, scheduled: dict[str, int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        meta = self.scheduler.build_connector_meta(SchedulerOutput(num_scheduled_tokens=scheduled))
        self.result.steps += 1
        update = self.scheduler.update_connector_output(self.worker.run(meta))
        if update.load_failed:
            raise ReplayAnomaly(f"loads failed for {update.load_failed} although the worker never fails")
        return update.loaded, update.released

    def _wait(self, request_id: str, what: str) -> None:
        self._waited += 1
        if self._waited > MAX_WAIT_STEPS:
            raise ReplayAnomaly(f"request {request_id}: {MAX_WAIT_STEPS} steps without {what}")

    def _check(self) -> None:
        self.result.invariant_checks += 1
        for violation in check_invariants(self.scheduler.snapshot()):
            self._violation(str(violation))

    def _violation(self, message: str) -> None:
        self.result.violations += 1
        if len(self.result.violation_messages) < MAX_MESSAGES:
            self.result.violation_messages.append(message)

    def replay_request(self, index: int, keys: list[int]) -> None:
        """One request, from lookup to drained stores."""
        result = self.result
        scheduler = self.scheduler
        gpu = self.gpu
        request_id = f"r{index}"
        num_tokens = len(keys) + 1
        if num_tokens > gpu.num_blocks:
            raise ReplayError(
                f"request {index} needs {num_tokens} GPU blocks but the GPU tier has {gpu.num_blocks}; "
                "raise --gpu-blocks"
            )
        request = _Request(request_id, keys, num_tokens)
        if self.oracle is not None:
            self.oracle.advance(index, keys)
        hit_blocks = gpu.cached_prefix(keys)
        gpu_hits = len(hit_blocks)
        external, _ = scheduler.get_num_new_matched_tokens(request, gpu_hits)
        if external is None:
            raise ReplayAnomaly(f"request {request_id}: lookup deferred although nothing else is in flight")
        gpu.touch(hit_blocks)
        fresh = gpu.allocate(num_tokens - gpu_hits)
        if fresh is None:
            raise ReplayAnomaly(f"request {request_id}: GPU blocks still held by drained requests")
        block_ids = hit_blocks + fresh
        scheduler.update_state_after_alloc(request, block_ids, external)
        computed = gpu_hits + external
        if external:
            loaded: tuple[str, ...] = ()
            while request_id not in loaded:
                self._wait(request_id, "its load to complete")
                loaded, _ = self._step({})
        result.blocks += len(keys)
        result.gpu_hits += gpu_hits
        result.cpu_hits += external
        self._step({request_id: num_tokens - computed})  # prefill
        self._step({request_id: 1})  # decode, compressed; builds the stores of the prefill
        if index % self.check_every == 0:
            self._check()
        holds = scheduler.request_finished(request, block_ids)
        released: tuple[str, ...] = ()
        while holds and request_id not in released:
            self._wait(request_id, "the release of its GPU blocks")
            _, released = self._step({})
        while scheduler.has_pending_work() or not self.worker.idle:
            self._wait(request_id, "the scheduler to drain")
            self._step({})
        self._waited = 0
        for block, key in zip(block_ids, keys, strict=False):
            gpu.register(block, key)
        gpu.free(block_ids)
        result.requests += 1

    def run(
        self,
        chains: Sequence[list[int]],
        progress: ProgressCallback | None = None,
    ) -> ReplayResult:
        """Replay every request (chained keys of its full blocks) in order."""
        started = time.perf_counter()
        result = self.result
        try:
            for index, keys in enumerate(chains):
                self.replay_request(index, keys)
                if progress is not None:
                    progress(1)
        except ReplayError:
            raise
        except Exception as error:
            # Every failure of the real scheduler or manager is a finding, reported as a violation.
            result.error = f"{type(error).__name__}: {error}"
            self._violation(result.error)
        if result.error is None:
            self._check()
        leaks = [*self.scheduler.leaks(), *self.manager.leaks()]
        result.leaks = len(leaks)
        result.leak_messages = leaks[:MAX_MESSAGES]
        stats = self.manager.stats
        result.stored_blocks = stats.stored_keys
        result.evictions = stats.evictions
        result.rejected_by_admission = stats.rejected_by_admission
        result.store_allocation_failures = self.scheduler.stats.store_allocation_failures
        result.seconds = time.perf_counter() - started
        return result


def replay_trace(
    requests: Sequence[TraceRequest],
    gpu_blocks: int,
    cpu_blocks: int,
    policy: str = DEFAULT_POLICY,
    *,
    bounds: bool = True,
    progress: ProgressCallback | None = None,
    worker_delay: int = 1,
    check_every: int = 100,
) -> ReplayResult:
    """Replay ``requests`` (already in arrival order) and, if ``bounds``, add the Belady bound for
    one cache of ``gpu_blocks + cpu_blocks`` blocks, the infinite-cache bound and the CPU oracle
    (the same replay with Belady's rule deciding the CPU tier, see :func:`cpu_oracle`)."""
    chains = block_chains(requests)
    replay = TraceReplay(gpu_blocks, cpu_blocks, policy, worker_delay=worker_delay, check_every=check_every)
    result = replay.run(chains, progress)
    if bounds:
        started = time.perf_counter()
        result.belady_hit_ratio = belady(chains, gpu_blocks + cpu_blocks).hit_ratio
        result.infinite_hit_ratio = infinite_cache(chains).hit_ratio
        result.cpu_oracle_hit_ratio = cpu_oracle(chains, gpu_blocks, cpu_blocks, worker_delay).hit_ratio
        result.bounds_seconds = time.perf_counter() - started
    return result


def cpu_oracle(chains: Sequence[list[int]], gpu_blocks: int, cpu_blocks: int, worker_delay: int = 1) -> ReplayResult:
    """The replay of ``chains`` with :class:`BeladyCPUPolicy` as the CPU tier's policy: the same
    GPU prefix cache, scheduler and manager, the CPU tier decided from the trace's future."""
    oracle = BeladyCPUPolicy(chains, cpu_blocks)
    return TraceReplay(gpu_blocks, cpu_blocks, oracle, worker_delay=worker_delay, check_every=len(chains) + 1).run(
        chains
    )
