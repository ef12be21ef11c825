"""vLLM's ``Scheduler`` with ``SimpleCPUOffloadConnector``, the digest model and vLLM's worker, stepped
with every check after each step.

One step is what vLLM's engine core and GPU model runner do, in their order: ``schedule()``; on the
worker ``handle_preemptions``, ``bind_connector_metadata``, the forward, ``start_load_kv``,
``wait_for_save``, ``get_finished``, ``build_connector_worker_meta``, ``clear_connector_metadata``;
then ``update_from_output`` with the sampled tokens and the connector's output. The engine steps
while ``Scheduler.has_requests()`` (which includes the connector's pending stores), as vLLM's does.

Findings, each with the step list that led to it:

- ``Crash``: vLLM raised (file and line); kvoffload's own code raising (a call this vLLM's API does
  not take) is no finding: it raises :class:`~kvoffload_lab.vllm.common.findings.UnsupportedVllmApi`;
- ``DataIntegrity``: a step read a slot that does not hold its prefix's KV (:mod:`.model`);
- ``GpuBlockFence``: a store's GPU block changed while the store read it (:mod:`.backend`);
- ``NoLeak``: at idle, the connector still holds blocks (GPU or CPU), requests or transfers;
- ``FinalBlockStored``, a loss and not a safety violation: a request that finished by length left a
  full block it computed out of the CPU tier (vLLM #41704). Counted in eager mode only (lazy mode
  offloads a block only as it nears eviction from the GPU), and only when nothing can have evicted
  it: no cache reset since the request arrived, and no CPU block allocated twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvoffload.lifecycles.invariants import Violation
from kvoffload_lab.vllm.common.connector_actions import step_while_busy
from kvoffload_lab.vllm.common.findings import CRASH, UnsupportedVllmApi, vllm_crash
from kvoffload_lab.vllm.simple.build import SimpleShape, build_scheduler
from kvoffload_lab.vllm.simple.compat import SimpleReads
from kvoffload_lab.vllm.simple.model import DigestModel, next_token
from kvoffload_lab.vllm.simple.worker import make_worker

DRAIN_STEPS = 150
LOSS = "FinalBlockStored"
SAFETY = ("Crash", "DataIntegrity", "GpuBlockFence", "NoLeak")


@dataclass(frozen=True)
class SimpleConfig:
    """The engine's shape and the polls a copy takes to complete."""

    shape: SimpleShape = field(default_factory=SimpleShape)
    delay: int = 1


@dataclass
class _Added:
    prompt: list[int]
    max_tokens: int
    resets_at_arrival: int
    request: Any  # vLLM's Request: its token list keeps every token once finished
    aborted: bool = False
    tokens: list[int] | None = None  # every token, once finished


class SimpleHarness:
    """``findings`` holds the safety violations seen (the first only), ``losses`` the lost blocks."""

    def __init__(self, config: SimpleConfig, reads: SimpleReads) -> None:
        self.config = config
        self.reads = reads
        shape = config.shape
        self.scheduler, self.vllm_config, kv_cache_config = build_scheduler(shape)
        self.model = DigestModel(kv_cache_config.num_blocks, shape.block_size)
        cpu_bytes = self.vllm_config.kv_transfer_config.kv_connector_extra_config["cpu_bytes_to_use"]
        self.worker = make_worker(self.vllm_config, kv_cache_config, cpu_bytes, config.delay)
        self.worker.attach({"kv": self.model.region()})
        self.hasher = reads.block_hasher(shape.block_size)
        self.findings: list[Violation] = []
        # Set when kvoffload's own code failed: the run is over, and nothing it found is vLLM's.
        self.unsupported: UnsupportedVllmApi | None = None
        self.losses: list[str] = []
        self.requests: dict[str, _Added] = {}
        self.events: list[str] = []
        self.resets = 0
        self.cpu_allocations = 0
        self.steps = 0

    @property
    def connector(self) -> Any:
        return self.scheduler.connector

    @property
    def manager(self) -> Any:
        """vLLM's ``SimpleCPUOffloadScheduler``."""
        return self.scheduler.connector.scheduler_manager

    @property
    def failed(self) -> bool:
        return bool(self.findings) or self.unsupported is not None

    # No release of this connector fails a second reset between two steps: the checkers may always reset.
    reset_blocked = False

    @property
    def busy(self) -> bool:
        """Whether vLLM's engine would step: requests, finishes to report, or pending stores."""
        return bool(self.scheduler.has_requests())

    def live_requests(self) -> list[str]:
        return sorted(self.scheduler.requests)

    def _violate(self, invariant: str, message: str) -> None:
        if not self.findings:
            self.findings.append(Violation(invariant, message))

    def _crash(self, error: Exception) -> None:
        """``error`` raised in vLLM is a ``Crash`` finding; kvoffload's own failure raises
        :class:`UnsupportedVllmApi` instead."""
        try:
            self._violate(CRASH, vllm_crash(error))
        except UnsupportedVllmApi as unsupported:
            self.unsupported = unsupported
            raise

    def add_request(self, request_id: str, prompt: list[int], max_tokens: int) -> None:
        """A greedy request that ignores EOS: it finishes after ``max_tokens`` tokens, or by abort."""
        self.events.append(f"add_request({request_id!r}, {len(prompt)} tokens, max_tokens={max_tokens})")
        try:
            request = self.reads.request(request_id, prompt, max_tokens, self.hasher)
            self.requests[request_id] = _Added(list(prompt), max_tokens, self.resets, request)
            self.scheduler.add_request(request)
        except Exception as error:
            self._crash(error)

    def abort(self, request_id: str) -> None:
        self.events.append(f"abort({request_id!r})")
        self.requests[request_id].aborted = True
        try:
            self.scheduler.finish_requests(request_id, self.reads.aborted_status())
        except Exception as error:
            self._crash(error)

    def reset_cache(self) -> bool:
        """``reset_prefix_cache(reset_connector=True)`` between steps, as the engine core calls it."""
        self.events.append("reset_prefix_cache(reset_connector=True)")
        self.resets += 1
        try:
            return bool(self.scheduler.reset_prefix_cache(reset_connector=True))
        except Exception as error:
            self._crash(error)
            return False

    def step(self, after_finding: bool = False) -> None:
        """One engine step; a crash inside vLLM becomes a finding. After a finding the engine steps
        no more, unless ``after_finding`` (the finding left the engine able to go on); after
        kvoffload's own failure, never."""
        if (self.failed and not after_finding) or self.unsupported is not None:
            return
        self.steps += 1
        try:
            self._step()
        except Exception as error:
            self._crash(error)
        for broken in self.worker.backend.fence_breaks:
            self._violate("GpuBlockFence", str(broken))

    def _step(self) -> None:
        scheduler, worker = self.scheduler, self.worker
        output = scheduler.schedule()
        metadata = output.kv_connector_metadata
        self._log_step(output, metadata)
        worker.handle_preemptions(metadata)
        worker.bind_connector_metadata(metadata)
        sampled = self._forward(output)
        worker.start_load_kv()
        self.model.loaded_blocks.update(metadata.load_gpu_blocks)
        worker.wait_for_save()
        self.cpu_allocations += len(metadata.store_cpu_blocks)
        _, finished_recving = worker.get_finished(set(output.finished_req_ids))
        worker_meta = worker.build_connector_worker_meta()
        worker.clear_connector_metadata()
        before = set(scheduler.requests)
        scheduler.update_from_output(output, self.reads.runner_output(output, sampled, finished_recving, worker_meta))
        for request_id in before - set(scheduler.requests):
            self._finished(request_id)

    def _forward(self, output: Any) -> dict[str, list[int]]:
        sampled: dict[str, list[int]] = {}
        for request_id, count in output.num_scheduled_tokens.items():
            request = self.scheduler.requests[request_id]
            tokens = list(request.all_token_ids)
            end = request.num_computed_tokens  # schedule() has advanced it past this step's tokens
            block_ids = list(self.scheduler.kv_cache_manager.get_block_ids(request_id)[0])
            wrong = self.model.forward(request_id, tokens, block_ids, end - count, end)
            if wrong is not None:
                self._violate("DataIntegrity", str(wrong))
            sampled[request_id] = [next_token(tokens[:end])] if end >= len(tokens) else []
        return sampled

    def _log_step(self, output: Any, metadata: Any) -> None:
        parts = [f"{rid}+{n}" for rid, n in output.num_scheduled_tokens.items()]
        if metadata.store_gpu_blocks:
            parts.append(f"store#{metadata.store_event} gpu{list(metadata.store_gpu_blocks)}"
                         f"->cpu{list(metadata.store_cpu_blocks)}")
        if metadata.load_gpu_blocks:
            parts.append(f"load#{metadata.load_event} cpu{list(metadata.load_cpu_blocks)}"
                         f"->gpu{list(metadata.load_gpu_blocks)}")
        if output.preempted_req_ids:
            parts.append(f"preempted {sorted(output.preempted_req_ids)}")
        if output.finished_req_ids:
            parts.append(f"finished {sorted(output.finished_req_ids)}")
        self.events.append(f"step {self.steps}: " + (", ".join(parts) or "nothing scheduled"))

    def _finished(self, request_id: str) -> None:
        added = self.requests.get(request_id)
        if added is None or added.tokens is not None:
            return
        added.tokens = list(added.request.all_token_ids)

    def drain(self) -> None:
        """Step while vLLM's engine would (``Scheduler.has_requests()``); then the copies in flight
        finish, as DMA does with no step to report it, and the idle engine must hold nothing
        (``NoLeak``); then the losses."""
        stores_before = self.worker.backend.launched
        step_while_busy(self, DRAIN_STEPS)
        if self.failed:
            return
        if self.busy:
            live = self.live_requests()
            self._violate("NoLeak", (
                f"the engine never became idle: after {DRAIN_STEPS} more steps, with "
                + (f"requests {live} still live" if live else "no request left")
                + f", Scheduler.has_requests() is still true and the connector issued "
                f"{self.worker.backend.launched - stores_before} more transfers; it holds "
                + "; ".join(self.reads.held(self.scheduler, self.config.shape))))
            return
        self.worker.finish_copies()
        held = self.reads.held(self.scheduler, self.config.shape)
        if held:
            self._violate("NoLeak", "the engine is idle (Scheduler.has_requests() is false, so it steps no more) "
                                    "and the connector still holds " + "; ".join(held))
            self._settle()
        self._count_losses()

    def _settle(self) -> None:
        """Step as the next request's arrival would make the engine do, until the connector holds
        nothing, so that what it stored can be counted."""
        for _ in range(DRAIN_STEPS):
            if not (self.reads.held(self.scheduler, self.config.shape) or self.worker.in_flight()):
                return
            self.step(after_finding=True)
            self.worker.finish_copies()

    def _count_losses(self) -> None:
        if self.config.shape.lazy or any(f.invariant != "NoLeak" for f in self.findings):
            return  # lazy mode keeps blocks on the GPU by design; a broken engine proves nothing
        if self.cpu_allocations >= self.config.shape.cpu_blocks:
            return  # a CPU block may have been evicted and reused: a missing block proves nothing
        size = self.config.shape.block_size
        for request_id, added in self.requests.items():
            if added.aborted or added.tokens is None or added.resets_at_arrival != self.resets:
                continue
            # The last token is sampled and never computed: its slot's block is not full KV.
            full = (len(added.tokens) - 1) // size
            missing = self.reads.blocks_not_in_cpu(self.manager, added.request.block_hashes[:full])
            for index in missing:
                final = " (its final full block)" if index == full - 1 else ""
                self.losses.append(f"request '{request_id}' finished by length with {full} full block(s) "
                                   f"computed; block {index}{final} never reached the CPU tier")

    def trace(self) -> list[str]:
        return collapse_idle_steps(self.events)


def collapse_idle_steps(events: list[str]) -> list[str]:
    """``events`` with each run of steps that scheduled nothing and moved nothing as one line."""
    lines: list[str] = []
    idle: list[str] = []
    for event in [*events, ""]:
        if event.endswith(": nothing scheduled"):
            idle.append(event.split(":")[0].removeprefix("step "))
            continue
        if idle:
            lines.append(f"step {idle[0]}: nothing scheduled" if len(idle) == 1
                         else f"steps {idle[0]}-{idle[-1]}: nothing scheduled")
            idle = []
        if event:
            lines.append(event)
    return lines
