"""Sweep eviction policies over CPU-tier sizes on one trace, with the offline bounds, and plot it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvoffload.offload.types import DEFAULT_POLICY
from kvoffload_lab.tracestudy.bounds import belady, infinite_cache
from kvoffload_lab.tracestudy.mooncake import TraceRequest, block_chains
from kvoffload_lab.tracestudy.oracle_breakdown import oracle_breakdown
from kvoffload_lab.tracestudy.replay import ReplayResult, TraceReplay, cpu_oracle

DEFAULT_CPU_SIZES: tuple[int, ...] = (1000, 2000, 4000, 8000, 16000)


@dataclass
class SweepResult:
    """One replay per (policy, CPU size); per CPU size Belady (one cache of G + C blocks) and the
    CPU oracle (the same replay with Belady's rule deciding the CPU tier)."""

    gpu_blocks: int
    cpu_sizes: tuple[int, ...]
    policies: tuple[str, ...]
    requests: int = 0
    blocks: int = 0
    infinite_hit_ratio: float = 0.0
    belady_hit_ratio: dict[int, float] = field(default_factory=dict)
    cpu_oracle_hit_ratio: dict[int, float] = field(default_factory=dict)
    # Per CPU size, the half-clairvoyant bounds (kvoffload_lab.tracestudy.oracle_breakdown), when asked for.
    oracle_breakdown: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    runs: list[ReplayResult] = field(default_factory=list)

    def hit_ratio(self, policy: str, cpu_blocks: int) -> float:
        for run in self.runs:
            if run.policy == policy and run.cpu_blocks == cpu_blocks:
                return run.hit_ratio
        raise KeyError((policy, cpu_blocks))

    @property
    def violations(self) -> int:
        return sum(run.violations for run in self.runs) + self._bound_total("violations")

    @property
    def leaks(self) -> int:
        return sum(run.leaks for run in self.runs) + self._bound_total("leaks")

    def _bound_total(self, name: str) -> int:
        return sum(row[name] for rows in self.oracle_breakdown.values() for row in rows)

    def as_dict(self) -> dict[str, Any]:
        rows = []
        for run in self.runs:
            row = run.as_dict()
            row["belady_hit_ratio"] = self.belady_hit_ratio[run.cpu_blocks]
            row["infinite_hit_ratio"] = self.infinite_hit_ratio
            row["ratio_to_belady"] = run.hit_ratio / row["belady_hit_ratio"] if row["belady_hit_ratio"] else None
            oracle = self.cpu_oracle_hit_ratio.get(run.cpu_blocks)
            row["cpu_oracle_hit_ratio"] = oracle
            row["ratio_to_cpu_oracle"] = run.hit_ratio / oracle if oracle else None
            rows.append(row)
        data: dict[str, Any] = {
            "requests": self.requests,
            "blocks": self.blocks,
            "gpu_blocks": self.gpu_blocks,
            "cpu_sizes": list(self.cpu_sizes),
            "policies": list(self.policies),
            "infinite_hit_ratio": self.infinite_hit_ratio,
            "belady_hit_ratio": {str(size): ratio for size, ratio in self.belady_hit_ratio.items()},
            "cpu_oracle_hit_ratio": {str(size): ratio for size, ratio in self.cpu_oracle_hit_ratio.items()},
            "violations": self.violations,
            "leaks": self.leaks,
            "runs": rows,
        }
        if self.oracle_breakdown:
            data["oracle_breakdown"] = {str(size): rows for size, rows in self.oracle_breakdown.items()}
        return data


def run_sweep(
    requests: Sequence[TraceRequest],
    gpu_blocks: int,
    cpu_sizes: Sequence[int],
    policies: Sequence[str],
    progress: Callable[[int], None] | None = None,
    check_every: int = 100,
    breakdown: bool = False,
) -> SweepResult:
    """Replay every policy at every CPU size; ``progress(n)`` is called as requests complete.
    With ``breakdown``, also the half-clairvoyant bounds at every size (:func:`oracle_breakdown`)."""
    chains = block_chains(requests)
    infinite = infinite_cache(chains)
    result = SweepResult(gpu_blocks, tuple(cpu_sizes), tuple(policies), len(chains), infinite.blocks)
    result.infinite_hit_ratio = infinite.hit_ratio
    for size in cpu_sizes:
        result.belady_hit_ratio[size] = belady(chains, gpu_blocks + size).hit_ratio
        result.cpu_oracle_hit_ratio[size] = cpu_oracle(chains, gpu_blocks, size).hit_ratio
        if breakdown:
            result.oracle_breakdown[size] = oracle_breakdown(
                chains, gpu_blocks, size, oracle_hit_ratio=result.cpu_oracle_hit_ratio[size]
            )
        for policy in policies:
            run = TraceReplay(gpu_blocks, size, policy, check_every=check_every).run(chains, progress)
            run.belady_hit_ratio = result.belady_hit_ratio[size]
            run.infinite_hit_ratio = result.infinite_hit_ratio
            run.cpu_oracle_hit_ratio = result.cpu_oracle_hit_ratio[size]
            result.runs.append(run)
    return result


def plot_sweep(result: SweepResult, path: str | Path, title: str = "") -> Path:
    """Write a PNG of hit ratio vs CPU capacity: one line per policy, Belady and infinite bounds."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in CI
    import matplotlib.pyplot as plt

    sizes = list(result.cpu_sizes)
    figure, axes = plt.subplots(figsize=(10, 5.5))
    markers = "osD^vP*Xhp<>"
    for index, policy in enumerate(result.policies):
        # Distinct markers: policies that coincide (lru and prefix_lru often do) stay visible.
        default = policy == DEFAULT_POLICY
        axes.plot(
            sizes, [result.hit_ratio(policy, size) for size in sizes], marker=markers[index % len(markers)],
            label=f"{policy} (default)" if default else policy, alpha=0.85,
            linewidth=3 if default else 1.5, zorder=3 if default else 2,
        )
    axes.plot(
        sizes, [result.belady_hit_ratio[size] for size in sizes], linestyle="--", color="black",
        label=f"Belady (one cache of {result.gpu_blocks} + C blocks)",
    )
    axes.plot(
        sizes, [result.cpu_oracle_hit_ratio[size] for size in sizes], linestyle="-.", color="black",
        label="CPU oracle (GPU LRU, CPU tier by Belady's rule)",
    )
    axes.axhline(result.infinite_hit_ratio, linestyle=":", color="grey", label="infinite cache")
    if len(sizes) > 1 and min(sizes) > 0:
        axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [str(size) for size in sizes])
    axes.set_xlabel("CPU tier capacity (512-token blocks)")
    axes.set_ylabel("prompt blocks served from cache")
    axes.set_ylim(bottom=0)
    axes.set_title(title or f"{result.requests} requests, GPU prefix cache of {result.gpu_blocks} blocks")
    axes.grid(True, alpha=0.3)
    # Outside the axes: inside, it hid the bounds' lines.
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=120)
    plt.close(figure)
    return target
