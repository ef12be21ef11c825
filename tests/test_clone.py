"""``clone()`` is what the explorers copy a state with: every field survives, and a clone and its
original never affect each other (the CPU manager's and the tiering manager's alike)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import pytest

from kvoffload.offload.manager import BlockEntry, CPUOffloadingManager, RequestRecord
from kvoffload.offload.scheduler import JobRecord, OffloadingScheduler, RequestTracker
from kvoffload.offload.types import OffloadConfig
from kvoffload.tiers.index import LocalTierIndex
from kvoffload.tiers.manager import TieringManager
from kvoffload_lab.sim.engine import Engine, EngineConfig
from kvoffload_lab.sim.workload import MultiTurnWorkload, WorkloadConfig
from support import request


def _distinct(cls: type) -> object:
    """An instance of ``cls`` whose every field holds a value no default has."""
    values: dict[str, object] = {}
    for number, f in enumerate(fields(cls), 7):
        default = f.default_factory() if callable(f.default_factory) else f.default  # type: ignore[misc]
        if isinstance(default, bool):
            values[f.name] = not default
        elif isinstance(default, set):
            values[f.name] = {number}
        elif isinstance(default, list):
            values[f.name] = [number]
        elif isinstance(default, dict):
            values[f.name] = {number: number}
        else:
            values[f.name] = number
    return cls(**values)


@pytest.mark.parametrize("cls", [RequestTracker, JobRecord, BlockEntry, RequestRecord])
def test_copy_keeps_every_field(cls: type) -> None:
    original = _distinct(cls)
    copied = original.copy()  # type: ignore[attr-defined]
    for f in fields(cls):
        assert getattr(copied, f.name) == getattr(original, f.name), f"{cls.__name__}.copy() drops {f.name}"
        value = getattr(original, f.name)
        if isinstance(value, list | set | dict):
            assert getattr(copied, f.name) is not value, f"{cls.__name__}.copy() shares {f.name}"


@pytest.mark.parametrize("cls", [RequestTracker, JobRecord])
def test_a_field_added_with_a_default_is_copied_too(cls: type) -> None:
    # A record grows fields over time: its copy() must carry a new one without being edited.
    @dataclass(slots=True, eq=False)
    class Grown(cls):  # type: ignore[misc, valid-type]
        added: int = 0

    original = Grown(**{f.name: getattr(_distinct(cls), f.name) for f in fields(cls)}, added=5)
    copied = original.copy()
    assert type(copied) is Grown
    assert [getattr(copied, f.name) for f in fields(Grown)] == [getattr(original, f.name) for f in fields(Grown)]


def _mid_run() -> Engine:
    """An engine in the middle of a run: jobs in flight and unverified draft tokens."""
    engine = Engine(EngineConfig(num_gpu_blocks=40, num_cpu_blocks=24, gpu_block_size=4, seed=3,
                                 fault_rate=0.05, speculative_tokens=3))
    workload = MultiTurnWorkload(WorkloadConfig(users=12, turns=3, seed=3))
    workload.attach(engine)
    for _ in range(2000):
        workload.tick(engine)
        engine.step()
        tables = engine.scheduler.view()
        if tables.jobs and any(t.draft_tokens for t in tables.trackers.values()):
            return engine
    raise AssertionError("the run never had jobs and drafts at once")


def test_a_scheduler_clone_is_equal_and_independent() -> None:
    engine = _mid_run()
    original: OffloadingScheduler = engine.scheduler
    before = original.snapshot()
    drafts = {rid: t.draft_tokens for rid, t in original.view().trackers.items()}
    clone = original.clone()
    assert clone.snapshot() == before
    assert {rid: t.draft_tokens for rid, t in clone.view().trackers.items()} == drafts
    assert clone.manager is not original.manager
    for _ in range(200):
        engine.step()
        if original.snapshot() != before:
            break
    assert original.snapshot() != before, "the run went on"
    assert clone.snapshot() == before, "the clone followed its original"
    assert {rid: t.draft_tokens for rid, t in clone.view().trackers.items()} == drafts


def test_a_tiering_manager_clone_is_independent_and_its_view_hides_internal_owners() -> None:
    manager = TieringManager(CPUOffloadingManager(4, "lru"), [LocalTierIndex("file", 8)])
    scheduler = OffloadingScheduler(OffloadConfig(1, 1, 4, "lru"), manager=manager)  # type: ignore[arg-type]
    scheduler.get_num_new_matched_tokens(request("r1", [1, 2, 3], block_size=1), 0)
    clone = scheduler.clone()
    assert isinstance(clone.manager, TieringManager) and clone.manager is not manager
    assert clone.manager.cpu is not manager.cpu
    assert set(manager.view().requests) == {"r1"}
    manager.on_request_finished("r1")
    assert clone.manager.tier_state("r1") != manager.tier_state("r1")
    assert set(clone.manager.view().requests) == {"r1"}
