"""vLLM's ``Scheduler`` or ``AsyncScheduler`` with ``KVOffloadConnector``, a model-runner stand-in
and the digest model, stepped with kvoffload's invariants checked after each step.

The stand-in does what vLLM's GPU model runner does with a KV connector, in its order, on the
connector's worker side: ``handle_preemptions``, ``bind_connector_metadata``, the forward,
``start_load_kv``, ``wait_for_save``, ``get_transfer_results``, ``get_block_ids_with_load_errors``,
``build_connector_worker_meta``, ``clear_connector_metadata``; the forward checks every slot it
reads and writes what it computes (:mod:`kvoffload_lab.vllm.simple.model`), and samples a token when the
step ends the request's known sequence. The engine loop is ``EngineCore``'s:

- synchronous (``Scheduler``): ``schedule()``, execute, ``update_from_output`` of that step;
- asynchronous (``AsyncScheduler``): ``EngineCore.step_with_batch_queue`` with a queue of two: step
  N+1 is scheduled and executed before step N's output (sampled tokens, finishes, the connector's
  ``finished_sending`` / ``finished_recving`` / load errors / worker metadata) reaches
  ``update_from_output``. So a finish, a preemption or a transfer report reaches the connector's
  scheduler side one step later, and a request can be in a step while it is finished. The forward
  of a step reads the tokens the scheduler has not heard of yet from the model (each is the token
  sampled after its prefix), as the GPU model runner keeps its own sampled tokens.

Findings (the first is kept, with the step list):

- ``DataIntegrity``: a step read a slot that does not hold its prefix's KV (a load marked computed
  blocks whose bytes were not loaded, or a block reused under a request);
- ``GpuBlockFence``: a store copied a GPU block after it was rewritten;
- kvoffload's invariants (``NoManagerCallAfterSignal`` and the rest of
  :mod:`kvoffload.lifecycles.invariants`), checked by the connector after every step;
- ``Crash``: vLLM or the connector raised;
- ``NoLeak``: once the engine stops stepping, the connector, its worker or vLLM still hold
  requests, jobs or blocks; or the engine never stops stepping.
"""

from __future__ import annotations

import traceback
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from kvoffload.lifecycles.invariants import Violation
from kvoffload_lab.vllm.common.connector_actions import step_while_busy
from kvoffload_lab.vllm.common.vllm_objects import model_runner_output
from kvoffload_lab.vllm.own.build import OwnShape, build_scheduler, build_worker
from kvoffload_lab.vllm.simple.compat import SimpleReads
from kvoffload_lab.vllm.simple.harness import collapse_idle_steps
from kvoffload_lab.vllm.simple.model import DigestModel, next_token

DRAIN_STEPS = 200
# EngineCore's batch queue under async scheduling (VllmConfig.max_concurrent_batches).
ASYNC_BATCHES = 2
# vLLM refuses reset_running_requests while a request waits for a connector load, and goes on.
_RESET_REFUSED = "Failed to reset KV cache even when all the running requests are preempted"


@dataclass(frozen=True)
class OwnConfig:
    """The engine's shape, the polls a copy takes, the scheduling and the connector's mutant."""

    shape: OwnShape = field(default_factory=OwnShape)
    delay: int = 1
    async_scheduling: bool = False
    mutant: str | None = None


@dataclass
class _Added:
    prompt: list[int]
    request: Any  # vLLM's Request


def _crash(error: Exception) -> str:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    return f"{type(error).__name__}: {error} (at {frame.filename}:{frame.lineno})"


class OwnHarness:
    """``findings`` holds the first violation seen."""

    def __init__(self, config: OwnConfig, reads: SimpleReads | None = None) -> None:
        self.config = config
        self.reads = reads or SimpleReads()
        shape = config.shape
        self.scheduler, self.vllm_config, kv_cache_config = build_scheduler(shape, config.async_scheduling,
                                                                            config.mutant)
        self.model = DigestModel(kv_cache_config.num_blocks, shape.block_size)
        self.worker, self.mover = build_worker(self.scheduler, self.vllm_config, kv_cache_config,
                                               self.model.region(), config.delay)
        self.hasher = self.reads.block_hasher(shape.block_size)
        # Steps executed whose output update_from_output has not processed yet (oldest first).
        self.in_flight: deque[tuple[Any, Any]] = deque()
        self.findings: list[Violation] = []
        self.requests: dict[str, _Added] = {}
        self.events: list[str] = []
        self.steps = 0
        self._violations_seen = 0
        self._aborts: list[str] = []
        # What the run exercised: jobs, preemptions, aborts, resets, failed transfers.
        self.reached: Counter[str] = Counter()

    @property
    def side(self) -> Any:
        """The connector's scheduler side (:class:`~kvoffload.vllm.connector.scheduler_side.SchedulerSide`)."""
        return self.scheduler.connector.kvoffload_scheduler

    @property
    def failed(self) -> bool:
        return bool(self.findings)

    # No release of this connector fails a second reset between two steps: the checkers may always reset.
    reset_blocked = False

    @property
    def busy(self) -> bool:
        """Whether vLLM's engine would step: requests, connector work, or outputs to process."""
        return bool(self.scheduler.has_requests() or self.in_flight)

    def live_requests(self) -> list[str]:
        return sorted(rid for rid, r in self.scheduler.requests.items() if not r.is_finished())

    def _violate(self, invariant: str, message: str) -> None:
        if not self.findings:
            self.findings.append(Violation(invariant, message))

    def _guarded(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except Exception as error:
            self._violate("Crash", _crash(error))
        finally:
            self._check_connector()
        return None

    def _check_connector(self) -> None:
        """The connector's own checks: lifecycle errors it raised and invariants it checked."""
        violations = self.side.violations
        for line in violations[self._violations_seen:]:
            text = line.split(": ", 1)[1] if line.startswith("step ") else line
            name, _, message = text.partition(": ")
            self._violate(name if name.isidentifier() else "Lifecycle", message or text)
        self._violations_seen = len(violations)
        for broken in self.mover.fence_breaks:
            self._violate("GpuBlockFence", broken)

    def add_request(self, request_id: str, prompt: list[int], max_tokens: int) -> None:
        """A greedy request that ignores EOS: it finishes after ``max_tokens`` tokens, or by abort."""
        self.events.append(f"add_request({request_id!r}, {len(prompt)} tokens, max_tokens={max_tokens})")
        request = self.reads.request(request_id, prompt, max_tokens, self.hasher)
        self.requests[request_id] = _Added(list(prompt), request)
        self._guarded(self.scheduler.add_request, request)

    def abort(self, request_id: str, mid_step: bool = False) -> None:
        """Abort a request now, between two engine steps; with ``mid_step``, where ``EngineCore``
        also processes aborts: inside the next step, just before ``update_from_output`` (under
        async scheduling, after the following step was scheduled)."""
        if mid_step:
            self.events.append(f"abort({request_id!r}) arrives during the next step")
            self._aborts.append(request_id)
            self.reached["aborts_mid_step"] += 1
            return
        self.reached["aborts"] += 1
        self.events.append(f"abort({request_id!r})")
        self._guarded(self.scheduler.finish_requests, request_id, self.reads.aborted_status())

    def reset_cache(self, running: bool = False) -> None:
        """``reset_prefix_cache(reset_connector=True)`` between steps, as the engine core calls it;
        ``running``: also ``reset_running_requests`` (every running request is preempted)."""
        self.events.append(f"reset_prefix_cache(reset_running_requests={running}, reset_connector=True)")
        self.reached["resets"] += 1
        try:
            self.scheduler.reset_prefix_cache(reset_running_requests=running, reset_connector=True)
        except RuntimeError as error:
            if _RESET_REFUSED not in str(error):
                self._violate("Crash", _crash(error))
        except Exception as error:
            self._violate("Crash", _crash(error))
        self._check_connector()

    def fail_next_transfer(self) -> None:
        """The next store or load the worker submits fails before any byte moves."""
        self.events.append("fail_next_transfer()")
        self.mover.fail_next = True
        self.reached["failed_transfers"] += 1

    def step(self) -> None:
        """One engine step (EngineCore.step or step_with_batch_queue); after a finding, none."""
        if self.failed:
            return
        self.steps += 1
        self._guarded(self._step_async if self.config.async_scheduling else self._step_sync)

    def _step_sync(self) -> None:
        # EngineCore.step: nothing to do without requests.
        if not self.scheduler.has_requests():
            return
        output = self.scheduler.schedule()
        self._update(output, self._execute(output))

    def _step_async(self) -> None:
        # EngineCore.step_with_batch_queue: schedule and execute while the queue has room, then
        # process the oldest step's output.
        queue = self.in_flight
        if self.scheduler.has_requests():
            output = self.scheduler.schedule()
            queue.append((output, self._execute(output)))
            executed = output.total_num_scheduled_tokens > 0
            if len(queue) < ASYNC_BATCHES and (executed or self.scheduler.has_requests()):
                return
        elif not queue:
            return
        self._update(*queue.popleft())

    def _update(self, output: Any, runner_output: Any) -> None:
        # EngineCore._process_aborts_queue, then update_from_output.
        for request_id in self._aborts:
            self.events.append(f"  abort({request_id!r})")
            self.scheduler.finish_requests(request_id, self.reads.aborted_status())
        self._aborts.clear()
        if self.config.async_scheduling and output.num_scheduled_tokens:
            self.events.append(f"  update_from_output(step of {', '.join(output.num_scheduled_tokens)})")
        self.scheduler.update_from_output(output, runner_output)

    def _execute(self, output: Any) -> Any:
        """The model runner: the connector's worker side around the forward; the step's output."""
        from vllm.v1.outputs import KVConnectorOutput

        worker, metadata = self.worker, output.kv_connector_metadata
        self._log_step(output, metadata)
        worker.handle_preemptions(metadata)
        null = worker.config.null_block
        for job in metadata.jobs.loads:
            self.model.loaded_blocks.update(block for block in job.gpu_block_ids if block != null)
        worker.bind_connector_metadata(metadata)
        sampled = self._forward(output)
        worker.start_load_kv(None)
        worker.wait_for_save()
        results = worker.get_transfer_results(set(output.finished_req_ids))
        connector_output = KVConnectorOutput(
            finished_sending=results.finished_sending or None, finished_recving=results.finished_recving or None,
            kv_connector_worker_meta=worker.build_connector_worker_meta(),
            invalid_block_ids=worker.get_block_ids_with_load_errors())
        worker.clear_connector_metadata()
        return model_runner_output(output, sampled, connector_output)

    def _forward(self, output: Any) -> dict[str, list[int]]:
        sampled: dict[str, list[int]] = {}
        for request_id, count in output.num_scheduled_tokens.items():
            request = self.scheduler.requests[request_id]
            end = request.num_computed_tokens  # schedule() advanced it past this step's tokens
            tokens = list(request.all_token_ids)
            # Tokens sampled by steps whose output the scheduler has not processed (async only).
            while len(tokens) < end:
                tokens.append(next_token(tokens))
            block_ids = list(self.scheduler.kv_cache_manager.get_block_ids(request_id)[0])
            wrong = self.model.forward(request_id, tokens, block_ids, end - count, end)
            if wrong is not None:
                self._violate("DataIntegrity", str(wrong))
            sampled[request_id] = [] if request.is_prefill_chunk else [next_token(tokens[:end])]
        return sampled

    def _log_step(self, output: Any, metadata: Any) -> None:
        jobs = metadata.jobs
        self.reached.update(store_jobs=len(jobs.stores), load_jobs=len(jobs.loads),
                            preemptions=len(output.preempted_req_ids or ()))
        parts = [f"{rid}+{n}" for rid, n in output.num_scheduled_tokens.items()]
        parts += [f"{job.kind}#{job.job_id} of {job.request_id} gpu{list(job.gpu_block_ids)}"
                  f"{'->' if job.kind == 'store' else '<-'}cpu{list(job.cpu_block_ids)}"
                  for job in (*jobs.stores, *jobs.loads)]
        if jobs.flush:
            parts.append(f"flush {list(jobs.flush)}")
        if metadata.released:
            parts.append(f"released {sorted(metadata.released)}")
        if output.preempted_req_ids:
            parts.append(f"preempted {sorted(output.preempted_req_ids)}")
        if output.finished_req_ids:
            parts.append(f"finished {sorted(output.finished_req_ids)}")
        self.events.append(f"step {self.steps}: " + (", ".join(parts) or "nothing scheduled"))

    def held(self) -> list[str]:
        """What the engine still holds: the connector's leaks, jobs in the worker, vLLM's requests
        and GPU blocks with references."""
        found = list(self.side.leaks())
        if self.mover.in_flight():
            found.append(f"worker jobs in flight {sorted(self.mover.in_flight())}")
        if self.scheduler.requests:
            found.append(f"vLLM requests {sorted(self.scheduler.requests)}")
        pool = self.scheduler.kv_cache_manager.block_pool
        gpu = [b.block_id for b in pool.blocks if b.ref_cnt > 0 and not b.is_null]
        if gpu:
            found.append(f"GPU blocks {gpu} (ref_cnt > 0)")
        return found

    def drain(self) -> None:
        """Step while vLLM's engine would; then it must hold nothing (``NoLeak``)."""
        step_while_busy(self, DRAIN_STEPS)
        if self.failed:
            return
        if self.busy:
            self._violate("NoLeak", f"the engine never became idle: after {DRAIN_STEPS} more steps it holds "
                                    + "; ".join(self.held() or ["nothing it reports"]))
            return
        held = self.held()
        if held:
            self._violate("NoLeak", "the engine is idle and still holds " + "; ".join(held))

    def trace(self) -> list[str]:
        return collapse_idle_steps(self.events)


def _pool_state(pool: Any) -> tuple[Any, ...]:
    blocks = tuple((b.ref_cnt, b.block_hash) for b in pool.blocks)
    return blocks, tuple(b.block_id for b in pool.free_block_queue.get_all_free_blocks())


def fingerprint(harness: OwnHarness) -> tuple[Any, ...]:
    """What distinguishes two engine states: vLLM's requests and block pool, the steps in flight,
    the connector's scheduler side (its scheduler's and manager's snapshot, what vLLM keeps for it),
    its worker side, the mover's pending copies, and every KV byte."""
    scheduler = harness.scheduler
    requests = tuple(
        (rid, str(r.status), r.num_computed_tokens, r.num_tokens, r.num_output_placeholders,
         tuple(scheduler.kv_cache_manager.get_block_ids(rid)[0]))
        for rid, r in sorted(scheduler.requests.items())
    )
    side, worker = harness.side, harness.worker.kvoffload_worker
    mover = harness.mover
    return (
        requests, tuple(sorted(scheduler.finished_req_ids)), _pool_state(scheduler.kv_cache_manager.block_pool),
        tuple(repr(runner) for _, runner in harness.in_flight), tuple(harness._aborts),
        repr(side.scheduler.snapshot()), *side.state_fingerprint(), worker.state_fingerprint(),
        repr(mover.pending()), mover.fail_next,
        harness.model.kv.numpy().tobytes(), b"".join(layer.numpy().tobytes() for layer in mover.cpu_layers),
    )
