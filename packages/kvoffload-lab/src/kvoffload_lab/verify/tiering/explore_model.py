"""The REAL scheduler and tiering manager (CPU tier + one file tier index), driven by a small
engine, worker and tier-driver model, for the explorer (``kvoffload explore --tiers``).

Every request has the same prompt of ``chunks`` one-token chunks (plus one token to compute), so
what one request cascades another can promote. Actions, every one enabled in any order:

- ``admit(r)``: the lookup; "not yet" (a promotion runs) leaves ``r`` waiting, else it loads its
  CPU hits or runs;
- ``step``: ``build_connector_meta`` (its stores and loads go to the worker), every running
  request computes one token, ``update_connector_output`` with nothing completed;
- ``gpu job j done|FAILS``: the worker copies (a store reads its GPU blocks now, a load writes
  them now) and the outcome is reported;
- ``tier job t ok|corrupt|fault``: a cascade writes the CPU block's bytes into its slot now
  (``corrupt``: with a flipped byte under a valid header), or a promotion reads its slot into
  the CPU block and the checksum is checked against what the slot really holds;
- ``finish(r)``: the request finishes or is aborted;
- ``reset_cache`` (at most ``max_resets`` times), between steps only, as vLLM delivers it (never
  between an admission and the next ``step``: see kvoffload_lab.verify.explore_model); a load not yet
  handed to the worker is cancelled and the request recomputes;
- with ``shared=True`` (``--shared-tier``) the tier is a shared one instead: a ``probe`` job asks
  it what it holds before a promotion, and ``the redis server evicts k`` may drop any chunk at
  any time (maxmemory eviction, a restart), so a chunk can vanish between the probe and the read.

Content is tracked by identity: a GPU block, CPU block or slot holds the key whose KV it has.
``DataIntegrity``: a finished load must have brought every chunk's own key. The protocol's
invariants (kvoffload.lifecycles) and the tiering invariants run after every action; the drain
(no new requests, every job succeeds, steps run) must end quiescent within a bound, with no leak
(``EventuallyCleaned`` / ``NoLeak``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kvoffload.lifecycles.invariants import check_invariants
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.scheduler import OffloadingScheduler
from kvoffload.offload.types import OffloadConfig, SchedulerOutput, TransferJob, WorkerOutput
from kvoffload.tiers.index import LocalTierIndex, SharedTierIndex, TierIndex
from kvoffload.tiers.invariants import check_tier_invariants
from kvoffload.tiers.manager import TieringManager
from kvoffload.tiers.protocol import CORRUPT, FAULT, MISS, OK, TierJob, TierOutcome

KEY_BASE = 1 << 20
GARBAGE = -1
DRAIN_ROUNDS = 40

ManagerFactory = Callable[[CPUOffloadingManager, list[LocalTierIndex]], TieringManager]


@dataclass(frozen=True)
class TierPrompt:
    """What the scheduler reads of a request of this model (the ``EngineRequest`` protocol): its
    ``chunks`` keys, and one more token to compute. This third engine model keeps its own engine
    state (docs/tiers.md); the simulator and the offload explorer share ``SimRequest``."""

    request_id: str
    block_hashes: tuple[int, ...]
    num_tokens: int


@dataclass
class TierWorld:
    """One state: the real scheduler and tiering manager plus the engine, worker and tier models."""

    scheduler: OffloadingScheduler
    manager: TieringManager
    status: dict[str, str]
    blocks: dict[str, list[int]]
    computed: dict[str, int]
    loading: dict[str, int] = field(default_factory=dict)
    gpu: dict[int, int] = field(default_factory=dict)
    cpu: dict[int, int] = field(default_factory=dict)
    # slot -> (key named in the header, content, checksum valid)
    tier: dict[int, tuple[int, int, bool]] = field(default_factory=dict)
    gpu_jobs: dict[int, TransferJob] = field(default_factory=dict)
    tier_jobs: dict[int, TierJob] = field(default_factory=dict)
    next_block: int = 0
    resets: int = 0
    # Inside one Scheduler.schedule() call: a request was admitted since the last step.
    scheduling: bool = False
    problems: list[tuple[str, str]] = field(default_factory=list)


class TierExploreModel:
    """``requests`` requests x ``chunks`` chunks, ``cpu_blocks`` CPU blocks, ``tier_slots`` slots."""

    def __init__(
        self, requests: int = 2, chunks: int = 2, cpu_blocks: int = 1, tier_slots: int = 2,
        allow_gpu_failures: bool = False, make_manager: ManagerFactory | None = None, shared: bool = False,
        max_resets: int = 1,
    ) -> None:
        if requests < 1 or chunks < 1 or cpu_blocks < 1 or tier_slots < 1:
            raise ValueError("requests, chunks, cpu_blocks and tier_slots must be >= 1")
        self.requests = [f"r{i + 1}" for i in range(requests)]
        self.chunks = chunks
        self.cpu_blocks = cpu_blocks
        self.tier_slots = tier_slots
        # shared: the secondary tier is a shared one (probed before promotions; its server may
        # evict any idle key at any time) instead of the file tier.
        self.shared = shared
        self.allow_gpu_failures = allow_gpu_failures
        self.max_resets = max_resets
        self.make_manager = make_manager or (lambda cpu, tiers: TieringManager(cpu, tiers))
        self.keys = tuple(KEY_BASE + i for i in range(chunks))

    def prompt(self, request_id: str) -> TierPrompt:
        """The request's prompt (every request has the same one)."""
        return TierPrompt(request_id, self.keys, self.chunks + 1)

    # ------------------------------------------------------------------ the model protocol
    def initial(self) -> TierWorld:
        tier: TierIndex = SharedTierIndex("redis") if self.shared else LocalTierIndex("file", self.tier_slots)
        manager = self.make_manager(CPUOffloadingManager(self.cpu_blocks, "lru"), [tier])  # type: ignore[list-item]
        scheduler = OffloadingScheduler(OffloadConfig(1, 1, self.cpu_blocks, "lru"), manager=manager)  # type: ignore[arg-type]
        return TierWorld(
            scheduler, manager, dict.fromkeys(self.requests, "new"), {r: [] for r in self.requests},
            dict.fromkeys(self.requests, 0),
        )

    def actions(self, world: TierWorld) -> Iterable[tuple[Any, ...]]:
        for request_id, status in world.status.items():
            if status == "new":
                yield ("admit", request_id)
        if any(s == "running" for s in world.status.values()) or world.scheduler.has_pending_work():
            yield ("step",)
        for job_id in sorted(world.gpu_jobs):
            yield ("gpu", job_id, True)
            if self.allow_gpu_failures:
                yield ("gpu", job_id, False)
        for job_id, job in sorted(world.tier_jobs.items()):
            choices = ("ok", "corrupt", "fault") if job.kind == "cascade" else ("ok", "fault")
            for choice in choices:
                yield ("tier", job_id, choice)
        if self.shared:
            for key in sorted(world.tier):
                yield ("server_evicts", key)
        for request_id, status in world.status.items():
            if status in ("running", "loading") or (status == "new" and world.scheduler.is_tracked(request_id)):
                yield ("finish", request_id)
        if world.resets < self.max_resets and not world.scheduling:
            yield ("reset",)

    def action_name(self, action: tuple[Any, ...]) -> str:
        kind = action[0]
        if kind in ("admit", "finish"):
            return f"{kind}({action[1]})"
        if kind == "gpu":
            return f"gpu job {action[1]} {'done' if action[2] else 'FAILS'}"
        if kind == "tier":
            return f"tier job {action[1]} {action[2]}"
        if kind == "server_evicts":
            return f"the redis server evicts {self._name(action[1])}"
        if kind == "reset":
            return "reset_cache"
        return "step"

    def step(self, world: TierWorld, action: tuple[Any, ...]) -> TierWorld:
        return self.step_owned(self._copy(world), action)

    def step_owned(self, world: TierWorld, action: tuple[Any, ...]) -> TierWorld:
        kind = action[0]
        if kind == "admit":
            self._admit(world, action[1])
        elif kind == "step":
            self._engine_step(world)
        elif kind == "gpu":
            self._gpu_done(world, action[1], action[2])
        elif kind == "tier":
            self._tier_done(world, action[1], action[2])
        elif kind == "server_evicts":
            del world.tier[action[1]]
        elif kind == "reset":
            self._reset(world)
        else:
            self._finish(world, action[1])
        world.tier_jobs.update((job.job_id, job) for job in world.manager.take_tier_jobs())
        return world

    def invariants(self, world: TierWorld) -> list[tuple[str, str]]:
        found = [(v.invariant, v.message) for v in check_invariants(world.scheduler.snapshot())]
        found += [(v.invariant, v.message) for v in check_tier_invariants(world.scheduler, world.manager)]
        return found + world.problems

    def is_final(self, world: TierWorld) -> bool:
        return not any(True for _ in self.actions(world))

    def drain(self, world: TierWorld) -> list[tuple[str, str]]:
        """No new requests; every job succeeds; steps run: must end quiescent, with no leak."""
        world = self._copy(world)
        for _ in range(DRAIN_ROUNDS):
            for request_id, status in list(world.status.items()):
                if status == "new":
                    self._admit(world, request_id)
                elif status == "running" and world.computed[request_id] > self.chunks:
                    self._finish(world, request_id)
            for job_id in sorted(world.gpu_jobs):
                self._gpu_done(world, job_id, True)
            world.tier_jobs.update((job.job_id, job) for job in world.manager.take_tier_jobs())
            for job_id in sorted(world.tier_jobs):
                self._tier_done(world, job_id, "ok")
            self._engine_step(world)
            world.tier_jobs.update((job.job_id, job) for job in world.manager.take_tier_jobs())
            if world.problems:
                return world.problems
            quiet = not world.gpu_jobs and not world.tier_jobs and not world.scheduler.has_pending_work()
            if quiet and all(s == "done" for s in world.status.values()):
                leaks = world.scheduler.leaks() + world.manager.leaks()
                return [("NoLeak", leak) for leak in leaks]
        left = {r: s for r, s in world.status.items() if s != "done"}
        return [("EventuallyCleaned", f"not quiescent after {DRAIN_ROUNDS} drain rounds: requests {left}, "
                                      f"{len(world.tier_jobs)} tier job(s), {len(world.gpu_jobs)} GPU job(s)")]

    def fingerprint(self, world: TierWorld) -> Hashable:
        scheduler, manager = world.scheduler, world.manager
        trackers = tuple(
            (rid, t.state, t.num_computed_tokens, t.stored_chunks, t.load_job is not None, len(t.store_jobs),
             t.lookup_hit_chunks, t.signals)
            for rid, t in sorted(scheduler.trackers.items())
        )
        gpu_jobs = tuple(sorted((j.kind, j.request_id, j.keys, j.cpu_block_ids) for j in world.gpu_jobs.values()))
        tier_jobs = tuple(sorted(
            (j.kind, j.request_id, j.keys, j.cpu_block_ids, j.slots) for j in world.tier_jobs.values()
        ))
        engine = tuple(
            (r, world.status[r], world.computed[r], tuple(world.gpu.get(b) for b in world.blocks[r]))
            for r in self.requests
        )
        return (
            trackers, gpu_jobs, tier_jobs, engine, manager.request_summary(),
            manager.cpu.fingerprint(), tuple(t.fingerprint() for t in manager.tiers.values()),
            tuple(sorted(world.cpu.items())), tuple(sorted(world.tier.items())),
            tuple(sorted(k for k in self.keys if manager.is_promoting(k))),
            world.resets, world.scheduling,
            tuple(world.problems),
        )

    def describe(self, world: TierWorld) -> dict[str, str]:
        out = {}
        tier_states = {rid: state for rid, state, *_ in world.manager.request_summary()}
        for r in self.requests:
            tracker = world.scheduler.trackers.get(r)
            out[f"{r}.engine"] = f"{world.status[r]} computed={world.computed[r]}"
            out[f"{r}.connector"] = tracker.state if tracker else "untracked"
            out[f"{r}.tier_state"] = tier_states.get(r, "-")
        cpu_keys = []
        for key in sorted(world.manager.resident_keys):
            entry = world.manager.entry(key)
            if entry is not None:
                pins = f" pins={entry.ref_cnt}" if entry.ref_cnt else ""
                cpu_keys.append(f"{self._name(key)}@{entry.block_id}{' writing' if entry.write_pending else ''}{pins}")
        out["cpu.keys"] = ", ".join(cpu_keys) or "none"
        out["tier.slots"] = ", ".join(
            f"{slot}:{self._name(key)}{'' if valid else ' (bad checksum)'}"
            for slot, (key, _, valid) in sorted(world.tier.items())
        ) or "none"
        for job_id, job in world.tier_jobs.items():
            out[f"tier_job#{job_id}"] = f"{job.kind} {[self._name(k) for k in job.keys]} of {job.request_id}"
        for job_id, job in world.gpu_jobs.items():
            out[f"job#{job_id}"] = f"{job.kind} {[self._name(k) for k in job.keys]} of {job.request_id}"
        return out

    # ------------------------------------------------------------------ actions
    def _name(self, key: int) -> str:
        return f"c{key - KEY_BASE}" if key >= KEY_BASE else str(key)

    def _copy(self, world: TierWorld) -> TierWorld:
        # The scheduler and its manager copy themselves (public clone()); the engine, worker and
        # tier models are plain containers of values.
        scheduler = world.scheduler.clone()
        memo: dict[int, Any] = {id(world.scheduler): scheduler, id(world.manager): scheduler.manager}
        return copy.deepcopy(world, memo)

    def _admit(self, world: TierWorld, request_id: str) -> None:
        world.scheduling = True
        prompt = self.prompt(request_id)
        tokens, _ = world.scheduler.get_num_new_matched_tokens(prompt, 0)
        if tokens is None:
            return
        blocks = list(range(world.next_block, world.next_block + self.chunks + 1))
        world.next_block += len(blocks)
        world.blocks[request_id] = blocks
        world.scheduler.update_state_after_alloc(prompt, blocks, tokens)
        if tokens:
            world.status[request_id] = "loading"
            world.loading[request_id] = tokens
        else:
            world.status[request_id] = "running"

    def _engine_step(self, world: TierWorld) -> None:
        world.scheduling = False
        scheduled = {r: 1 for r, s in world.status.items() if s == "running" and world.computed[r] <= self.chunks}
        metadata = world.scheduler.build_connector_meta(SchedulerOutput(scheduled))
        for job in (*metadata.stores, *metadata.loads):
            world.gpu_jobs[job.job_id] = job
        for request_id in scheduled:
            index = world.computed[request_id]
            if index < self.chunks:
                world.gpu[world.blocks[request_id][index]] = self.keys[index]
            world.computed[request_id] = index + 1
        self._apply(world, world.scheduler.update_connector_output(WorkerOutput({})))

    def _gpu_done(self, world: TierWorld, job_id: int, ok: bool) -> None:
        job = world.gpu_jobs.pop(job_id)
        for gpu_block, cpu_block in zip(job.gpu_block_ids, job.cpu_block_ids, strict=True):
            if job.kind == "store":
                if ok:
                    world.cpu[cpu_block] = world.gpu.get(gpu_block, GARBAGE)
            else:
                world.gpu[gpu_block] = world.cpu.get(cpu_block, GARBAGE) if ok else GARBAGE
        self._apply(world, world.scheduler.update_connector_output(WorkerOutput({job_id: ok})))

    def _tier_done(self, world: TierWorld, job_id: int, choice: str) -> None:
        job = world.tier_jobs.pop(job_id)
        results = []
        if job.kind == "probe":
            held = (OK if key in world.tier else MISS for key in job.keys)
            world.manager.complete_tier_job(TierOutcome(job_id, (FAULT,) * len(job.keys) if choice == "fault"
                                                        else tuple(held)))
            return
        # A file tier addresses chunks by slot, a shared tier by key.
        places = job.slots if job.slots else job.keys
        for key, cpu_block, slot in zip(job.keys, job.cpu_block_ids, places, strict=True):
            if choice == "fault":
                results.append(FAULT)
                if job.kind == "promote":
                    world.cpu[cpu_block] = GARBAGE
            elif job.kind == "cascade":
                world.tier[slot] = (key, world.cpu.get(cpu_block, GARBAGE), choice == "ok")
                results.append(OK)
            else:
                header_key, content, valid = world.tier.get(slot, (None, GARBAGE, False))
                verified = header_key == key and valid
                world.cpu[cpu_block] = content if verified else GARBAGE
                results.append(OK if verified else CORRUPT)
        world.manager.complete_tier_job(TierOutcome(job_id, tuple(results)))

    def _reset(self, world: TierWorld) -> None:
        world.resets += 1
        for request_id in world.scheduler.reset_cache():
            if world.status[request_id] == "loading":
                # The load is cancelled: the engine recomputes those tokens.
                world.loading.pop(request_id, None)
                world.status[request_id] = "running"
                world.computed[request_id] = 0

    def _finish(self, world: TierWorld, request_id: str) -> None:
        if world.scheduler.is_tracked(request_id):
            world.scheduler.request_finished(self.prompt(request_id), world.blocks[request_id])
        world.status[request_id] = "done"
        world.loading.pop(request_id, None)

    def _apply(self, world: TierWorld, update: Any) -> None:
        for request_id in update.loaded:
            chunks = world.loading.pop(request_id, 0)
            for index in range(chunks):
                block = world.blocks[request_id][index]
                if world.gpu.get(block) != self.keys[index]:
                    world.problems.append(("DataIntegrity", f"{request_id} loaded chunk c{index} into GPU block "
                                                            f"{block}, which holds {world.gpu.get(block)}"))
            if world.status[request_id] == "loading":
                world.status[request_id] = "running"
                world.computed[request_id] = chunks
        for request_id in update.load_failed:
            world.loading.pop(request_id, None)
            if world.status[request_id] == "loading":
                world.status[request_id] = "running"
                world.computed[request_id] = 0

