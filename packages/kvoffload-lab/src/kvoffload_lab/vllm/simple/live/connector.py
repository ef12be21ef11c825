"""vLLM's ``SimpleCPUOffloadConnector`` observed inside a live engine: what runs in the engine's
processes for :mod:`.judge`.

Inside the engine, :class:`LiveSimpleConnector` (loaded through ``kv_connector_module_path:
"kvoffload_lab.vllm.simple.live.connector"``, made on first use since it subclasses vLLM's) is vLLM's
connector, untouched but observed:

- scheduler side: every call to vLLM's ``SimpleCPUOffloadScheduler`` is written to
  ``trace.ndjson``; an exception is a ``Crash`` finding with vLLM's file and line, raised on;
  whenever no request is live (none admitted and not finished) and at shutdown, ``drain.json``
  says what the scheduler side still holds (GPU blocks of the pool it was bound to and CPU blocks
  with references, non-empty per-request and per-transfer state, as
  :meth:`kvoffload_lab.vllm.simple.compat.SimpleReads.held` reads them) and how many engine steps and
  store events came since the last request finished;
- ``FinalBlockStored`` (``losses.ndjson``), a loss and not a safety violation: each request that
  finished by length must find its ``(num_tokens - 1) // block_size`` full computed blocks (the
  last sampled token is never computed) in the CPU block pool at the first idle moment, one step
  or more after the last finish, with no store pending (vLLM #41704). Counted only while no cache
  reset happened and fewer CPU blocks were ever allocated than the tier holds (so none was
  allocated twice, none evicted and no store dropped for room), and in eager mode only (lazy mode
  offloads a block only as it nears eviction from the GPU, as the in-process checkers count it);
- worker side: vLLM's ``SimpleCPUOffloadWorker`` is replaced by
  :class:`~kvoffload_lab.vllm.simple.worker.TorchSimpleWorker` (same arguments; its copies complete
  ``live_copy_delay`` polls late, :func:`copy_delay` of the workload's seed: 2, 1 or 3). Each store's GPU
  block must not change between launch and copy (``GpuBlockFence``), and each loaded block must
  hold the bytes the last store before the load's launch wrote to its CPU block
  (``DataIntegrity``, a digest per CPU block).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kvoffload_lab.vllm.common.findings import CRASH, crash_message
from kvoffload_lab.vllm.common.live.logs import DRAIN_FILE, FINDINGS_FILE, TRACE_FILE, FindingLog, TraceLog, write_json
from kvoffload_lab.vllm.common.live.workloads import BLOCK_BYTES, Workload
from kvoffload_lab.vllm.simple.compat import SimpleReads

MODES: tuple[str, ...] = ("eager", "lazy")
LOSS = "FinalBlockStored"
LOSSES_FILE = "losses.ndjson"
WORKER_FILE = "worker.json"
DEFAULT_COPY_DELAY = 2


def copy_delay(seed: int) -> int:
    """Polls a copy takes in the runs of ``seed``: 2 (done one engine step after its launch), 1 (done
    at the poll of the step that launched it: a fast DMA) or 3 (two steps late), by ``seed % 3``."""
    return (2, 1, 3)[seed % 3]


CONNECTOR = "LiveSimpleConnector"


def simple_transfer_config(mode: str, workload: Workload, folder: Path, engine_id: str) -> dict[str, Any]:
    """``kv_transfer_config`` for :class:`LiveSimpleConnector` in ``mode`` ("eager" or "lazy"); the
    CPU tier holds ``workload.cpu_chunks`` blocks (block 0 of them is vLLM's null block), copies take
    :func:`copy_delay` polls."""
    if mode not in MODES:
        raise ValueError(f"unknown simple connector mode {mode!r}; known: {', '.join(MODES)}")
    return {
        "kv_connector": CONNECTOR,
        "kv_connector_module_path": __name__,
        "kv_role": "kv_both",
        "engine_id": engine_id,
        "kv_connector_extra_config": {
            "live_check_dir": str(folder),
            "cpu_bytes_to_use": workload.cpu_chunks * BLOCK_BYTES,
            "lazy_offload": mode == "lazy",
            "live_copy_delay": copy_delay(workload.seed),
        },
    }



# ---------------------------------------------------------------------- the scheduler side
def held_by(manager: Any) -> list[str]:
    """What vLLM's ``SimpleCPUOffloadScheduler`` holds: blocks with references in the GPU pool it was
    bound to and in its CPU pool, and its non-empty request and transfer state."""
    engine = SimpleNamespace(connector=SimpleNamespace(scheduler_manager=manager),
                             kv_cache_manager=SimpleNamespace(block_pool=SimpleReads().gpu_pool(manager)))
    return SimpleReads().held(engine, None)


@dataclass
class _Finished:
    step: int
    full: int
    hashes: list[Any]


class _SchedulerRecorder:
    """The scheduler side's trace, live requests, drain report and lost final blocks."""

    def __init__(self, manager: Any, folder: Path) -> None:
        self.manager = manager
        self.reads = SimpleReads()
        self.trace = TraceLog(folder / TRACE_FILE)
        self.findings = FindingLog(folder / FINDINGS_FILE)
        self.losses = FindingLog(folder / LOSSES_FILE)
        self.drain_path = folder / DRAIN_FILE
        self.step = 0
        self.last_finish = 0
        self.live: set[str] = set()
        self.resets = 0
        self.cpu_allocated = 0
        self.cpu_ids: set[int] = set()
        self.allocated_twice = 0
        self.stores = self.loads = self.loads_done = 0
        self.idle_steps = self.idle_stores = self.idle_store_blocks = 0
        self.idle_gpu_blocks: set[int] = set()
        self._finished: dict[str, _Finished] = {}
        self.counted = self.lost = self.uncounted = 0

    # ------------------------------------------------------------------ calls
    def after(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        getattr(self, f"_{name}", self._other)(name, args, result)
        if not self.live:
            self._count_losses()
            self.drain_report("idle")

    def _other(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        self.trace.call(self.step, "simple", name)

    def _get_num_new_matched_tokens(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        request, local = args[0], int(args[1])
        self.live.add(request.request_id)
        self.trace.call(self.step, "simple", name, request.request_id, local_tokens=local,
                        matched=result[0], load_async=bool(result[1]))

    def _update_state_after_alloc(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        request = args[0]
        self.live.add(request.request_id)
        self.trace.call(self.step, "simple", name, request.request_id, external_tokens=int(args[2]))

    def _request_finished_all_groups(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        request = args[0]
        rid = request.request_id
        self.live.discard(rid)
        self.last_finish = self.step
        status = request.status.name
        self.trace.call(self.step, "simple", "request_finished", rid, status=status,
                        num_tokens=int(request.num_tokens), computed_tokens=int(request.num_computed_tokens))
        if status == "FINISHED_LENGTH_CAPPED":
            full = (int(request.num_tokens) - 1) // self.manager.block_size
            self._finished[rid] = _Finished(self.step, full, list(request.block_hashes[:full]))

    _request_finished = _request_finished_all_groups

    def _build_connector_meta(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        self.step += 1
        output = args[0]
        fields: dict[str, Any] = {"scheduled": sorted(output.num_scheduled_tokens),
                                  "finished": sorted(output.finished_req_ids or ())}
        if output.preempted_req_ids:
            fields["preempted"] = sorted(output.preempted_req_ids)
        if result.store_gpu_blocks:
            self.stores += 1
            fields["store"] = [result.store_event, list(result.store_gpu_blocks), list(result.store_cpu_blocks)]
            for block in result.store_cpu_blocks:
                self.cpu_allocated += 1
                if block in self.cpu_ids:
                    self.allocated_twice += 1
                self.cpu_ids.add(block)
        if self.reads.lazy(self.manager):
            cursor = self.reads.lazy_cursor(self.manager)
            fields["cursor"] = None if cursor is None else cursor.block_id
            fields["unstored_free"] = self.unstored_free()
        if result.load_gpu_blocks:
            self.loads += 1
            fields["load"] = [result.load_event, list(result.load_cpu_blocks), list(result.load_gpu_blocks)]
        if self.live or output.num_scheduled_tokens:
            self.idle_steps = self.idle_stores = self.idle_store_blocks = 0
            self.idle_gpu_blocks.clear()
        else:
            self.idle_steps += 1
            if result.store_gpu_blocks:
                self.idle_stores += 1
                self.idle_store_blocks += len(result.store_gpu_blocks)
                self.idle_gpu_blocks.update(result.store_gpu_blocks)
        self.trace.call(self.step, "simple", name, **fields)

    def _update_connector_output(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        output = args[0]
        fields: dict[str, Any] = {}
        if output.finished_recving:
            fields["loaded"] = sorted(output.finished_recving)
            self.loads_done += len(output.finished_recving)
        meta = getattr(output, "kv_connector_worker_meta", None)
        completed = getattr(meta, "completed_store_events", None)
        if completed:
            fields["stored"] = sorted(completed)
        self.trace.call(self.step, "simple", name, **fields)

    def _reset_cache(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        self.resets += 1
        self.trace.call(self.step, "simple", name, returned=result)

    def unstored_free(self) -> list[int]:
        """Free GPU blocks with a hash the CPU tier does not cache: what lazy mode may still store."""
        gpu, cpu = self.reads.gpu_pool(self.manager), self.manager.cpu_block_pool
        cached = cpu.cached_block_hash_to_block
        return [block.block_id for block in gpu.free_block_queue.iter_blocks_after(None)
                if block.block_hash is not None and cached.get_one_block(block.block_hash) is None]

    # ------------------------------------------------------------------ losses and drain
    def _countable(self) -> bool:
        manager = self.manager
        if self.reads.lazy(manager):
            return False  # lazy mode stores only blocks near eviction: a block not stored may be kept
        # Block 0 of the CPU pool is vLLM's null block: the others are the tier.
        return self.resets == 0 and self.cpu_allocated < manager.num_cpu_blocks - 1

    def _count_losses(self) -> None:
        # Lazy mode stores what a finish freed (blocks shared with the request too) at the next step.
        if not self._finished or self.last_finish >= self.step or self.manager.has_pending_stores():
            return
        pool, gpu = self.manager.cpu_block_pool, self.reads.gpu_pool(self.manager)
        for rid, done in list(self._finished.items()):
            del self._finished[rid]
            if not self._countable():
                self.uncounted += 1
                continue
            self.counted += 1
            for index, block_hash in enumerate(done.hashes):
                if not pool.get_cached_block(block_hash, [0]):
                    self.lost += 1
                    final = " (its final full block)" if index == done.full - 1 else ""
                    where = "still" if gpu.get_cached_block(block_hash, [0]) else "no longer"
                    self.losses.add(LOSS, f"request '{rid}' finished by length with {done.full} full block(s) "
                                          f"computed; block {index}{final} is not in the CPU tier ({where} in the "
                                          "GPU prefix cache)")

    def stats(self) -> dict[str, Any]:
        return {
            "steps": self.step, "store_events": self.stores, "load_events": self.loads,
            "loads_done": self.loads_done, "resets": self.resets, "cpu_blocks": self.manager.num_cpu_blocks,
            "cpu_allocated": self.cpu_allocated, "cpu_allocated_twice": self.allocated_twice,
            "lazy_target_free": int(getattr(self.manager, "_target_free", 0)),
            "idle_steps": self.idle_steps, "idle_store_events": self.idle_stores,
            "idle_store_blocks": self.idle_store_blocks, "idle_distinct_gpu_blocks": len(self.idle_gpu_blocks),
            "finished_counted": self.counted, "finished_uncounted": self.uncounted, "lost_blocks": self.lost,
        }

    def drain_report(self, when: str) -> None:
        """``drain.json``: what is held now (``when``: "idle" or "shutdown") and the run's counters."""
        write_json(self.drain_path, {"seq": self.trace.seq, "step": self.step, "when": when,
                                     "live": sorted(self.live), "held": held_by(self.manager), **self.stats()})


# ---------------------------------------------------------------------- the worker side
def _digest(regions: dict[str, Any], block: int) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for region in regions.values():
        digest.update(region[block].numpy().tobytes())
    return digest.digest()


def _checked_backend(backend: Any, findings: FindingLog, stats_path: Path) -> Any:
    """Wrap ``backend.launch_copy`` (a :class:`~kvoffload_lab.vllm.simple.backend.LateCopyBackend`) so that
    each copy, when it runs, reports new fence breaks, keeps each stored CPU block's digest and checks
    each loaded block against the digest its CPU block had at the load's launch."""
    from kvoffload_lab.vllm.simple.backend import LateEvent

    stored: dict[int, bytes] = {}
    counts = {"store_events": 0, "load_events": 0, "blocks_stored": 0, "blocks_loaded_checked": 0,
              "fence_breaks": 0, "integrity_failures": 0}
    launch = backend.launch_copy

    def checked_launch(src_blocks: list[int], dst_blocks: list[int], is_store: bool, event_idx: int,
                       events_list: list[tuple[int, Any]], wait_event: Any = None) -> None:
        before = len(events_list)
        launch(src_blocks, dst_blocks, is_store, event_idx, events_list, wait_event)
        if len(events_list) == before:
            return
        index, inner = events_list[-1]
        src, dst = [int(b) for b in src_blocks], [int(b) for b in dst_blocks]
        expected = {} if is_store else {c: stored.get(c) for c in src}

        def run() -> None:
            inner.synchronize()  # the copy itself
            if is_store:
                counts["store_events"] += 1
                counts["blocks_stored"] += len(dst)
                for cpu_block in dst:
                    stored[cpu_block] = _digest(backend.cpu, cpu_block)
                for broken in backend.fence_breaks[counts["fence_breaks"]:]:
                    findings.add("GpuBlockFence", str(broken))
                counts["fence_breaks"] = len(backend.fence_breaks)
            else:
                counts["load_events"] += 1
                for cpu_block, gpu_block in zip(src, dst, strict=True):
                    where = f"load event {event_idx}: GPU block {gpu_block} from CPU block {cpu_block}"
                    want = expected[cpu_block]
                    if want is None:
                        counts["integrity_failures"] += 1
                        findings.add("DataIntegrity", f"{where}, which no store had written at the load's launch")
                    elif _digest(backend.gpu, gpu_block) != want:
                        counts["integrity_failures"] += 1
                        findings.add("DataIntegrity", f"{where}: the loaded bytes differ from the bytes its last "
                                                      "store wrote")
                    else:
                        counts["blocks_loaded_checked"] += 1
            write_json(stats_path, counts)

        events_list[-1] = (index, LateEvent(run, backend.delay))

    backend.launch_copy = checked_launch
    return backend


_WORKER: list[type] = []


def _checked_worker_class() -> type:
    if _WORKER:
        return _WORKER[0]
    from kvoffload_lab.vllm.simple.worker import worker_class

    class CheckedSimpleWorker(worker_class()):  # type: ignore[misc]
        """:class:`~kvoffload_lab.vllm.simple.worker.TorchSimpleWorker` whose copies are checked."""

        live_folder: Path

        def attach(self, gpu_regions: dict[str, Any]) -> None:
            super().attach(gpu_regions)
            folder = self.live_folder
            _checked_backend(self._backend, FindingLog(folder / FINDINGS_FILE), folder / WORKER_FILE)

    _WORKER.append(CheckedSimpleWorker)
    return CheckedSimpleWorker


# ---------------------------------------------------------------------- the connector
SCHEDULER_CALLS = ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
                   "update_connector_output", "request_finished", "request_finished_all_groups", "reset_cache",
                   "has_pending_push_work", "bind_gpu_block_pool", "take_events")
WORKER_CALLS = ("register_kv_caches", "bind_connector_metadata", "clear_connector_metadata", "handle_preemptions",
                "start_load_kv", "wait_for_save", "get_finished", "build_connector_worker_meta")
TRACED = frozenset(SCHEDULER_CALLS) - {"has_pending_push_work", "bind_gpu_block_pool", "take_events"}


def _checked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run vLLM's method; what it raises is a ``Crash`` finding; a scheduler call is recorded after."""
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        findings = getattr(self, "_live_findings", None)
        if findings is None:
            return method(self, *args, **kwargs)
        try:
            result = method(self, *args, **kwargs)
        except Exception as error:
            findings.add(CRASH, crash_message(error))
            raise
        recorder = self._live
        if recorder is not None and name in TRACED:
            try:
                recorder.after(name, args, result)
            except Exception as error:  # a bug of the check, never vLLM's
                findings.add("CheckerError", f"the live simple recorder failed after {name}: "
                                             f"{crash_message(error)}")
        return result

    return wrapper


_CONNECTOR: list[type] = []


def _connector_class() -> type:
    if _CONNECTOR:
        return _CONNECTOR[0]
    from vllm.distributed.kv_transfer.kv_connector.v1.simple_cpu_offload_connector import SimpleCPUOffloadConnector

    class LiveSimpleConnector(SimpleCPUOffloadConnector):  # type: ignore[misc, valid-type]
        """vLLM's ``SimpleCPUOffloadConnector``, observed; its worker copies with torch."""

        def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(vllm_config, role, kv_cache_config, *args, **kwargs)
            extra = vllm_config.kv_transfer_config.kv_connector_extra_config
            folder = Path(extra["live_check_dir"])
            self._live_findings = FindingLog(folder / FINDINGS_FILE)
            self._live: _SchedulerRecorder | None = None
            if self.scheduler_manager is not None:
                self._live = _SchedulerRecorder(self.scheduler_manager, folder)
            if self.worker_handler is not None:
                vllm_worker = self.worker_handler
                worker = _checked_worker_class()(vllm_config, kv_cache_config, vllm_worker.cpu_capacity_bytes,
                                                 delay=int(extra.get("live_copy_delay", DEFAULT_COPY_DELAY)))
                worker.live_folder = folder
                self.worker_handler = worker

        def shutdown(self) -> None:
            if self._live is not None:
                self._live.drain_report("shutdown")
                self._live.trace.close()
                self._live = None
            super().shutdown()

    for call in (*SCHEDULER_CALLS, *WORKER_CALLS):
        setattr(LiveSimpleConnector, call, _checked(getattr(SimpleCPUOffloadConnector, call)))
    _CONNECTOR.append(LiveSimpleConnector)
    return LiveSimpleConnector


def __getattr__(name: str) -> Any:
    """``LiveSimpleConnector``, made on first use (vLLM's connector factory gets it by name)."""
    if name == CONNECTOR:
        return _connector_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
