"""``LiveCheckConnector``: vLLM's ``OffloadingConnector``, observed from inside a live engine.

Turn it on with ``kv_connector: "LiveCheckConnector"``, ``kv_connector_module_path:
"kvoffload_lab.vllm.offloading.live.connector"`` and ``kv_connector_extra_config["live_check_dir"]``
(plus vLLM's own keys, and ``spec_module_path: "kvoffload_lab.vllm.offloading.live.offloading_spec"``
for a worker that runs on the CPU platform). Every method is vLLM's; on the scheduler side each call is first written to
``live_check_dir/trace.ndjson`` (``object: "scheduler"``), and the connector scheduler's manager
is put behind :class:`~kvoffload_lab.vllm.offloading.proxy.RecordingManager`, whose calls go to the same
trace (``object: "manager"``) and whose contract violations go to ``findings.ndjson`` as they
happen. An exception raised inside vLLM's connector is a ``Crash`` finding with vLLM's file and
line, then raised on as before. The drain-time checks (``NoLeak``, ``SignalExactlyOnce``,
``SignalAfterFinalStore``) run each time the connector is idle (no request tracked, no job, the
manager without pending work) and at shutdown; ``drain.json`` holds the last result.

The engine step of a line is the number of ``build_connector_meta`` calls so far.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import OffloadingConnector

from kvoffload_lab.vllm.common.findings import CRASH, crash_message
from kvoffload_lab.vllm.common.live.logs import DRAIN_FILE, FINDINGS_FILE, TRACE_FILE, FindingLog, TraceLog, write_drain
from kvoffload_lab.vllm.offloading.compat import private_reads
from kvoffload_lab.vllm.offloading.proxy import RecordingManager


def _recorded(method: Callable[..., Any]) -> Callable[..., Any]:
    """Write the call to the trace, run vLLM's method, report what it raised and new violations."""

    @functools.wraps(method)
    def wrapper(self: LiveCheckConnector, *args: Any, **kwargs: Any) -> Any:
        if self._live is None:
            return method(self, *args, **kwargs)
        self._live.enter(method.__name__, args)
        try:
            return method(self, *args, **kwargs)
        except Exception as error:
            self._live.findings.add(CRASH, crash_message(error))
            raise
        finally:
            self._live.collect()

    return wrapper


class _SchedulerRecorder:
    """The scheduler side's trace, step counter, proxy and the chunks each finished request owes."""

    def __init__(self, connector: OffloadingConnector, folder: Path, vllm_config: Any) -> None:
        import vllm

        extra = vllm_config.kv_transfer_config.kv_connector_extra_config
        self.connector = connector
        self.reads = private_reads(vllm.__version__)
        self.trace = TraceLog(folder / TRACE_FILE)
        self.drain_path = folder / DRAIN_FILE
        self.findings = FindingLog(folder / FINDINGS_FILE)
        self.step = 0
        self.blocks_per_chunk = int(extra.get("blocks_per_chunk", 1))
        self.prompt_only = bool(extra.get("offload_prompt_only", True))
        self.tokens_per_block = int(vllm_config.cache_config.block_size)
        scheduler = connector.connector_scheduler
        self.proxy = RecordingManager(scheduler.manager, lambda: self.step, self._owed, self._manager_call)
        scheduler.manager = self.proxy
        self._seen = 0
        self._local_tokens: dict[str, int] = {}
        # Tokens each request got from the GPU prefix cache or a load at some admission: storing
        # those chunks is not its job (vLLM leaves them to whoever computed them).
        self._computed_from: dict[str, int] = {}
        self._held: dict[str, list[bytes]] = {}

    # ------------------------------------------------------------------ trace
    def _manager_call(self, _text: str) -> None:
        call = self.proxy.ledger.calls[-1]
        fields = {"keys": list(call.keys)} if call.keys else {}
        self.trace.call(call.step, "manager", call.method, call.request_id, **fields)

    def enter(self, name: str, args: tuple[Any, ...]) -> None:
        if name == "build_connector_meta":
            self.step += 1
            output = args[0]
            scheduled = sorted(output.num_scheduled_tokens)
            self.trace.call(self.step, "scheduler", name, scheduled=scheduled,
                            finished=sorted(output.finished_req_ids or ()),
                            preempted=sorted(getattr(output, "preempted_req_ids", None) or ()))
            return
        if name == "update_connector_output":
            output = args[0]
            meta = getattr(output, "kv_connector_worker_meta", None)
            reported = len(getattr(meta, "completed_jobs", None) or ()) + len(output.finished_recving or ())
            self.trace.call(self.step, "scheduler", name, reported=reported)
            return
        if name == "reset_cache":
            self.trace.call(self.step, "scheduler", name)
            return
        request = args[0]
        fields: dict[str, Any] = {}
        if name == "get_num_new_matched_tokens":
            self._local_tokens[request.request_id] = int(args[1])
            fields["local_tokens"] = int(args[1])
        elif name == "update_state_after_alloc":
            external = int(args[2])
            local = self._local_tokens.pop(request.request_id, 0)
            rid = request.request_id
            self._computed_from[rid] = max(self._computed_from.get(rid, 0), local + external)
            fields["external_tokens"] = external
        elif name in ("request_finished", "request_finished_all_groups"):
            name = "request_finished"
            self._held[request.request_id] = self._computed_keys(request)
            fields["status"] = request.status.name
            fields["computed_tokens"] = int(request.num_computed_tokens)
        self.trace.call(self.step, "scheduler", name, request.request_id, **fields)

    def collect(self) -> None:
        violations = self.proxy.ledger.violations
        for violation in violations[self._seen:]:
            self.findings.add(violation.invariant, violation.message)
        self._seen = len(violations)
        if not self._leaks():
            self.drain_report("idle")

    # ------------------------------------------------------------------ owed chunks
    def _computed_keys(self, request: Any) -> list[bytes]:
        from vllm.v1.kv_offload.base import make_offload_key

        if self.blocks_per_chunk != 1:
            return []  # owed chunks are tracked for one engine block per chunk only
        end = int(request.num_computed_tokens)
        if self.prompt_only:
            end = min(end, int(request.num_prompt_tokens))
        first = -(-self._computed_from.get(request.request_id, 0) // self.tokens_per_block)
        last = min(end // self.tokens_per_block, len(request.block_hashes))
        return [make_offload_key(request.block_hashes[i], 0) for i in range(first, last)]

    def _owed(self, request_id: str) -> list[bytes]:
        return self._held.pop(request_id, [])

    # ------------------------------------------------------------------ drain
    def _leaks(self) -> list[str]:
        scheduler = self.connector.connector_scheduler
        leaks = [f"connector still tracks request {rid!r}" for rid in self.reads.tracked_requests(scheduler)]
        leaks += [f"connector still has job {job}" for job in self.reads.jobs_in_flight(scheduler)]
        leaks += [f"cache reset still waits for job {job}" for job in self.reads.reset_jobs_pending(scheduler)]
        if self.proxy.inner.has_pending_work():
            leaks.append("manager.has_pending_work() is still True")
        return leaks

    def drain_report(self, when: str) -> None:
        """The drain-time checks now, to ``drain.json`` (``when``: "idle" or "shutdown")."""
        found = [{"invariant": "NoLeak", "message": leak} for leak in self._leaks()]
        found += [{"invariant": v.invariant, "message": v.message} for v in self.proxy.drain_violations()]
        write_drain(self.drain_path, self.trace.seq, self.step, when, found)


class LiveCheckConnector(OffloadingConnector):
    """vLLM's ``OffloadingConnector``, every scheduler-side call recorded and checked."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config, *args, **kwargs)
        self._live: _SchedulerRecorder | None = None
        if self.connector_scheduler is not None:
            folder = Path(vllm_config.kv_transfer_config.kv_connector_extra_config["live_check_dir"])
            self._live = _SchedulerRecorder(self, folder, vllm_config)

    on_new_request = _recorded(OffloadingConnector.on_new_request)
    get_num_new_matched_tokens = _recorded(OffloadingConnector.get_num_new_matched_tokens)
    update_state_after_alloc = _recorded(OffloadingConnector.update_state_after_alloc)
    build_connector_meta = _recorded(OffloadingConnector.build_connector_meta)
    update_connector_output = _recorded(OffloadingConnector.update_connector_output)
    request_finished = _recorded(OffloadingConnector.request_finished)
    request_finished_all_groups = _recorded(OffloadingConnector.request_finished_all_groups)
    reset_cache = _recorded(OffloadingConnector.reset_cache)

    def shutdown(self) -> None:
        if self._live is not None:
            self._live.drain_report("shutdown")
            self._live.trace.close()
        super().shutdown()
