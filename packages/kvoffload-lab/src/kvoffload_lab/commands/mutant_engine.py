"""A bug-zoo mutant in the simulator: its scheduler, manager and worker bug in a real engine run.

Assembled here, where the commands are, so that the simulator never imports the bug zoo.
"""

from __future__ import annotations

from functools import partial

from kvoffload.offload.types import ConnectorMetadata, JobId, WorkerOutput
from kvoffload_lab.sim.engine import Engine, EngineConfig
from kvoffload_lab.sim.kv_model import KVBackend
from kvoffload_lab.sim.runner import EngineFactory
from kvoffload_lab.verify.bugzoo import MUTANTS
from kvoffload_lab.verify.bugzoo.mutant import Mutant
from kvoffload_lab.verify.explore_model import WorkerReport


class LyingBackend:
    """A :class:`KVBackend` whose reports pass through a worker bug (``Mutant.worker_report``)."""

    def __init__(self, backend: KVBackend, report: WorkerReport) -> None:
        self.backend = backend
        self.report = report

    def write_block(self, block: int, content: int | None) -> None:
        self.backend.write_block(block, content)

    def block_matches(self, block: int, content: int) -> bool:
        return self.backend.block_matches(block, content)

    def execute(self, metadata: ConnectorMetadata) -> WorkerOutput:
        return self.report(self.backend.execute(metadata))

    def blocks_read_by_stores(self) -> dict[int, set[JobId]]:
        return self.backend.blocks_read_by_stores()

    def in_flight(self) -> set[JobId]:
        return self.backend.in_flight()


def mutant_engine(mutant: Mutant, config: EngineConfig, backend: KVBackend | None = None) -> Engine:
    """An engine whose scheduler, manager and worker carry ``mutant``'s bug."""
    scheduler = mutant.make_scheduler(config.offload_config())
    engine = Engine(config, scheduler=scheduler, backend=backend)
    if mutant.worker_report is not None:
        engine.backend = LyingBackend(engine.backend, mutant.worker_report)
    return engine


def mutant_engine_factory(name: str) -> EngineFactory:
    """What builds bug-zoo mutant ``name``'s engines; ValueError naming the known mutants if unknown."""
    mutant = MUTANTS.get(name)
    if mutant is None:
        raise ValueError(f"--mutant {name!r} is unknown; known: {', '.join(sorted(MUTANTS))}")
    return partial(mutant_engine, mutant)
