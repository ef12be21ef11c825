"""The ``Mutant`` record: a named historical bug, reintroduced into a subclass of our own code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.policies import EvictionPolicy
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import OffloadConfig
from kvoffload_lab.verify.explore_model import OffloadExploreModel, WorkerReport


@dataclass(frozen=True)
class Mutant:
    """One bug that a real offloading connector shipped, as a mutant of our scheduler/manager.

    ``invariant`` names the invariant (lifecycles/invariants.py, or ``DataIntegrity``, ``GpuBlockFence``,
    ``EventuallyCleaned``, ``NoLeak``, ``Crash``) expected to catch it; ``also_caught_by`` lists
    names a checker with a different schedule may legitimately report first (``DeclaredLifecycle``:
    the declared machine itself refused the move, with ``IllegalTransition`` or ``GuardRejected``).
    ``simulate_options``: ``kvoffload simulate --mutant`` settings under which the simulator reports
    the bug (empty: not tried, or the simulator cannot reach its interleaving); ``trace_visible``:
    the bug also shows in that run's trace (not when it corrupts data, GPU blocks or the manager's
    pool, which a trace does not record).
    ``worker_report`` is a worker-side bug (``worker_bugs``): the scheduler and manager are ours,
    the worker lies about what it did.
    """

    name: str
    source: str
    invariant: str
    summary: str
    scheduler_class: type[OffloadingScheduler] = OffloadingScheduler
    manager_class: type[CPUOffloadingManager] = CPUOffloadingManager
    worker_report: WorkerReport | None = None
    also_caught_by: tuple[str, ...] = ()
    # Model sizes the explorer needs to reach the bug (e.g. a one-block CPU pool), as defaults.
    explore_options: tuple[tuple[str, Any], ...] = ()
    simulate_options: tuple[str, ...] = ()
    trace_visible: bool = False

    def make_manager(self, num_blocks: int, policy: str | EvictionPolicy = "lru") -> CPUOffloadingManager:
        """A manager with this mutant's bug (ours when the bug is elsewhere)."""
        return self.manager_class(num_blocks, policy)

    def make_scheduler(
        self, config: OffloadConfig, manager: CPUOffloadingManager | None = None
    ) -> OffloadingScheduler:
        """A scheduler with this mutant's bug; without ``manager``, one from ``make_manager``."""
        if manager is None:
            manager = self.make_manager(config.num_cpu_blocks, config.policy)
        return self.scheduler_class(config, manager)

    @property
    def caught_by(self) -> tuple[str, ...]:
        """Every invariant name accepted as catching this mutant."""
        return (self.invariant, *self.also_caught_by)

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "source": self.source, "invariant": self.invariant, "summary": self.summary}


def explore_model_for(
    mutant: Mutant | None, num_requests: int = 2, chunks: int = 3, **options: Any
) -> OffloadExploreModel:
    """The explorer's model of the real system, with ``mutant``'s bug (None: our code as is)."""
    if mutant is None:
        return OffloadExploreModel(num_requests, chunks, **options)
    merged = {**dict(mutant.explore_options), **options}
    return OffloadExploreModel(
        num_requests,
        chunks,
        make_scheduler=mutant.make_scheduler,
        make_manager=mutant.make_manager,
        worker_report=mutant.worker_report,
        **merged,
    )
