"""One vLLM connector + pattern worker + kvoffload engine, stepped with every check after each step.

Shared by the three checkers. After each engine step: kvoffload's invariants on the engine's
snapshot (``GpuBlockFence``), the engine's byte comparison of every loaded block
(``DataIntegrity``), and the violations the recording proxy saw. An exception raised inside vLLM is
a ``Crash`` finding; one raised in kvoffload's own adapter (a call this vLLM's API does not take) is
not vLLM's: it raises :class:`~kvoffload_lab.vllm.common.findings.UnsupportedVllmApi` out of the
checker. :meth:`Harness.drain` finishes every job and checks ``NoLeak`` (vLLM's state, the proxy's
pins, the worker) and the drain-time contract checks of the proxy. :meth:`Harness.close` shuts
vLLM's connector down when the run is over (the tiering manager's shared-memory region).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvoffload.lifecycles.invariants import Violation
from kvoffload_lab.sim.engine import EngineConfig
from kvoffload_lab.vllm.common.findings import CRASH, UnsupportedVllmApi, vllm_crash
from kvoffload_lab.vllm.offloading.adapter import VllmConnector, VllmEngine
from kvoffload_lab.vllm.offloading.build import ConnectorShape
from kvoffload_lab.vllm.offloading.compat import PrivateReads
from kvoffload_lab.vllm.offloading.worker import PatternWorker

DRAIN_STEPS = 2_000


@dataclass(frozen=True)
class HarnessConfig:
    """The connector's shape, the worker's completion delay, scheduling mode and engine rates."""

    shape: ConnectorShape = field(default_factory=ConnectorShape)
    delay_steps: int = 1
    async_scheduling: bool = False
    # A step that scheduled nothing still passes its worker's empty output to the connector, as
    # vLLM's multiprocess executor does (in process, vLLM's engine drops it).
    empty_step_reports: bool = False
    abort_probability: float = 0.0
    eos_probability: float = 0.05
    max_batched_tokens: int = 16
    max_running: int = 4
    seed: int = 0


class Harness:
    """Steps the engine; ``findings`` holds the violations seen so far (the first step's only)."""

    def __init__(self, manager: str, config: HarnessConfig, reads: PrivateReads) -> None:
        shape = config.shape
        self.config = config
        self.reads = reads
        self.connector = VllmConnector(manager, shape, reads, config.async_scheduling, config.empty_step_reports)
        self.worker = PatternWorker(shape.gpu_blocks, shape.cpu_chunks, config.delay_steps)
        if manager == "tiering":
            self.worker.key_of_block = self.connector.proxy.key_of
            self.connector.proxy.on_promotion = self.worker.restore
        engine_config = EngineConfig(
            num_gpu_blocks=shape.gpu_blocks,
            gpu_block_size=shape.block_size,
            blocks_per_chunk=shape.blocks_per_chunk,
            num_cpu_blocks=shape.cpu_chunks,
            max_num_batched_tokens=config.max_batched_tokens,
            max_running=config.max_running,
            eos_probability=config.eos_probability,
            abort_probability=config.abort_probability,
            seed=config.seed,
        )
        self.engine = VllmEngine(engine_config, self.connector, self.worker)
        self.engine.on_error = self._record_crash
        self.findings: list[Violation] = []
        # Set when kvoffload's own code failed: the run is over, and nothing it found is vLLM's.
        self.unsupported: UnsupportedVllmApi | None = None
        # Whether a reset ran since the last step (see reset_blocked).
        self.reset_since_step = False
        self._proxy_seen = 0
        self._integrity_seen = 0

    @property
    def failed(self) -> bool:
        """A finding was made, or kvoffload's harness failed: the engine steps no more."""
        return bool(self.findings) or self.unsupported is not None

    @property
    def busy(self) -> bool:
        """Whether the engine has work: live requests, or jobs and finishes still to report."""
        return bool(self.engine.requests) or not self.engine.idle

    def live_requests(self) -> list[str]:
        return sorted(self.engine.requests)

    def add_request(self, request_id: str, prompt: list[int], max_tokens: int) -> None:
        """A request that produces ``max_tokens`` tokens (EOS as the config draws it), or is aborted."""
        self.engine.add_request(prompt, max_tokens, request_id)

    def _crash(self, error: Exception) -> Violation:
        """The ``Crash`` finding of an exception vLLM raised; kvoffload's own failure raises
        :class:`UnsupportedVllmApi` instead, and is kept so that the shutdown does not report it again."""
        try:
            return Violation(CRASH, vllm_crash(error))
        except UnsupportedVllmApi as unsupported:
            self.unsupported = unsupported
            raise

    def _record_crash(self, error: Exception) -> None:
        self.findings.append(self._crash(error))

    def step(self) -> None:
        """One engine step and every check; a crash inside vLLM becomes a finding. After a finding
        (one made while a request was added, say) the engine steps no more."""
        if self.failed:
            return
        self.reset_since_step = False
        try:
            report = self.engine.step()
        except Exception as error:  # vLLM raising is a finding, reported with the steps before it
            # The crash leads: the contract breaks recorded on the way to it are in the step list.
            self.findings.insert(0, self._crash(error))
            self._collect([])
            return
        self._collect(list(report.violations))

    @property
    def reset_blocked(self) -> bool:
        """A reset ran since the last step and this release asserts on a second one (0.26.0 to
        0.33.0: the known assertion, reproduced on its own by scripts/repro_double_reset.py)."""
        return self.reset_since_step and self.reads.second_reset_asserts()

    def reset_cache(self) -> bool:
        """``reset_prefix_cache(reset_connector=True)`` as vLLM runs it: the connector is reset
        whatever runs (the GPU prefix cache only when no request holds a block); not while
        :attr:`reset_blocked`. Returns whether it ran."""
        engine = self.engine
        if self.reset_blocked or self.connector.finishes_in_flight:
            return False
        self.reset_since_step = True
        try:
            engine.reset_cache()
        except Exception as error:
            self._record_crash(error)
        return True

    def abort(self, request_id: str) -> None:
        try:
            self.engine.abort(request_id)
        except Exception as error:
            self._record_crash(error)
        self._collect([])

    def drain(self) -> None:
        """Step until nothing is left, then the leak and drain-time contract checks."""
        engine = self.engine
        for _ in range(DRAIN_STEPS):
            if self.failed or engine.idle:
                break
            self.step()
        if self.failed:
            return
        if not engine.idle:
            self.findings.append(Violation("EventuallyCleaned", f"not idle after {DRAIN_STEPS} drain steps"))
            return
        leaks = self.connector.leaks() + [f"worker still runs job {j}" for j in sorted(self.worker.in_flight())]
        self.findings += [Violation("NoLeak", leak) for leak in leaks]
        self.findings += self.connector.proxy.drain_violations()

    def close(self) -> None:
        """Shut vLLM's connector down; its run is over. An exception in vLLM's shutdown is a finding,
        unless kvoffload's harness failed already (the connector was left mid-call: its shutdown
        proves nothing)."""
        try:
            self.connector.close()
        except Exception as error:
            if self.unsupported is None:
                self._record_crash(error)

    def _collect(self, invariant_violations: list[Violation]) -> None:
        self.findings += invariant_violations
        ledger = self.connector.proxy.ledger
        self.findings += ledger.violations[self._proxy_seen:]
        self._proxy_seen = len(ledger.violations)
        stats = self.engine.stats
        if stats.integrity_failures > self._integrity_seen:
            messages = [m for m in stats.violation_messages if "DataIntegrity" in m]
            text = messages[-1].split("DataIntegrity: ", 1)[-1] if messages else "a loaded block holds wrong bytes"
            self.findings.append(Violation("DataIntegrity", text))
            self._integrity_seen = stats.integrity_failures
