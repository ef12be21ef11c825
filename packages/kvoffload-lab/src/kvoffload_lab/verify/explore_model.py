"""The REAL scheduler + manager, driven by a small engine model and a model worker, for the explorer.

Every choice the engine and the worker can make is an action of the explorer
(:mod:`kvoffload_lab.statemachine.explore`):

- ``admit(r, load|no load)``: the GPU prefix-cache lookup, the connector's lookup, allocate the GPU
  blocks of the prompt past the GPU hit, and ``update_state_after_alloc`` with the offered external
  tokens (a load) or none. The GPU blocks live in the simulator's
  :class:`~kvoffload_lab.sim.block_pool.BlockPool`: a computed (or loaded) block is cached under its
  key, and a freed block stays cached until the pool's free queue (oldest freed first) hands it out
  again or ``reset_cache`` forgets it, so a preempted request hits its own blocks. The GPU hit
  follows vLLM's caching rules (:mod:`kvoffload_lab.sim.vllm_rules`, shared with the simulator, as
  are the operations on a request's blocks and status, :mod:`kvoffload_lab.sim.engine_ops`): it
  covers the chunks the pool caches and the shared chunk another request is scheduled to compute in
  the next step (a running request's next chunk), so an admission can hit a block that only the
  next step's forward pass writes. The engine computes what it scheduled: a request whose next
  chunk another request hit is neither preempted nor finished before that step.
  ``gpu_prefix_cache=False`` is vLLM without prefix caching: no GPU hits, so a request loads (or
  recomputes) shared chunks another request holds. ``gpu_pool_requests`` sizes the pool smaller
  than every request's blocks, so freed blocks are handed out again soon;
- ``step``, ``step(preempt r)``, ``step(job j completes|FAILS)``: one engine step in the engine's
  call order (a step that preempts follows no admission: vLLM admits nothing in a schedule() call
  that preempted): preemption frees the GPU blocks, ``build_connector_meta(SchedulerOutput)``, the
  worker runs the metadata (flushes complete now, stores and loads are submitted), every running
  request computes one chunk, at most one in-flight job ends (after the forward pass: the
  adversarial order), then ``update_connector_output`` reports it together with the jobs flushed
  in earlier steps (a flushed job is reported one step later, so admissions and finishes can come
  between a flush and its report), and the engine applies the ``ConnectorUpdate``
  (loaded / load_failed / released);
- ``finish(r)``: the request finishes or is aborted in any state (``request_finished``), including
  right after its first lookup, before any GPU block was allocated; its GPU blocks are freed now,
  or when released if ``request_finished`` returned True;
- ``reset_cache`` (at most ``max_resets`` times) between steps, never between an admission and the
  next ``step``: vLLM admits and builds the step's metadata inside one ``Scheduler.schedule()`` call,
  and its engine core handles ``reset_prefix_cache`` only as a client request between two steps
  (docs/checkers.md, "Where resets fall"). ``resets_within_schedule=True`` offers it there too: a
  call order vLLM never makes, which the scheduler survives all the same; preemptions are bounded
  by ``max_preemptions``;
- with ``speculative_decoding``: ``step(r drafts)``, a step in which running request ``r`` computes its
  next chunk plus a draft of the chunk after it, which verification rejects (the draft's KV stays in
  the block, marked DRAFT); the next step's SchedulerOutput reports the rejection.

Bounds that keep the space finite and small: one preemption and one reset per run by default,
at most one job ending per step (several completions are several steps), every running request
computes one chunk per step.

The engine model checks what only it can see: ``GpuBlockFence`` (a GPU block written by new work
while a store still reads it) and ``DataIntegrity`` (content identities: a store copies the GPU
block's content into the CPU block when it completes, a load copies it back; a store must read
blocks that hold its keys, and every chunk a running request has computed or loaded must hold the
block hash it expects). The spec's invariants run on ``scheduler.snapshot()`` after every action.
``drain`` checks ``EventuallyCleaned`` and ``NoLeak``: from the state, with no new requests, every
live request finishes, every job completes and steps run; the system must become quiescent.

Sizes: ``gpu_block_size = blocks_per_chunk = 1`` (a chunk is one GPU block of one token), so each
request of ``chunks`` chunks needs ``chunks`` GPU blocks; request ``i`` shares its first
``shared_chunks`` chunks (same keys) with every other request, so lookups hit and loads happen.
The CPU pool is small (``cpu_blocks``) so that stores evict.

Symmetry: requests are interchangeable up to renaming their private keys. The fingerprint orders
the requests by a permutation-invariant summary of each (its state with itself named "self" and
the others "other"), renders the state in that order with requests, keys and job ids renamed
canonically (a job is named by what it copies, not by its counter; step and job counters and
statistics are left out, since no decision reads them), and keeps the least digest over every
order of tied requests. The rendering is a plain tuple read from the scheduler's and the
manager's public read-only views (``view()``: their tables, by reference) and the engine model,
digested from its ``marshal`` bytes (no text rendering). Each state holds its own scheduler and
manager: ``step`` copies them with their public ``clone()``. ``successors`` (the explorer's way in)
runs a plain step once up to the end of its forward pass and copies that half-done state for
each way the step can end (no job, or one job completing or failing), so the real scheduler
builds each step's metadata once per state.
Content of free blocks that the GPU pool no longer caches and no job references is forgotten (set
to EMPTY), so stale bytes neither split equal states nor mask a read of a block nobody wrote.
"""

from __future__ import annotations

import hashlib
import itertools
import marshal
import math
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from kvoffload.lifecycles.invariants import check_invariants
from kvoffload.lifecycles.request import CLEANED
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.scheduler import OffloadingScheduler, SchedulerState
from kvoffload.offload.types import OffloadConfig, SchedulerOutput, TransferJob, WorkerOutput
from kvoffload_lab.sim import engine_ops, vllm_rules
from kvoffload_lab.sim.block_pool import BlockPool
from kvoffload_lab.sim.request import DONE, FINISHED, LOADING, NEW, RUNNING, WAITING, SimRequest

# Keys are large so that no block id, count or job id can be mistaken for one when renaming.
KEY_BASE = 1 << 20
EMPTY = -2  # a GPU/CPU block nobody wrote
GARBAGE = -1  # a block a failed copy left half-written
DRAFT = -3  # a block holding the KV of a rejected draft
# Private keys are KEY_BASE + (request + 1) * 64 + chunk, so a request has at most 63 chunks; the
# request bound keeps the per-request renamings (quadratic in requests) small. Both are far beyond
# what a search can cover (states grow exponentially with either); larger sizes are refused.
MAX_CHUNKS = 63
MAX_REQUESTS = 64
# The fingerprint tries every order of requests whose entries tie; beyond this many orders it
# keeps one order (still sound: equal states may then get different fingerprints, never the reverse).
MAX_TIE_ORDERS = 720

SchedulerFactory = Callable[[OffloadConfig, CPUOffloadingManager | None], OffloadingScheduler]
ManagerFactory = Callable[[int, str], CPUOffloadingManager]
# What the worker reports for a step's job outcomes; a worker-side bug of the zoo lies here.
WorkerReport = Callable[[WorkerOutput], WorkerOutput]


def _copy_request(request: SimRequest) -> SimRequest:
    """A copy of an explorer request: its block list is copied; its tokens and block hashes, which
    the explorer never changes, are shared (the scheduler's clones share them too)."""
    copy = _new_request(SimRequest)
    for name in _SHARED_FIELDS:
        setattr(copy, name, getattr(request, name))
    copy.block_ids = request.block_ids.copy()
    return copy


_new_request = object.__new__
_SHARED_FIELDS = tuple(f.name for f in fields(SimRequest) if f.name != "block_ids")


@dataclass
class World:
    """One state: the real scheduler (and its manager) plus the engine and worker models."""

    scheduler: OffloadingScheduler
    # A request of one-token blocks (gpu_block_size = 1): num_computed_tokens counts its computed
    # chunks, local_hit_tokens the chunks its GPU hit served, external_tokens those its load brings.
    requests: dict[str, SimRequest]
    # The engine's GPU block pool, the simulator's: freed blocks stay cached until allocated again.
    pool: BlockPool
    gpu_content: list[int]
    cpu_content: list[int]
    inflight: dict[int, TransferJob]  # submitted, copy not finished
    done: dict[int, bool]  # copy finished, to be reported at the next step (value as reported)
    resets: int = 0
    preemptions: int = 0
    # The engine is inside one Scheduler.schedule() call: it admitted (looked up) a request since
    # the last step, whose build_connector_meta ends that call.
    scheduling: bool = False
    # Found by the engine model during the last action; not part of the state's identity.
    problems: list[tuple[str, str]] = field(default_factory=list)
    # Rejected draft tokens of each request in the last step, for the next SchedulerOutput.
    rejected: dict[str, int] = field(default_factory=dict)


def _freeze(value: Any, rename: Callable[[Any], Any]) -> Any:
    """A hashable, order-independent rendering of ``value`` with ``rename`` applied to leaves."""
    if isinstance(value, (int, str, bool, float, type(None))):
        return rename(value)
    if isinstance(value, dict):
        return ("{", tuple(sorted(((_freeze(k, rename), _freeze(v, rename)) for k, v in value.items()), key=repr)))
    if isinstance(value, (set, frozenset)):
        return ("set", tuple(sorted((_freeze(v, rename) for v in value), key=repr)))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v, rename) for v in value)
    if is_dataclass(value):
        return (type(value).__name__, tuple(_freeze(getattr(value, f.name), rename) for f in fields(value)))
    if hasattr(value, "fingerprint"):
        return _freeze(value.fingerprint(), rename)
    if hasattr(value, "__dict__"):
        return (type(value).__name__, _freeze(vars(value), rename))
    return repr(value)


def _leaf_renamer(rids: dict[str, Any], keys: dict[Any, Any]) -> Callable[[Any], Any]:
    """``_freeze``'s ``rename`` for a renaming: request ids and keys, anything else unchanged."""

    def rename_leaf(value: Any) -> Any:
        if isinstance(value, str):
            return rids.get(value, value)
        if isinstance(value, int) and not isinstance(value, bool):
            return keys.get(value, value)
        return value

    return rename_leaf


def _digest(canonical: tuple[Any, ...]) -> bytes:
    """128 bits of the canonical form: the explorer keeps a digest per state, not the state.

    ``marshal`` version 0 writes neither back-references nor interning flags, so equal values give
    equal bytes; anything it cannot write (a mutant's odd value) falls back to the text rendering.
    """
    try:
        data = marshal.dumps(canonical, 0)
    except ValueError:
        data = repr(canonical).encode()
    return hashlib.blake2b(data, digest_size=16).digest()


class OffloadExploreModel:
    """The explorer's model of the real system (see the module docstring)."""

    def __init__(
        self,
        num_requests: int = 2,
        chunks: int = 3,
        *,
        shared_chunks: int = 1,
        cpu_blocks: int | None = None,
        gpu_blocks: int | None = None,
        gpu_pool_requests: int | None = None,
        policy: str = "lru",
        max_resets: int = 1,
        max_preemptions: int = 1,
        allow_failures: bool = True,
        make_scheduler: SchedulerFactory | None = None,
        make_manager: ManagerFactory | None = None,
        worker_report: WorkerReport | None = None,
        symmetry: bool = True,
        drain_steps: int | None = None,
        speculative_decoding: bool = False,
        gpu_prefix_cache: bool = True,
        resets_within_schedule: bool = False,
    ) -> None:
        if num_requests < 1 or chunks < 2:
            raise ValueError(f"need at least 1 request of at least 2 chunks (got {num_requests} x {chunks})")
        if num_requests > MAX_REQUESTS or chunks > MAX_CHUNKS:
            raise ValueError(
                f"{num_requests} requests x {chunks} chunks is too large to explore: at most {MAX_REQUESTS} requests "
                f"and {MAX_CHUNKS} chunks (the state space grows exponentially; 2-3 of each is the useful range)"
            )
        if not 0 <= shared_chunks < chunks:
            raise ValueError(f"shared_chunks must be in [0, {chunks}), got {shared_chunks}")
        self.num_requests = num_requests
        self.chunks = chunks
        self.shared_chunks = shared_chunks
        self.cpu_blocks = cpu_blocks if cpu_blocks is not None else max(2, chunks - 1)
        # The GPU pool holds every request's blocks unless sized smaller (``gpu_blocks``, or
        # ``gpu_pool_requests`` requests' worth): a smaller pool makes freed blocks reused sooner.
        if gpu_blocks is None:
            gpu_blocks = (gpu_pool_requests if gpu_pool_requests is not None else num_requests) * chunks
        self.gpu_blocks = gpu_blocks
        self.policy = policy
        self.max_resets = max_resets
        self.max_preemptions = max_preemptions
        self.allow_failures = allow_failures
        self.make_scheduler = make_scheduler or (lambda config, manager: OffloadingScheduler(config, manager))
        self.make_manager = make_manager or (lambda num_blocks, policy: CPUOffloadingManager(num_blocks, policy))
        self.worker_report = worker_report
        self.symmetry = symmetry
        self.speculative_decoding = speculative_decoding
        self.gpu_prefix_cache = gpu_prefix_cache
        self.resets_within_schedule = resets_within_schedule
        self.drain_steps = drain_steps if drain_steps is not None else 2 * chunks + 6
        self.config = OffloadConfig(gpu_block_size=1, blocks_per_chunk=1, num_cpu_blocks=self.cpu_blocks, policy=policy)
        self.request_ids = [f"r{i + 1}" for i in range(num_requests)]
        self.block_hashes = {rid: [self.key(i, c) for c in range(chunks)] for i, rid in enumerate(self.request_ids)}
        self._key_owner: dict[int, tuple[int, int]] = {
            self.key(i, c): (i if c >= shared_chunks else -1, c) for i in range(num_requests) for c in range(chunks)
        }
        # Per request, a renaming that makes it "self" and every other request "other": its entry
        # under that renaming is invariant under permutations, so sorting by it is canonical.
        self._relative = {
            rid: (
                {other: ("self" if other == rid else "other") for other in self.request_ids},
                {
                    self.key(j, c): (-1 if c < shared_chunks else 0 if j == i else 1, c)
                    for j in range(num_requests)
                    for c in range(chunks)
                },
            )
            for i, rid in enumerate(self.request_ids)
        }
        self._build_namings()

    # ------------------------------------------------------------------ keys and names
    def key(self, request_index: int, chunk: int) -> int:
        """The chunk's key: shared chunks have one key for every request."""
        if chunk < self.shared_chunks:
            return KEY_BASE + chunk
        return KEY_BASE + (request_index + 1) * 64 + chunk

    def key_name(self, key: int) -> str:
        owner = self._key_owner.get(key)
        if owner is None:
            return {EMPTY: "empty", GARBAGE: "GARBAGE", DRAFT: "a rejected draft"}.get(key, hex(key))
        index, chunk = owner
        return f"shared.c{chunk}" if index < 0 else f"{self.request_ids[index]}.c{chunk}"

    def _renaming(self, order: tuple[int, ...]) -> tuple[dict[str, str], dict[Any, Any]]:
        """Request ``order[k]`` becomes request ``k``, with its private keys."""
        rids = {self.request_ids[i]: self.request_ids[k] for k, i in enumerate(order)}
        keys = {self.key(i, c): self.key(k, c) for k, i in enumerate(order) for c in range(self.chunks)}
        return rids, keys

    # ------------------------------------------------------------------ model API
    def new_scheduler(self) -> OffloadingScheduler:
        manager = self.make_manager(self.cpu_blocks, self.policy)
        return self.make_scheduler(self.config, manager)

    def initial(self) -> World:
        return World(
            scheduler=self.new_scheduler(),
            requests={rid: SimRequest.of_blocks(rid, hashes, NEW) for rid, hashes in self.block_hashes.items()},
            pool=BlockPool(self.gpu_blocks),
            gpu_content=[EMPTY] * self.gpu_blocks,
            cpu_content=[EMPTY] * self.cpu_blocks,
            inflight={},
            done={},
        )

    def actions(self, w: World) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        sched = w.scheduler
        for rid, er in w.requests.items():
            if er.status in (NEW, WAITING) and len(w.pool.free_queue) >= self.chunks:
                out.append(("admit", rid, False))
                out.append(("admit", rid, True))
        out.append(("step", None, None, True))
        if self.speculative_decoding:
            for rid, er in w.requests.items():
                if er.status == RUNNING and er.num_computed_tokens + 2 <= self.chunks:
                    out.append(("spec", rid))
        for job_id in sorted(w.inflight):
            out.append(("step", None, job_id, True))
            if self.allow_failures:
                out.append(("step", None, job_id, False))
        writers = self._hit_writers(w)
        # As vLLM's schedule(): a step that preempts admitted nothing in its schedule() call.
        if w.preemptions < self.max_preemptions and not w.scheduling:
            for rid, er in w.requests.items():
                if er.status == RUNNING and rid not in writers:
                    out.append(("step", rid, None, True))
        for rid, er in w.requests.items():
            if rid in writers:
                continue
            if er.status in (NEW, LOADING, RUNNING) or (er.status == WAITING and sched.is_tracked(rid)):
                out.append(("finish", rid))
        if w.resets < self.max_resets and not self._reset_waits(w):
            out.append(("reset",))
        return out

    def _reset_waits(self, w: World) -> bool:
        """Whether a reset that is still to come must wait for the next step: the engine is inside
        schedule()."""
        return w.scheduling and w.resets < self.max_resets and not self.resets_within_schedule

    def _inside_schedule(self, w: World) -> bool:
        """Whether the engine is inside schedule() where that tells two states apart: a reset still
        to come waits for the next step, or a preemption still to come cannot end this call."""
        return self._reset_waits(w) or (w.scheduling and w.preemptions < self.max_preemptions)

    def _hit_writers(self, w: World) -> set[str]:
        """Running requests whose next chunk's block another request holds as a GPU hit: the engine
        scheduled that chunk (the hit was possible only so), so the next step computes it."""
        writers = set()
        for rid, er in w.requests.items():
            if er.status == RUNNING and er.num_computed_tokens < self.chunks:
                block = er.block_ids[er.num_computed_tokens]
                if any(block in other.block_ids for other in w.requests.values() if other is not er):
                    writers.add(rid)
        return writers

    def touches(self, w: World, action: tuple[Any, ...]) -> frozenset[str] | None:
        """The requests ``action`` reads or writes in ``w``; None for an action on shared state
        (the explorer's partial-order reduction treats actions touching disjoint requests as
        independent). ``finish(r)`` of a request that the connector tracks and that holds no GPU
        blocks touches only ``r``: ``request_finished`` changes r's tracker and adds r to the
        scheduler's finished set (a set in the fingerprint), so two such finishes of different
        requests commute and neither disables the other. Everything else is shared: a finish that frees GPU
        blocks appends them to the pool's free queue, whose order decides which block the next
        allocation takes; an admission (or the finish of a request that never arrived, which looks
        it up) reads the shared prefix keys and reorders the CPU pool's LRU, and takes free GPU
        blocks; a step runs every request; ``reset_cache`` resets every request."""
        request = w.requests[action[1]] if action[0] == "finish" else None
        if request is not None and request.status != NEW and not request.block_ids:
            return frozenset((action[1],))
        return None

    def action_name(self, action: tuple[Any, ...]) -> str:
        kind = action[0]
        if kind == "admit":
            return f"admit({action[1]}, {'load' if action[2] else 'no load'})"
        if kind == "step":
            _, preempt, job_id, ok = action
            parts = [f"preempt {preempt}"] if preempt is not None else []
            if job_id is not None:
                parts.append(f"job {job_id} {'completes' if ok else 'FAILS'}")
            return f"step({', '.join(parts)})" if parts else "step"
        if kind == "finish":
            return f"finish({action[1]})"
        if kind == "reset":
            return "reset_cache"
        if kind == "spec":
            return f"step({action[1]} drafts, draft rejected)"
        return f"{kind}({action[1]})"

    def clone(self, w: World) -> World:
        """A copy of ``w`` that no later action on either can affect."""
        return World(
            w.scheduler.clone(),
            {rid: _copy_request(er) for rid, er in w.requests.items()},
            w.pool.copy(),
            w.gpu_content.copy(),
            w.cpu_content.copy(),
            w.inflight.copy(),
            w.done.copy(),
            w.resets,
            w.preemptions,
            w.scheduling,
            [],
            w.rejected.copy(),
        )

    def step(self, w: World, action: tuple[Any, ...]) -> World:
        return self._apply(self.clone(w), action)

    def step_owned(self, w: World, action: tuple[Any, ...]) -> World:
        """:meth:`step` that may reuse ``w`` itself (the explorer's last action from ``w``, which it
        never looks at again): one copy fewer per expanded state."""
        w.problems = []
        return self._apply(w, action)

    def successors(
        self, w: World, actions: Sequence[tuple[Any, ...]]
    ) -> Iterator[tuple[tuple[Any, ...], World | None, Exception | None]]:
        """Every action of ``actions`` from ``w`` (consumed), as :meth:`step` takes it; the plain
        steps that differ only in the job that ends (``step``, ``step(job j completes|FAILS)``)
        share one run of the step up to the end of its forward pass, so the real scheduler builds
        that step's metadata once, not once per ending."""
        endings = [a for a in actions if a[0] == "step" and a[1] is None]
        shared = len(endings) > 1
        begun: tuple[World, dict[int, bool]] | Exception | None = None
        left = len(endings)
        last = len(actions) - 1
        for index, action in enumerate(actions):
            if shared and action[0] == "step" and action[1] is None:
                if begun is None:
                    begun = self._begin_shared_step(w)
                left -= 1
                yield action, *self._end_shared_step(begun, action[2], action[3], owned=left == 0)
                continue
            try:
                successor = self.step_owned(w, action) if index == last else self.step(w, action)
            except Exception as error:  # a crash of the system under test: the explorer reports it
                yield action, None, error
                continue
            yield action, successor, None

    def _begin_shared_step(self, w: World) -> tuple[World, dict[int, bool]] | Exception:
        begun = self.clone(w)
        try:
            return begun, self._begin_step(begun, None, None)
        except Exception as error:  # every ending of this step raises it: the explorer reports each
            return error

    def _end_shared_step(
        self, begun: tuple[World, dict[int, bool]] | Exception, job_id: int | None, ok: bool, *, owned: bool
    ) -> tuple[World | None, Exception | None]:
        if isinstance(begun, Exception):
            return None, begun
        mid, report = begun
        if not owned:
            problems = mid.problems
            mid = self.clone(mid)
            mid.problems = list(problems)
            report = dict(report)
        try:
            self._end_step(mid, {} if job_id is None else {job_id: ok}, report)
            self._forget_free_content(mid)
        except Exception as error:
            return None, error
        return mid, None

    def _apply(self, w: World, action: tuple[Any, ...]) -> World:
        kind = action[0]
        if kind == "admit":
            self._admit(w, action[1], action[2])
        elif kind == "step":
            _, preempt, job_id, ok = action
            self._engine_step(w, preempt, {} if job_id is None else {job_id: ok})
        elif kind == "spec":
            self._engine_step(w, None, {}, drafting=action[1])
        elif kind == "finish":
            if w.requests[action[1]].status == NEW:
                # Aborted after the connector's lookup, before the engine could allocate blocks.
                self._lookup(w, action[1], len(self._gpu_hit(w, action[1])))
            self._finish(w, action[1])
        elif kind == "reset":
            engine_ops.reset_cache(w.pool, w.scheduler, w.requests)
            w.resets += 1
        else:
            raise ValueError(f"unknown action {action!r}")
        self._forget_free_content(w)
        return w

    def _forget_free_content(self, w: World) -> None:
        """A free block that no job references and no cache entry names holds nothing anyone may
        read: mark it EMPTY.

        Stale bytes in free blocks would make otherwise equal states distinct; and since EMPTY never
        equals a key, a bug that reads a block nobody wrote is always caught, never masked by stale
        bytes that happen to be right.
        """
        gpu_content, cpu_content, cached = w.gpu_content, w.cpu_content, w.pool.block_hash
        # A free block the pool still caches keeps its content: a later GPU hit reads it.
        gpu_written = [
            block for block in w.pool.free_queue if gpu_content[block] != EMPTY and cached[block] is None
        ]
        cpu_written = [
            block for block in w.scheduler.manager.view().free
            if 0 <= block < len(cpu_content) and cpu_content[block] != EMPTY
        ]
        if not gpu_written and not cpu_written:  # the usual case: nothing to forget
            return
        tables = w.scheduler.view()
        jobs = [*tables.jobs.values(), *tables.stale_jobs.values(), *w.inflight.values()]
        gpu_busy = {b for j in jobs for b in j.gpu_block_ids}
        cpu_busy = {b for j in jobs for b in j.cpu_block_ids}
        for block in gpu_written:
            if block not in gpu_busy:
                gpu_content[block] = EMPTY
        for block in cpu_written:
            if block not in cpu_busy:
                cpu_content[block] = EMPTY

    def invariants(self, w: World) -> list[tuple[str, str]]:
        problems = list(w.problems)
        problems += self._integrity(w)
        fence = [message for name, message in problems if name == "GpuBlockFence"]
        others = [(name, message) for name, message in problems if name != "GpuBlockFence"]
        snapshot = w.scheduler.snapshot(gpu_writes_under_store=fence)
        return [(v.invariant, v.message) for v in check_invariants(snapshot)] + others

    def is_final(self, w: World) -> bool:
        """The engine has nothing left to run: every request is done, never came, or finished and
        waits for its blocks to be released. A drain from here must release and clean everything."""
        return all(er.status in (NEW, FINISHED, DONE) for er in w.requests.values())

    def drain(self, w: World) -> list[tuple[str, str]]:
        """From ``w``: every live request finishes, every job completes, steps run until quiet."""
        w = self.clone(w)
        try:
            for rid, er in w.requests.items():
                if er.status in (LOADING, RUNNING) or (er.status == WAITING and w.scheduler.is_tracked(rid)):
                    self._finish(w, rid)
            checked = False  # the invariants hold in w as it is now
            for _ in range(self.drain_steps):
                self._engine_step(w, None, dict.fromkeys(w.inflight, True))
                problems = self.invariants(w)
                if problems:
                    return problems
                checked = True
                if self._quiet(w):
                    break
        except Exception as error:  # the system under test crashed while draining
            invariant = getattr(error, "invariant", None)
            return [(invariant if isinstance(invariant, str) else "Crash", f"{type(error).__name__}: {error}")]
        problems = [] if checked else self.invariants(w)
        if not self._quiet(w):
            stuck = w.scheduler.leaks() + [
                f"GPU blocks of {rid} never released" for rid, er in w.requests.items() if er.status == FINISHED
            ]
            problems.append(
                ("EventuallyCleaned", f"not quiescent after {self.drain_steps} drain steps: {'; '.join(stuck)}")
            )
            return problems
        leaks = w.scheduler.leaks() + w.scheduler.manager.leaks()
        if len(w.pool.free_queue) != self.gpu_blocks:
            leaks.append(f"GPU blocks never freed: {sorted(set(range(self.gpu_blocks)) - set(w.pool.free_queue))}")
        if leaks:
            problems.append(("NoLeak", "; ".join(leaks)))
        return problems

    def _quiet(self, w: World) -> bool:
        return (
            not w.scheduler.has_pending_work()
            and not w.inflight
            and not w.done
            and all(er.status in (NEW, DONE) for er in w.requests.values())
        )

    # ------------------------------------------------------------------ engine actions
    def _gpu_hit(self, w: World, rid: str) -> list[int]:
        """The GPU blocks of ``rid``'s longest cached prefix: chunks the pool caches (computed or
        loaded, by any request, freed or not, until allocated again or reset; a preempted request
        hits its own), or shared chunks that another request holds as its next chunk, which it is
        scheduled to compute in the next step (vLLM caches a block when it schedules it). The last
        chunk is left for the engine to compute."""
        if not self.gpu_prefix_cache:
            return []
        # A running request is scheduled one chunk per step.
        cached = {other_id: vllm_rules.cached_blocks(other, 1) for other_id, other in w.requests.items()}

        def scheduled(chunk: int) -> int | None:
            if chunk >= self.shared_chunks:  # another request holds none of rid's private chunks
                return None
            for other_id, other in w.requests.items():
                if other_id != rid and chunk < len(other.block_ids) and chunk < cached[other_id]:
                    return other.block_ids[chunk]
            return None

        return engine_ops.gpu_hit(w.pool, w.requests[rid], scheduled)

    def _lookup(self, w: World, rid: str, hit_chunks: int) -> int | None:
        er = w.requests[rid]
        tokens = hit_chunks * self.config.chunk_tokens
        matched, _ = w.scheduler.get_num_new_matched_tokens(er, tokens)
        er.status = WAITING
        return matched

    def _admit(self, w: World, rid: str, load: bool) -> None:
        w.scheduling = True
        hit = self._gpu_hit(w, rid)
        matched = self._lookup(w, rid, len(hit))
        if matched is None:
            return  # deferred by the connector: the engine retries next step
        er = w.requests[rid]
        admitted = engine_ops.admit(w.pool, w.scheduler, er, hit, self.chunks, matched if load else 0)
        assert admitted  # admit is offered only with a request's worth of free blocks

    def _finish(self, w: World, rid: str) -> None:
        er = w.requests[rid]
        w.rejected.pop(rid, None)  # a finished request's drafts are not reported
        engine_ops.finish(w.pool, er, w.scheduler.request_finished(er, list(er.block_ids)))

    def _copy(self, w: World, job: TransferJob, ok: bool) -> None:
        """The copy itself: content moves when the job completes (or is flushed)."""
        for cpu, gpu in zip(job.cpu_block_ids, job.gpu_block_ids, strict=False):
            if job.kind == "store":
                w.cpu_content[cpu] = w.gpu_content[gpu] if ok else GARBAGE
            else:
                w.gpu_content[gpu] = w.cpu_content[cpu] if ok else GARBAGE
        if job.kind == "store" and len(job.gpu_block_ids) < len(job.cpu_block_ids):
            for cpu in job.cpu_block_ids[len(job.gpu_block_ids) :]:
                w.cpu_content[cpu] = GARBAGE

    def _write_gpu(self, w: World, block: int, content: int, by: str) -> None:
        for job in w.inflight.values():
            if block in job.gpu_block_ids:
                if job.kind == "store":
                    w.problems.append(
                        ("GpuBlockFence", f"{by} writes GPU block {block} while store job {job.job_id} of "
                         f"{job.request_id} still reads it")
                    )
                else:
                    w.problems.append(
                        ("DataIntegrity", f"{by} writes GPU block {block} while load job {job.job_id} of "
                         f"{job.request_id} still writes it")
                    )
        w.gpu_content[block] = content

    def _engine_step(
        self, w: World, preempt: str | None, completing: dict[int, bool], drafting: str | None = None
    ) -> None:
        """One engine step; ``completing``: in-flight jobs whose copy ends during this step (after
        the forward pass: the adversarial order for a store still reading a block); ``drafting``:
        a request that also computes a draft of its next chunk, rejected at verification."""
        self._end_step(w, completing, self._begin_step(w, preempt, drafting))

    def _begin_step(self, w: World, preempt: str | None, drafting: str | None) -> dict[int, bool]:
        """An engine step up to the end of its forward pass; returns the job outcomes the worker
        reports at its end (flushed now, or finished in earlier steps), before any job of
        ``completing`` ends: :meth:`_end_step` finishes it."""
        sched = w.scheduler
        w.scheduling = False
        preempted: list[str] = []
        if preempt is not None:
            engine_ops.preempt(w.pool, w.requests[preempt])
            preempted.append(preempt)
            w.preemptions += 1
        running = [rid for rid, er in w.requests.items() if er.status == RUNNING]
        tokens = self.config.chunk_tokens
        scheduled = {rid: (tokens if w.requests[rid].num_computed_tokens < self.chunks else 0) for rid in running}
        drafts = {drafting: tokens} if drafting is not None else {}
        if drafting is not None:
            scheduled[drafting] += tokens
        rejected, w.rejected = w.rejected, {}
        meta = sched.build_connector_meta(
            SchedulerOutput(
                num_scheduled_tokens=scheduled, preempted=preempted, num_draft_tokens=drafts,
                num_rejected_tokens=rejected,
            )
        )
        report = dict(w.done)
        w.done.clear()
        # The worker: flush first (wait for those copies now), then submit stores, then loads.
        for job_id in meta.flush:
            job = w.inflight.pop(job_id, None)
            if job is not None:
                self._copy(w, job, True)
                w.done[job_id] = True
            # A flushed job the worker never received has nothing to wait for and is never reported:
            # the scheduler must not ask for one (it would wait forever: EventuallyCleaned).
        for job in meta.stores:
            self._check_store_source(w, job)
            w.inflight[job.job_id] = job
        for job in meta.loads:
            for block in job.gpu_block_ids:
                for other in w.inflight.values():
                    if other.kind == "store" and block in other.gpu_block_ids:
                        w.problems.append(
                            ("GpuBlockFence", f"load job {job.job_id} of {job.request_id} targets GPU block "
                             f"{block} while store job {other.job_id} of {other.request_id} still reads it")
                        )
            w.inflight[job.job_id] = job
        # The forward pass: each scheduled request writes the KV of its next chunk.
        for rid, n in scheduled.items():
            if not n:
                continue
            er = w.requests[rid]
            computed = er.num_computed_tokens
            self._write_gpu(w, er.block_ids[computed], er.block_hashes[computed], f"{rid}'s forward pass")
            if self.gpu_prefix_cache:
                w.pool.register(er.block_ids[computed], er.block_hashes[computed])
            if rid == drafting:
                self._write_gpu(w, er.block_ids[computed + 1], DRAFT, f"{rid}'s draft")
                w.rejected[rid] = tokens
            er.num_computed_tokens = computed + 1
        return report

    def _end_step(self, w: World, completing: dict[int, bool], report: dict[int, bool]) -> None:
        """The end of an engine step begun by :meth:`_begin_step`: the jobs of ``completing`` end,
        the worker reports, and the engine applies the connector's update."""
        sched = w.scheduler
        for job_id, ok in completing.items():
            job = w.inflight.pop(job_id, None)
            if job is not None:  # None: flushed (completed) at the start of this step
                self._copy(w, job, ok)
                report[job_id] = ok
        output = WorkerOutput(report)
        if self.worker_report is not None:
            output = self.worker_report(output)
        update = sched.update_connector_output(output)
        for rid in update.loaded:
            er = w.requests[rid]
            if er.status == LOADING:
                engine_ops.complete_load(w.pool, er, cache=self.gpu_prefix_cache)
        for rid in update.load_failed:
            er = w.requests[rid]
            if er.status == LOADING:
                vllm_rules.recompute_after_failed_load(er)
        for rid in update.released:
            engine_ops.release(w.pool, w.requests[rid])
        sched.take_events()

    def _check_store_source(self, w: World, job: TransferJob) -> None:
        if len(job.gpu_block_ids) != len(job.keys):
            w.problems.append(
                ("DataIntegrity", f"store job {job.job_id} of {job.request_id} copies {len(job.keys)} key(s) from "
                 f"{len(job.gpu_block_ids)} GPU block(s) {list(job.gpu_block_ids)}")
            )
            return
        for key, block in zip(job.keys, job.gpu_block_ids, strict=True):
            if w.gpu_content[block] != key:
                w.problems.append(
                    ("DataIntegrity", f"store job {job.job_id} of {job.request_id} stores key {self.key_name(key)} "
                     f"from GPU block {block}, which holds {self.key_name(w.gpu_content[block])}")
                )

    def _integrity(self, w: World) -> list[tuple[str, str]]:
        problems = []
        running = [er for er in w.requests.values() if er.status == RUNNING]
        # A GPU hit on a block scheduled for the next step's forward pass: not written yet.
        scheduled = {er.block_ids[er.num_computed_tokens] for er in running if er.num_computed_tokens < self.chunks}
        for rid, er in w.requests.items():
            if er.status != RUNNING:
                continue
            hashes = er.block_hashes
            for chunk in range(er.num_computed_tokens):
                block = er.block_ids[chunk]
                if w.gpu_content[block] != hashes[chunk] and block not in scheduled:
                    problems.append(
                        ("DataIntegrity", f"{rid} chunk {chunk} in GPU block {block} holds "
                         f"{self.key_name(w.gpu_content[block])}, expected {self.key_name(hashes[chunk])}")
                    )
        return problems

    # ------------------------------------------------------------------ identity
    def fingerprint(self, w: World) -> Hashable:
        """A digest of the canonical state: requests ordered by their permutation-invariant
        entries, ties broken by trying every order of the tied requests (the least digest wins).

        Any orbit-invariant choice among the candidate orders' canonical forms is a canonical form,
        so taking the least *digest* (rather than the least rendering) identifies exactly the same
        states; the digest is of ``marshal`` bytes (version 0: no sharing or interning flags, so equal
        values give equal bytes), several times cheaper than rendering the tuple as text.
        """
        n = self.num_requests
        tables = w.scheduler.view()
        jobs = {**tables.jobs, **tables.stale_jobs, **w.inflight}
        if not self.symmetry or n == 1:
            return _digest(self._canonical(w, tables, 0, jobs))
        if n == 2:
            # With two requests, the pair of "self"/"other" entries in canonical order says exactly
            # what the canonically renamed, sorted entries say (each names the other request and
            # its keys one way only), so it stands in for them and they are not computed again.
            first, second = self.request_ids
            e0 = self._request_entry(w, first, self._relative_index[first], jobs)
            e1 = self._request_entry(w, second, self._relative_index[second], jobs)
            if e0 != e1:
                try:
                    swap = e1 < e0
                except TypeError:  # parts that do not compare (a mutant's values): order by text
                    swap = repr(e1) < repr(e0)
                if swap:
                    return _digest(self._canonical(w, tables, self._order_naming((1, 0)), jobs, (e1, e0)))
                return _digest(self._canonical(w, tables, 0, jobs, (e0, e1)))
            if w.requests[first].status == NEW:  # neither arrived: they touched nothing, either order
                return _digest(self._canonical(w, tables, 0, jobs, (e0, e1)))
            pair = (e0, e1)
            swapped = self._order_naming((1, 0))
            return min(
                _digest(self._canonical(w, tables, 0, jobs, pair)),
                _digest(self._canonical(w, tables, swapped, jobs, pair)),
            )
        entries = [self._request_entry(w, rid, self._relative_index[rid], jobs) for rid in self.request_ids]
        try:
            ranked = sorted(range(n), key=entries.__getitem__)
        except TypeError:  # entries whose parts do not compare (a mutant's values): order by text
            entries = [repr(e) for e in entries]  # type: ignore[misc]
            ranked = sorted(range(n), key=entries.__getitem__)
        groups = [tuple(g) for _, g in itertools.groupby(ranked, key=entries.__getitem__)]
        # Requests that never arrived touched nothing: any one order of them will do.
        options = [
            [g] if w.requests[self.request_ids[g[0]]].status == NEW else list(itertools.permutations(g))
            for g in groups
        ]
        if math.prod(len(option) for option in options) > MAX_TIE_ORDERS:
            options = [[g] for g in groups]
        orders = [tuple(i for part in combo for i in part) for combo in itertools.product(*options)]
        return min(_digest(self._canonical(w, tables, self._order_naming(order), jobs)) for order in orders)

    def _request_entry(self, w: World, rid: str, naming: int, jobs: dict[int, TransferJob]) -> tuple[Any, ...]:
        """``rid``'s engine and connector state under renaming ``naming`` (see ``_namings``)."""
        rids, _, key_tuples = self._namings[naming]
        er = w.requests[rid]
        t = w.scheduler.trackers.get(rid)
        tracker: tuple[Any, ...] = ()
        if t is not None:
            load_job = t.load_job
            if load_job is None:
                load: tuple[Any, ...] = ()
            else:
                j = jobs.get(load_job)
                load = ("?", load_job) if j is None else (
                    j.kind, rids[j.request_id], key_tuples(j.keys), j.gpu_block_ids, j.cpu_block_ids
                )
            stores: tuple[Any, ...] = ()
            if t.store_jobs:
                rendered = []
                for i in t.store_jobs:
                    j = jobs.get(i)
                    rendered.append(("?", i) if j is None else (
                        j.kind, rids[j.request_id], key_tuples(j.keys), j.gpu_block_ids, j.cpu_block_ids
                    ))
                stores = tuple(sorted(rendered))
            tracker = (
                t.state, t.num_computed_tokens, tuple(t.gpu_block_ids), t.stored_chunks, load, stores,
                t.lookup_start_chunk, t.lookup_hit_chunks, t.local_computed_tokens, t.holds_gpu_blocks, t.signals,
                t.draft_tokens, t.gpu_hit_unwritten,
            )
        return (
            rids[rid], er.status, tuple(er.block_ids), er.num_computed_tokens, er.external_tokens,
            w.rejected.get(rid, 0), er.local_hit_tokens, tracker,
        )

    def _build_namings(self) -> None:
        """The renamings the fingerprint uses, indexed: 0 is the identity order, then one
        "relative" renaming per request (itself "self", every other "other"), then the other
        request orders (``order[k]`` becomes request ``k``, with its private keys), each made the
        first time a fingerprint needs it (:meth:`_order_naming`; building all n! up front grew
        factorially). Each is ``(rids, keys, key_tuples)``; ``key_tuples`` renames a tuple of
        keys, memoised."""
        self._namings: list[tuple[dict[str, Any], dict[Any, Any], Callable[[tuple[int, ...]], tuple[Any, ...]]]] = []
        self._order_index: dict[tuple[int, ...], int] = {}
        self._order_naming(tuple(range(self.num_requests)))
        self._relative_index = {rid: self._add_naming(*self._relative[rid]) for rid in self.request_ids}

    def _add_naming(self, rids: dict[str, Any], keys: dict[Any, Any]) -> int:
        memo: dict[tuple[int, ...], tuple[Any, ...]] = {}

        def key_tuples(ks: tuple[int, ...]) -> tuple[Any, ...]:
            found = memo.get(ks)
            if found is None:
                found = memo[ks] = tuple(keys[k] for k in ks)
            return found

        self._namings.append((rids, keys, key_tuples))
        return len(self._namings) - 1

    def _order_naming(self, order: tuple[int, ...]) -> int:
        """The index of the renaming for request ``order``, made on first use."""
        index = self._order_index.get(order)
        if index is None:
            index = self._order_index[order] = self._add_naming(*self._renaming(order))
        return index

    def _canonical(
        self,
        w: World,
        sched: SchedulerState,
        naming: int,
        jobs: dict[int, TransferJob],
        per_request: tuple[Any, ...] | None = None,
    ) -> tuple[Any, ...]:
        """The state under renaming ``naming``; ``sched``: the scheduler's tables, ``jobs``: every
        job by id; ``per_request``: the request entries, if the caller has an equivalent rendering
        of them (else the renamed entries, sorted)."""
        rids, keys, key_tuples = self._namings[naming]

        # Every job rendered once (a job is named by what it copies); an id no job has stays "?".
        rendered = {
            job_id: (j.kind, rids[j.request_id], key_tuples(j.keys), j.gpu_block_ids, j.cpu_block_ids)
            for job_id, j in jobs.items()
        }

        def job(job_id: int) -> tuple[Any, ...]:
            found = rendered.get(job_id)
            return ("?", job_id) if found is None else found

        def jobset(ids: Iterable[int]) -> tuple[Any, ...]:
            return tuple(sorted([job(i) for i in ids]))

        if per_request is None:
            per_request = tuple(sorted([self._request_entry(w, rid, naming, jobs) for rid in w.requests]))
        return (
            per_request,
            _scheduler_part(sched, rids, keys, jobset),
            _manager_part(w.scheduler.manager, naming, rids, keys),
            _world_part(w, naming, keys, job, jobset, self._inside_schedule(w)),
        )

    # ------------------------------------------------------------------ readable state
    def describe(self, w: World) -> dict[str, str]:
        """Readable variables for counterexample diffs."""
        sched = w.scheduler
        tables = sched.view()
        out: dict[str, str] = {}
        for rid, er in w.requests.items():
            engine = f"{er.status}"
            if er.block_ids:
                engine += f" gpu{er.block_ids} computed={er.num_computed_tokens}"
            out[f"{rid}.engine"] = engine
            t = sched.trackers.get(rid)
            if t is None:
                out[f"{rid}.connector"] = "untracked" if er.status == NEW else CLEANED
            else:
                jobs = ([f"load#{t.load_job}"] if t.load_job is not None else []) + [
                    f"store#{j}" for j in sorted(t.store_jobs)
                ]
                out[f"{rid}.connector"] = (
                    f"{t.state} stored_chunks={t.stored_chunks} jobs=[{', '.join(jobs)}] signals={t.signals}"
                )
        for job_id, j in sorted(sched.jobs_in_flight.items()):
            where = "copying" if job_id in w.inflight else ("copied, unreported" if job_id in w.done else "built")
            keys = ",".join(self.key_name(k) for k in j.keys)
            arrow = f"gpu{list(j.gpu_block_ids)} -> cpu{list(j.cpu_block_ids)}"
            if j.kind == "load":
                arrow = f"cpu{list(j.cpu_block_ids)} -> gpu{list(j.gpu_block_ids)}"
            stale = " stale" if job_id in tables.stale_jobs else ""
            out[f"job#{job_id}"] = f"{j.kind}{stale} of {j.request_id} [{keys}] {arrow}: {where}"
        for job_id, ok in sorted(w.done.items()):
            if job_id not in sched.jobs_in_flight:
                out[f"job#{job_id}"] = f"copied, reported as {'ok' if ok else 'failed'} next step"
        manager = sched.manager
        entries = []
        for key in sorted(manager.resident_keys):
            e = manager.entry(key)
            assert e is not None
            flags = ("writing" if e.write_pending else "ready") + (f" pinned x{e.ref_cnt}" if e.ref_cnt else "")
            entries.append(f"{self.key_name(key)}@cpu{e.block_id} {flags}")
        out["cpu.keys"] = ", ".join(entries) or "none"
        out["cpu.content"] = " ".join(f"{i}:{self.key_name(c)}" for i, c in enumerate(w.cpu_content))
        out["gpu.content"] = " ".join(f"{i}:{self.key_name(c)}" for i, c in enumerate(w.gpu_content))
        out["gpu.free"] = str(list(w.pool.free_queue))
        out["gpu.cached"] = " ".join(
            f"{block}:{self.key_name(key)}" for block, key in enumerate(w.pool.block_hash) if key is not None
        ) or "none"
        if tables.pending_flush:
            out["flush.pending"] = str(sorted(tables.pending_flush))
        return out


JobSet = Callable[[Iterable[int]], tuple[Any, ...]]


def _scheduler_part(
    sched: SchedulerState, rids: dict[str, Any], keys: dict[Any, Any], jobset: JobSet
) -> tuple[Any, ...]:
    """The scheduler's tables of a canonical state, under the renaming ``rids`` / ``keys``."""
    fence = sched.fence
    keys_loading = sched.keys_loading
    return (
        jobset(sched.jobs) if sched.jobs else (),
        jobset(sched.stale_jobs) if sched.stale_jobs else (),
        jobset([j.job_id for j in sched.pending_loads]) if sched.pending_loads else (),
        jobset(sched.pending_flush) if sched.pending_flush else (),
        jobset(sched.flushed) if sched.flushed else (),
        tuple(sorted([rids[r] for r in sched.finished_pending])) if sched.finished_pending else (),
        tuple(sorted([rids[r] for r in sched.released])) if sched.released else (),
        tuple(sorted([rids[r] for r in sched.loaded])) if sched.loaded else (),
        tuple(sorted([rids[r] for r in sched.load_failed])) if sched.load_failed else (),
        tuple(sorted([(block, jobset(readers)) for block, readers in fence.items()])) if fence else (),
        tuple(sorted([(keys[k], n) for k, n in keys_loading.items() if n])) if keys_loading else (),
        sched.reset_pending,
    )


def _manager_part(manager: Any, naming: int, rids: dict[str, Any], keys: dict[Any, Any]) -> tuple[Any, ...]:
    """The CPU manager's entries, requests and policy of a canonical state, under renaming ``naming``."""
    manager_state = manager.view()
    requests = manager_state.requests
    policy_fp = manager.policy.fingerprint()
    if type(policy_fp) is tuple and all(type(k) is int for k in policy_fp):
        # What _freeze gives, faster; the identity renaming (naming 0) maps every key to itself.
        keys_get = keys.get
        policy_part: Any = policy_fp if naming == 0 else tuple([keys_get(k, k) for k in policy_fp])
    else:
        policy_part = _freeze(policy_fp, _leaf_renamer(rids, keys))
    return (
        tuple(manager_state.free),
        tuple(sorted([(keys[k], e.block_id, e.ref_cnt, e.write_pending) for k, e in manager_state.entries.items()])),
        tuple(
            sorted(
                [
                    (
                        rids[rid], r.finished,
                        tuple(sorted([(keys[k], n) for k, n in r.loading.items() if n])) if r.loading else (),
                        tuple(sorted([(keys[k], n) for k, n in r.storing.items() if n])) if r.storing else (),
                    )
                    for rid, r in requests.items()
                ]
            )
        ) if requests else (),
        policy_part,
    )


def _world_part(
    w: World,
    naming: int,
    keys: dict[Any, Any],
    job: Callable[[int], tuple[Any, ...]],
    jobset: JobSet,
    inside_schedule: bool,
) -> tuple[Any, ...]:
    """The engine model's part of a canonical state: GPU and CPU contents, jobs in flight and done,
    and whether the engine is inside a schedule() call that limits what comes next."""
    keys_get = keys.get
    done = w.done
    return (
        tuple(w.pool.free_queue),
        tuple(w.pool.block_hash) if naming == 0 else tuple([keys_get(h, h) for h in w.pool.block_hash]),
        tuple(w.gpu_content) if naming == 0 else tuple([keys_get(c, c) for c in w.gpu_content]),
        tuple(w.cpu_content) if naming == 0 else tuple([keys_get(c, c) for c in w.cpu_content]),
        jobset(w.inflight) if w.inflight else (),
        tuple(sorted([(job(j), ok) for j, ok in done.items()])) if done else (),
        w.resets,
        w.preemptions,
        inside_schedule,
    )
