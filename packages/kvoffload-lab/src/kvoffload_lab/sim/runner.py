"""Build an engine + workload from options, run it to completion, summarise (``kvoffload simulate``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvoffload.offload.policies import POLICIES
from kvoffload.offload.types import DEFAULT_POLICY
from kvoffload_lab.sim.engine import Engine, EngineConfig
from kvoffload_lab.sim.kv_model import KVBackend
from kvoffload_lab.sim.workload import MultiTurnWorkload, WorkloadConfig

# Bytes per GPU block token and per CPU block token of the torch backend's K/V tensors (2 layers,
# K and V, 2 KV heads of 8 fp16 values), and what the simulator's own bookkeeping costs per block.
TORCH_BYTES_PER_TOKEN = 2 * 2 * 2 * 8 * 2
BOOKKEEPING_BYTES_PER_BLOCK = 200
# Option -> its command-line flag, where the two names differ.
FLAGS = {"num_gpu_blocks": "--gpu-blocks", "num_cpu_blocks": "--cpu-blocks", "gpu_block_size": "--block-size"}

# Builds the engine from its config and (torch) backend: a bug-zoo mutant's engine
# (kvoffload_lab.commands.mutant_engine) in place of ours.
EngineFactory = Callable[[EngineConfig, KVBackend | None], Engine]


class SimulationStopped(Exception):
    """The run stopped before the workload finished; ``summary`` holds the figures so far."""

    def __init__(self, reason: str, summary: dict[str, Any]) -> None:
        self.reason = reason
        self.summary = summary
        super().__init__(reason)


def memory_limit_bytes() -> int:
    """Half of this machine's physical memory: the most a simulation may plan to allocate."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 8 << 30


@dataclass(frozen=True)
class SimulationOptions:
    """What ``kvoffload simulate`` exposes; ``faults`` also sets abort and reset rates."""

    users: int = 24
    turns: int = 4
    seed: int = 0
    # Steps over which the users' first turns arrive (0: all in the first step), and how many
    # system prompts the users share in turn (see WorkloadConfig).
    arrival_spread: int = 60
    system_prompts: int = 1
    # The size names of OffloadConfig and EngineConfig; the command-line flags are shorter.
    num_gpu_blocks: int = 96
    num_cpu_blocks: int = 512
    gpu_block_size: int = 16
    blocks_per_chunk: int = 1
    policy: str = DEFAULT_POLICY
    delay: int = 1
    faults: float = 0.0
    backend: str = "torch"
    # Where the torch backend's "GPU" tensors live: "cpu", or "cuda" for the mover's CUDA path.
    device: str = "cpu"
    trace_path: str | None = None
    max_steps: int = 200_000
    speculative_tokens: int = 0
    speculative_acceptance: float = 0.7

    def __post_init__(self) -> None:
        for name in ("users", "turns", "num_gpu_blocks", "num_cpu_blocks", "gpu_block_size", "blocks_per_chunk",
                     "max_steps", "system_prompts"):
            if getattr(self, name) < 1:
                flag = FLAGS.get(name, "--" + name.replace("_", "-"))
                raise ValueError(f"{flag} must be >= 1, got {getattr(self, name)}")
        if self.delay < 0:
            raise ValueError(f"--delay must be >= 0, got {self.delay}")
        if self.arrival_spread < 0:
            raise ValueError(f"--arrival-spread must be >= 0, got {self.arrival_spread}")
        if not 0.0 <= self.faults <= 1.0:
            raise ValueError(f"--faults must be in [0, 1], got {self.faults}")
        if self.speculative_tokens < 0:
            raise ValueError(f"--speculative-tokens must be >= 0, got {self.speculative_tokens}")
        if not 0.0 <= self.speculative_acceptance <= 1.0:
            raise ValueError(f"--speculative-acceptance must be in [0, 1], got {self.speculative_acceptance}")
        if self.policy not in POLICIES:
            raise ValueError(f"--policy {self.policy!r} is unknown; known: {', '.join(sorted(POLICIES))}")
        if self.backend not in ("model", "torch"):
            raise ValueError(f"--backend must be model or torch, got {self.backend!r}")
        self._check_device()
        self._check_sizes()

    def _check_device(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu or cuda, got {self.device!r}")
        if self.device == "cpu":
            return
        if self.backend != "torch":
            raise ValueError(f"--device {self.device} moves real tensors: it needs --backend torch, not {self.backend}")
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                f"--device cuda, but torch {torch.__version__} sees no CUDA device "
                f"(torch.version.cuda={torch.version.cuda})"
            )

    def planned_bytes(self) -> int:
        """What the engine, the pools and (torch) the K/V tensors need, before any is allocated."""
        cpu_gpu_blocks = self.num_cpu_blocks * self.blocks_per_chunk
        total = (self.num_gpu_blocks + self.num_cpu_blocks) * BOOKKEEPING_BYTES_PER_BLOCK
        if self.backend == "torch":
            total += (self.num_gpu_blocks + cpu_gpu_blocks) * self.gpu_block_size * TORCH_BYTES_PER_TOKEN
        return total

    def _check_sizes(self) -> None:
        planned, limit = self.planned_bytes(), memory_limit_bytes()
        if planned > limit:
            raise ValueError(
                f"--gpu-blocks {self.num_gpu_blocks} x --cpu-blocks {self.num_cpu_blocks} x --block-size "
                f"{self.gpu_block_size} ({self.backend} backend) needs about {planned / 2**30:.1f} GiB, more than "
                f"the {limit / 2**30:.1f} GiB allowed (half of this machine's memory)"
            )

    def workload_config(self) -> WorkloadConfig:
        """The multi-turn workload these options describe."""
        return WorkloadConfig(
            users=self.users, turns=self.turns, arrival_spread_steps=self.arrival_spread,
            system_prompts=self.system_prompts, seed=self.seed,
        )

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            num_gpu_blocks=self.num_gpu_blocks,
            gpu_block_size=self.gpu_block_size,
            blocks_per_chunk=self.blocks_per_chunk,
            num_cpu_blocks=self.num_cpu_blocks,
            policy=self.policy,
            fault_rate=self.faults,
            abort_probability=self.faults,
            reset_probability=self.faults / 5,
            job_delay_steps=self.delay,
            seed=self.seed,
            speculative_tokens=self.speculative_tokens,
            speculative_acceptance=self.speculative_acceptance,
        )


def build_engine(options: SimulationOptions, make_engine: EngineFactory | None = None) -> Engine:
    """The engine ``options`` describe: ours, or the one ``make_engine`` builds from the same config."""
    config = options.engine_config()
    backend = None
    if options.backend == "torch":
        from kvoffload_lab.sim.torch_backend import TorchBackend

        backend = TorchBackend.for_engine(config, device=options.device)
    if make_engine is not None:
        return make_engine(config, backend)
    return Engine(config, backend=backend)


def simulate(
    options: SimulationOptions, progress: bool = False, make_engine: EngineFactory | None = None
) -> dict[str, Any]:
    """Run the workload to completion and drain; returns the summary printed by the command.

    Raises :class:`SimulationStopped` (with the figures so far, and no trace file left behind)
    when ``max_steps`` is reached, when the run is interrupted (KeyboardInterrupt), or when it
    finished no request at all (every conversation outgrew the context, or every turn aborted).
    With ``make_engine`` (a bug-zoo mutant's engine), a crash of its code ends the run as a reported
    violation, and its trace is kept. A ``trace_path`` that cannot be written raises OSError before anything runs."""
    from kvoffload.statemachine.trace import TraceWriter

    trace = Path(options.trace_path) if options.trace_path else None
    writer = TraceWriter.open(trace) if trace is not None else None
    try:
        engine = build_engine(options, make_engine)
        workload = MultiTurnWorkload(options.workload_config())
        workload.attach(engine)
        if writer is not None:
            engine.scheduler.attach_trace(writer)
        crashed = False
        try:
            stopped = _run(engine, workload, options.max_steps, progress)
        except Exception as error:
            if make_engine is None:
                raise
            _record_crash(engine, error)
            stopped, crashed = None, True
        summary = summarise(engine, workload)
        summary["device"] = options.device if options.backend == "torch" else None
        if stopped is None and not crashed and not summary["finished"]:
            stopped = (
                f"the run finished no request ({summary['aborted']} aborted, "
                f"{summary['truncated_conversations']} conversation(s) truncated because they outgrew the "
                f"{engine.max_model_tokens}-token context of --gpu-blocks x --block-size)"
            )
        if stopped is not None:
            raise SimulationStopped(stopped, summary)
    except BaseException:
        if writer is not None and trace is not None:
            writer.close()
            trace.unlink(missing_ok=True)
        raise
    if writer is not None:
        writer.close()
    return summary


def _record_crash(engine: Engine, error: Exception) -> None:
    """The mutant's bug crashed the run: that is the violation it was run to show."""
    invariant = getattr(error, "invariant", None) or "Crash"
    engine.stats.violations += 1
    engine.stats.violation_messages.append(f"step {engine.stats.steps}: {invariant}: {type(error).__name__}: {error}")


def _run(engine: Engine, workload: MultiTurnWorkload, max_steps: int, progress: bool) -> str | None:
    """Step until the workload is done and drained; returns why it stopped early, or None."""
    from rich.progress import Progress

    try:
        with Progress(transient=True, disable=not progress) as bar:
            task = bar.add_task("simulating", total=workload.total_turns)
            for _ in range(max_steps):
                workload.tick(engine)
                if workload.done and engine.idle:
                    return None
                engine.step()
                bar.update(task, completed=engine.stats.finished + engine.stats.aborted)
    except KeyboardInterrupt:
        return f"interrupted at step {engine.stats.steps}"
    return f"did not finish within --max-steps {max_steps}"


def summarise(engine: Engine, workload: MultiTurnWorkload | None = None) -> dict[str, Any]:
    stats = engine.stats
    scheduler = engine.scheduler.stats
    return {
        "finished": stats.finished,
        "aborted": stats.aborted,
        "truncated_conversations": workload.truncated_conversations if workload is not None else 0,
        "steps": stats.steps,
        "violations": stats.violations,
        "leaks": len(engine.leaks()),
        "stored_chunks": scheduler.stored_chunks,
        "loaded_chunks": scheduler.loaded_chunks,
        "offload_hit_tokens": stats.offload_hit_tokens,
        "gpu_hit_tokens": stats.gpu_hit_tokens,
        "same_step_gpu_hits": stats.same_step_gpu_hits,
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
        "draft_tokens": stats.draft_tokens,
        "accepted_draft_tokens": stats.accepted_draft_tokens,
        "policy": engine.scheduler.manager.policy.name,
        "violation_messages": stats.violation_messages,
    }
