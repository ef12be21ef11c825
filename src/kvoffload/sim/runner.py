"""Build an engine + workload from options, run it to completion, summarise (``kvoffload simulate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvoffload.offload.policies import POLICIES
from kvoffload.offload.types import DEFAULT_POLICY
from kvoffload.sim.engine import Engine, EngineConfig
from kvoffload.sim.workload import MultiTurnWorkload, WorkloadConfig

# Option -> its command-line flag, where the two names differ.
FLAGS = {"num_gpu_blocks": "--gpu-blocks", "num_cpu_blocks": "--cpu-blocks", "gpu_block_size": "--block-size"}


@dataclass(frozen=True)
class SimulationOptions:
    """What ``kvoffload simulate`` exposes; ``faults`` also sets abort and reset rates."""

    users: int = 24
    turns: int = 4
    seed: int = 0
    # The size names of OffloadConfig and EngineConfig; the command-line flags are shorter.
    num_gpu_blocks: int = 96
    num_cpu_blocks: int = 512
    gpu_block_size: int = 16
    blocks_per_chunk: int = 1
    policy: str = DEFAULT_POLICY
    delay: int = 1
    faults: float = 0.0
    backend: str = "torch"
    trace_path: str | None = None
    max_steps: int = 200_000
    # A bug-zoo mutant (kvoffload mutants) run instead of our code; its crashes are reported violations.
    mutant: str | None = None

    def __post_init__(self) -> None:
        for name in ("users", "turns", "num_gpu_blocks", "num_cpu_blocks", "gpu_block_size", "blocks_per_chunk",
                     "max_steps"):
            if getattr(self, name) < 1:
                flag = FLAGS.get(name, "--" + name.replace("_", "-"))
                raise ValueError(f"{flag} must be >= 1, got {getattr(self, name)}")
        if self.delay < 0:
            raise ValueError(f"--delay must be >= 0, got {self.delay}")
        if not 0.0 <= self.faults <= 1.0:
            raise ValueError(f"--faults must be in [0, 1], got {self.faults}")
        if self.policy not in POLICIES:
            raise ValueError(f"--policy {self.policy!r} is unknown; known: {', '.join(sorted(POLICIES))}")
        if self.backend not in ("model", "torch"):
            raise ValueError(f"--backend must be model or torch, got {self.backend!r}")
        if self.mutant is not None:
            from kvoffload.verify.bugzoo import MUTANTS

            if self.mutant not in MUTANTS:
                raise ValueError(f"--mutant {self.mutant!r} is unknown; known: {', '.join(sorted(MUTANTS))}")

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            num_gpu_blocks=self.num_gpu_blocks,
            gpu_block_size=self.gpu_block_size,
            blocks_per_chunk=self.blocks_per_chunk,
            num_cpu_blocks=self.num_cpu_blocks,
            policy=self.policy,
            fault_rate=self.faults,
            abort_probability=self.faults,
            reset_probability=self.faults / 10,
            job_delay_steps=self.delay,
            seed=self.seed,
        )


def build_engine(options: SimulationOptions) -> Engine:
    config = options.engine_config()
    backend = None
    if options.backend == "torch":
        from kvoffload.sim.torch_backend import TorchBackend

        backend = TorchBackend.for_engine(config)
    if options.mutant is not None:
        from kvoffload.verify.bugzoo import MUTANTS
        from kvoffload.verify.bugzoo.simulation import mutant_engine

        return mutant_engine(MUTANTS[options.mutant], config, backend)
    return Engine(config, backend=backend)


def simulate(options: SimulationOptions, progress: bool = False) -> dict[str, Any]:
    """Run the workload to completion and drain; returns the summary printed by the command."""
    engine = build_engine(options)
    workload = MultiTurnWorkload(WorkloadConfig(users=options.users, turns=options.turns, seed=options.seed))
    workload.attach(engine)
    writer = None
    if options.trace_path:
        from kvoffload.statemachine.trace import TraceWriter

        writer = TraceWriter.open(options.trace_path)
        engine.scheduler.attach_trace(writer)
    try:
        _run(engine, workload, options.max_steps, progress)
    except Exception as error:
        if options.mutant is None:
            raise
        # The mutant's bug crashed the run: that is the violation it was run to show.
        invariant = getattr(error, "invariant", None) or "Crash"
        engine.stats.violations += 1
        message = f"step {engine.stats.steps}: {invariant}: {type(error).__name__}: {error}"
        engine.stats.violation_messages.append(message)
    finally:
        if writer is not None:
            writer.close()
    return summarise(engine)


def _run(engine: Engine, workload: MultiTurnWorkload, max_steps: int, progress: bool) -> None:
    from rich.progress import Progress

    with Progress(transient=True, disable=not progress) as bar:
        task = bar.add_task("simulating", total=workload.total_turns)
        for _ in range(max_steps):
            workload.tick(engine)
            if workload.done and engine.idle:
                return
            engine.step()
            bar.update(task, completed=engine.stats.finished + engine.stats.aborted)
    raise RuntimeError(f"simulation did not finish within {max_steps} steps")


def summarise(engine: Engine) -> dict[str, Any]:
    stats = engine.stats
    scheduler = engine.scheduler.stats
    return {
        "finished": stats.finished,
        "aborted": stats.aborted,
        "steps": stats.steps,
        "violations": stats.violations,
        "leaks": len(engine.leaks()),
        "stored_chunks": scheduler.stored_chunks,
        "loaded_chunks": scheduler.loaded_chunks,
        "offload_hit_tokens": stats.offload_hit_tokens,
        "gpu_hit_tokens": stats.gpu_hit_tokens,
        "prompt_tokens": stats.prompt_tokens,
        "admitted_tokens": stats.admitted_tokens,
        "computed_tokens": stats.computed_tokens,
        "preemptions": stats.preemptions,
        "resets": stats.resets,
        "load_failures": scheduler.load_failures,
        "store_failures": scheduler.store_failures,
        "stale_completions": scheduler.stale_completions,
        "fence_flushes": scheduler.fence_flushes,
        "deferred_admissions": stats.deferred_admissions,
        "integrity_checked_blocks": stats.integrity_checked_blocks,
        "integrity_failures": stats.integrity_failures,
        "policy": engine.scheduler.manager.policy.name,
        "violation_messages": stats.violation_messages,
    }
