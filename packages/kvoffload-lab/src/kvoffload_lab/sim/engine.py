"""A small engine loop shaped like vLLM's, calling the connector where vLLM does.

Per step: random aborts / reset_cache (seeded; half of the resets preempt every running request
first, as vLLM's ``reset_running_requests=True``) -> schedule (running requests first, preempting the
most recently admitted when the GPU pool is full; then admission with the GPU prefix cache and the
connector's lookup) -> ``build_connector_meta`` -> the worker executes the metadata -> the model
computes the scheduled tokens (writing each block's content) -> ``update_connector_output`` ->
sampling (one token per decode step, EOS or max tokens finish) -> invariant check.

vLLM's caching and scheduling rules (cache at schedule and the same-step hit, delay_cache_blocks, no
admission in a step that preempted, ...) are written once in :mod:`kvoffload_lab.sim.vllm_rules`, which
the explorer's engine model follows too.

Speculative decoding (``speculative_tokens`` K > 0): a decoding request is scheduled with its last token
plus K draft tokens; the model writes the drafts' KV, then verification accepts each draft with
``speculative_acceptance`` until the first rejection and samples one more token, as vLLM does. Rejected
drafts are no longer computed (vLLM lowers ``num_computed_tokens``) and the next SchedulerOutput
reports them. A block holding a rejected draft's KV has content that differs from its key, so a
connector that stores it fails the byte-for-byte integrity check when the block is loaded back.

Everything random comes from the seeded ``random.Random`` of the config, so runs repeat exactly.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvoffload.lifecycles.invariants import Violation, check_invariants
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import DEFAULT_POLICY, ConnectorUpdate, OffloadConfig, SchedulerOutput
from kvoffload_lab.sim import engine_ops, vllm_rules
from kvoffload_lab.sim.block_pool import BlockPool
from kvoffload_lab.sim.kv_model import KVBackend, ModelWorker
from kvoffload_lab.sim.request import LOADING, RUNNING, WAITING, SimRequest, chain_hash

VOCAB = 32000
MAX_REPORTED_VIOLATIONS = 20


@dataclass(frozen=True)
class EngineConfig:
    """Sizes and rates of the simulated engine (all probabilities are per step)."""

    num_gpu_blocks: int = 96
    gpu_block_size: int = 16
    blocks_per_chunk: int = 1
    num_cpu_blocks: int = 512
    policy: str = DEFAULT_POLICY
    max_num_batched_tokens: int = 256
    max_running: int = 8
    eos_probability: float = 0.01
    abort_probability: float = 0.0
    reset_probability: float = 0.0
    fault_rate: float = 0.0
    job_delay_steps: int = 1
    seed: int = 0
    check_invariants: bool = True
    speculative_tokens: int = 0
    speculative_acceptance: float = 0.7

    def offload_config(self) -> OffloadConfig:
        return OffloadConfig(self.gpu_block_size, self.blocks_per_chunk, self.num_cpu_blocks, self.policy)


@dataclass
class EngineStats:
    """Counters of one run; ``violations`` counts every invariant violation seen."""

    steps: int = 0
    admitted: int = 0
    finished: int = 0
    aborted: int = 0
    preemptions: int = 0
    resets: int = 0
    deferred_admissions: int = 0
    prompt_tokens: int = 0
    # Tokens whose KV was needed at each admission (a preempted request is admitted again).
    admitted_tokens: int = 0
    gpu_hit_tokens: int = 0
    # Admissions whose GPU prefix hit includes blocks that the same step's forward pass writes.
    same_step_gpu_hits: int = 0
    offload_hit_tokens: int = 0
    computed_tokens: int = 0
    load_failures: int = 0
    integrity_checked_blocks: int = 0
    integrity_failures: int = 0
    draft_tokens: int = 0
    accepted_draft_tokens: int = 0
    kv_events: int = 0
    violations: int = 0
    violation_messages: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StepReport:
    """What one step did (for tests and progress displays)."""

    step: int
    scheduled: dict[str, int]
    preempted: tuple[str, ...]
    finished: tuple[str, ...]
    violations: tuple[Violation, ...]


class Engine:
    """The simulated engine; ``backend`` defaults to the byte-less model worker."""

    def __init__(
        self,
        config: EngineConfig,
        scheduler: OffloadingScheduler | None = None,
        backend: KVBackend | None = None,
    ) -> None:
        self.config = config
        self.scheduler = scheduler if scheduler is not None else OffloadingScheduler(config.offload_config())
        self.backend: KVBackend = backend if backend is not None else ModelWorker(
            config.blocks_per_chunk, config.job_delay_steps, config.fault_rate, config.seed + 1
        )
        self.pool = BlockPool(config.num_gpu_blocks)
        self.rng = random.Random(config.seed)
        self.stats = EngineStats()
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.loading: dict[str, SimRequest] = {}
        self.held: dict[str, SimRequest] = {}
        self.requests: dict[str, SimRequest] = {}
        self.on_finished: list[Callable[[SimRequest, bool], None]] = []
        self._next_id = 0
        self._fence_breaches: list[str] = []
        # Blocks cached this step whose tokens the forward pass has not written yet.
        self._unwritten: set[int] = set()
        # Speculative decoding: its own random stream, so runs without drafts are unchanged.
        self._speculative_rng = random.Random(config.seed + 3)
        self._drafts: dict[str, list[int]] = {}
        self._rejected: dict[str, int] = {}
        # Preempted by reset_cache(preempt_running=True): reported in the next SchedulerOutput.
        self._preempted_between_steps: list[str] = []
        # Requests whose load completed, in completion order: vLLM hands their blocks over again in
        # the next step's schedule() (before build_connector_meta), never between steps, where a
        # connector may be reset and must find no allocation of a step in progress.
        self._loaded: dict[str, SimRequest] = {}

    # ------------------------------------------------------------------ requests
    def add_request(self, prompt: Sequence[int], max_tokens: int, request_id: str | None = None) -> SimRequest:
        if request_id is None:
            request_id = f"req-{self._next_id}"
            self._next_id += 1
        if request_id in self.requests or request_id in self.held:
            raise ValueError(f"request id {request_id!r} is already in use")
        if len(prompt) + max_tokens > self.max_model_tokens:
            # Like an engine's max_model_len check: such a request could never be admitted.
            raise ValueError(
                f"request {request_id!r} needs {len(prompt) + max_tokens} tokens; the GPU pool holds "
                f"{self.max_model_tokens}"
            )
        request = SimRequest(request_id, list(prompt), max_tokens, self.config.gpu_block_size)
        self.requests[request_id] = request
        self.waiting.append(request)
        self.stats.prompt_tokens += len(prompt)
        return request

    def abort(self, request_id: str) -> None:
        request = self.requests.get(request_id)
        if request is None:
            raise KeyError(f"abort: no live request {request_id!r}")
        self.stats.aborted += 1
        self._finish(request, aborted=True)

    def reset_cache(self, prefix_cache: bool = True, preempt_running: bool = False) -> None:
        """reset_prefix_cache + the connector's reset_cache, as between two steps
        (``prefix_cache=False``: the connector's alone). ``preempt_running`` is vLLM's
        ``reset_running_requests=True``: every running request is preempted first, so no GPU block
        stays cached; the connector hears of those preemptions in the next SchedulerOutput."""
        self.stats.resets += 1
        if preempt_running:
            # vLLM pops its running queue from the back, so they are re-admitted in FIFO order.
            for request in reversed(list(self.running)):
                if request.status == RUNNING:
                    self._preempt(request)
                    self._preempted_between_steps.append(request.request_id)
        for request in engine_ops.reset_cache(self.pool, self.scheduler, self.loading, prefix_cache=prefix_cache):
            del self.loading[request.request_id]
            self.running.append(request)

    @property
    def max_model_tokens(self) -> int:
        """The longest request (prompt + output) the GPU pool can hold."""
        return self.config.num_gpu_blocks * self.config.gpu_block_size

    @property
    def idle(self) -> bool:
        return not self.requests and not self.held and not self.scheduler.has_pending_work() and not (
            self.backend.in_flight()
        )

    # ------------------------------------------------------------------ the step
    def step(self) -> StepReport:
        self.stats.steps += 1
        self._fence_breaches = []
        self._random_events()
        output, preempted = self._schedule()
        metadata = self.scheduler.build_connector_meta(output)
        worker_output = self.backend.execute(metadata)
        self._compute(output)
        self._apply(self.scheduler.update_connector_output(worker_output))
        self.stats.kv_events += len(self.scheduler.take_events())
        finished = self._sample(output)
        violations: tuple[Violation, ...] = ()
        if self.config.check_invariants:
            violations = tuple(check_invariants(self.scheduler.snapshot(self._fence_breaches)))
            self._record(violations)
        return StepReport(self.stats.steps, dict(output.num_scheduled_tokens), preempted, finished, violations)

    def drain(self, max_steps: int = 100_000) -> int:
        """Step until every request finished and every job drained; returns the steps taken."""
        for taken in range(max_steps):
            if self.idle:
                return taken
            self.step()
        raise RuntimeError(f"engine did not drain within {max_steps} steps")

    def leaks(self) -> list[str]:
        """State left behind after draining (should be empty)."""
        found = self.scheduler.leaks() + self.scheduler.manager.leaks()
        found += [f"GPU block {b} still referenced" for b, n in enumerate(self.pool.ref_cnt) if n]
        found += [f"job {j} still in the worker" for j in sorted(self.backend.in_flight())]
        return found

    # ------------------------------------------------------------------ internals
    def _random_events(self) -> None:
        config = self.config
        if config.abort_probability and self.requests and self.rng.random() < config.abort_probability:
            victim = self.rng.choice(sorted(self.requests))
            self.abort(victim)
        if config.reset_probability and self.rng.random() < config.reset_probability:
            self.reset_cache(preempt_running=self.rng.random() < 0.5)

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.config.gpu_block_size)

    def _schedule(self) -> tuple[SchedulerOutput, tuple[str, ...]]:
        budget = self.config.max_num_batched_tokens
        scheduled: dict[str, int] = {}
        new_blocks: dict[str, list[int]] = {}
        preempted, self._preempted_between_steps = self._preempted_between_steps, []
        loaded, self._loaded = self._loaded, {}
        for request in loaded.values():
            self.scheduler.update_state_after_alloc(request, request.block_ids, 0)
        for request in list(self.running):
            if budget <= 0:
                break
            if request.status != RUNNING:
                continue
            n = min(request.num_tokens - request.num_computed_tokens, budget)
            if n <= 0:
                continue
            drafts = self._draft_count(request, n, budget)
            n += drafts
            need = self._blocks_for(request.num_computed_tokens + n) - len(request.block_ids)
            blocks = self.pool.allocate(need) if need > 0 else []
            while blocks is None:
                victim = self.running[-1]
                self._preempt(victim)
                preempted.append(victim.request_id)
                if victim is request:
                    break
                blocks = self.pool.allocate(need)
            if blocks is None:
                continue
            if blocks:
                request.block_ids.extend(blocks)
                new_blocks[request.request_id] = blocks
            scheduled[request.request_id] = n
            self._unwritten.update(engine_ops.cache_scheduled(self.pool, request, n))
            if drafts:
                self._drafts[request.request_id] = [self._speculative_rng.randrange(VOCAB) for _ in range(drafts)]
            budget -= n
        skipped: list[SimRequest] = []
        # As vLLM does: no admission in a step that preempted, so a preempted request is never
        # re-admitted before the connector heard about its preemption.
        max_running = self.config.max_running
        while not preempted and self.waiting and budget > 0 and len(self.running) + len(self.loading) < max_running:
            request = self.waiting[0]
            n = self._admit(request, budget)
            if n is None:
                skipped.append(self.waiting.popleft())
                continue
            if n < 0:
                break
            self.waiting.popleft()
            if n:
                scheduled[request.request_id] = n
                budget -= n
        self.waiting.extendleft(reversed(skipped))
        drafts = {rid: len(tokens) for rid, tokens in self._drafts.items()}
        rejected, self._rejected = self._rejected, {}
        output = SchedulerOutput(scheduled, new_blocks, tuple(preempted), drafts, rejected)
        return output, tuple(preempted)

    def _draft_count(self, request: SimRequest, n: int, budget: int) -> int:
        """Draft tokens to schedule after ``request``'s last token: only when decoding, within the
        budget and the request's remaining output (every accepted draft becomes an output token)."""
        decoding = n == 1 and request.num_computed_tokens == request.num_tokens - 1 and bool(request.output)
        if not self.config.speculative_tokens or not decoding:
            return 0
        return max(0, min(self.config.speculative_tokens, budget - 1, request.max_tokens - len(request.output) - 1))

    def _admit(self, request: SimRequest, budget: int) -> int | None:
        """Admit ``request``: returns tokens scheduled (0 when it waits for a load), None when
        the connector asks to retry later, -1 when the GPU pool is full."""
        local = engine_ops.gpu_hit(self.pool, request)
        computed = len(local) * self.config.gpu_block_size
        external, _ = self.scheduler.get_num_new_matched_tokens(request, computed)
        if external is None:
            self.stats.deferred_admissions += 1
            return None
        n = 0 if external else min(request.num_tokens - computed, budget)
        num_blocks = self._blocks_for(computed + external + n)
        if not engine_ops.admit(self.pool, self.scheduler, request, local, num_blocks, external):
            return -1
        self.stats.admitted += 1
        self.stats.admitted_tokens += request.num_tokens
        self.stats.gpu_hit_tokens += computed
        if not self._unwritten.isdisjoint(local):
            self.stats.same_step_gpu_hits += 1
        self._unwritten.update(engine_ops.cache_scheduled(self.pool, request, n))
        if external:
            self.loading[request.request_id] = request
        else:
            self.running.append(request)
        return n

    def _preempt(self, request: SimRequest) -> None:
        self.running.remove(request)
        self._loaded.pop(request.request_id, None)
        engine_ops.preempt(self.pool, request)
        self.waiting.appendleft(request)
        self.stats.preemptions += 1

    def _compute(self, output: SchedulerOutput) -> None:
        readers = self.backend.blocks_read_by_stores()
        size = self.config.gpu_block_size
        for request_id, n in output.num_scheduled_tokens.items():
            request = self.requests[request_id]
            drafts = self._drafts.get(request_id, ())
            start = request.num_computed_tokens
            end = start + n
            parent: int | None = None
            for index in range(start // size, (end - 1) // size + 1):
                block = request.block_ids[index]
                if block in readers:
                    self._fence_breaches.append(
                        f"GPU block {block} written for request {request_id!r} while store job(s) "
                        f"{sorted(readers[block])} still read it"
                    )
                if (index + 1) * size <= min(end, request.num_tokens):
                    block_hash = request.block_hashes[index]
                    self.backend.write_block(block, block_hash)
                    parent = block_hash
                elif (index + 1) * size <= end:
                    # Full, but with drafts' KV: the content of the tokens computed, not the key's.
                    if parent is None and index:
                        parent = request.block_hashes[index - 1]
                    tokens = [_token(request, drafts, p) for p in range(index * size, (index + 1) * size)]
                    parent = chain_hash(parent, tokens)
                    self.backend.write_block(block, parent)
                else:
                    self.backend.write_block(block, None)
            request.num_computed_tokens = end
            self.stats.computed_tokens += n
        self._unwritten.clear()

    def _apply(self, update: ConnectorUpdate) -> None:
        for request_id in update.loaded:
            request = self.loading.pop(request_id, None)
            if request is None:
                continue
            self.stats.integrity_checked_blocks += request.external_tokens // self.config.gpu_block_size
            for block in engine_ops.complete_load(self.pool, request, self.backend.block_matches):
                self.stats.integrity_failures += 1
                self._record([Violation("DataIntegrity", f"block {block} of {request_id!r} loaded wrong bytes")])
            self.stats.offload_hit_tokens += request.external_tokens
            self._loaded[request_id] = request
            self.running.append(request)
        for request_id in update.load_failed:
            request = self.loading.pop(request_id, None)
            if request is not None:
                self.stats.load_failures += 1
                vllm_rules.recompute_after_failed_load(request)
                self.running.append(request)
        for request_id in update.released:
            engine_ops.release(self.pool, self.held.pop(request_id))

    def _sample(self, output: SchedulerOutput) -> tuple[str, ...]:
        finished = []
        for request_id in output.num_scheduled_tokens:
            request = self.requests.get(request_id)
            if request is None or request.num_computed_tokens < request.num_tokens:
                continue
            token = self.rng.randrange(VOCAB)
            drafts = self._drafts.pop(request_id, None)
            if drafts and self._verify(request, drafts) == token:
                # Sampled from the target model where it rejected the draft: another token.
                token = (token + 1) % VOCAB
            request.append_output(token)
            eos = self.config.eos_probability and self.rng.random() < self.config.eos_probability
            if len(request.output) >= request.max_tokens or eos:
                self._finish(request, aborted=False)
                finished.append(request_id)
        return tuple(finished)

    def _verify(self, request: SimRequest, drafts: list[int]) -> int | None:
        """Accept drafts until the first rejection, append the accepted ones; the rejected ones are
        no longer computed. Returns the first rejected draft (None if all were accepted)."""
        accepted = 0
        while accepted < len(drafts) and self._speculative_rng.random() < self.config.speculative_acceptance:
            accepted += 1
        for token in drafts[:accepted]:
            request.append_output(token)
        rejected = len(drafts) - accepted
        request.num_computed_tokens -= rejected
        self.stats.draft_tokens += len(drafts)
        self.stats.accepted_draft_tokens += accepted
        self._rejected[request.request_id] = rejected
        return drafts[accepted] if rejected else None

    def _finish(self, request: SimRequest, aborted: bool) -> None:
        request_id = request.request_id
        del self.requests[request_id]
        self._drafts.pop(request_id, None)
        self._rejected.pop(request_id, None)
        self._loaded.pop(request_id, None)
        if request.status == RUNNING:
            self.running.remove(request)
        elif request.status == LOADING:
            del self.loading[request_id]
        elif request.status == WAITING:
            self.waiting.remove(request)
        hold = False
        if self.scheduler.is_tracked(request_id):
            hold = self.scheduler.request_finished(request, request.block_ids)
        engine_ops.finish(self.pool, request, hold)
        if hold:
            self.held[request_id] = request
        if not aborted:
            self.stats.finished += 1
        for callback in self.on_finished:
            callback(request, aborted)

    def _record(self, violations: Sequence[Violation]) -> None:
        self.stats.violations += len(violations)
        room = MAX_REPORTED_VIOLATIONS - len(self.stats.violation_messages)
        self.stats.violation_messages.extend(f"step {self.stats.steps}: {v}" for v in violations[:room])


def _token(request: SimRequest, drafts: Sequence[int], position: int) -> int:
    """The token at ``position``: the request's own, or a draft scheduled after its last one."""
    return request.token(position) if position < request.num_tokens else drafts[position - request.num_tokens]
