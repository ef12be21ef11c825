"""kvoffload's strict CPUOffloadingManager behind vLLM's ``OffloadingManager`` interface.

Translated: keys (vLLM bytes <-> kvoffload ints, :mod:`kvoffload.vllm.keys`), requests (vLLM's
``ReqContext`` -> its request id), lookup results (a ready key is ``HIT``, anything else
``MISS``: a key still being written is not loadable, and vLLM recomputes it), store plans (CPU
block ids -> ``CPULoadStoreSpec``) and events (``OffloadEvent`` -> ``OffloadingEvent``).

Strict: every call the kvoffload manager refuses (a lookup after ``on_request_finished``, a
completion it never handed out, ...) is recorded in :attr:`StrictManagerAdapter.violations` and
re-raised, so the engine stops instead of serving wrong KV.

One place where vLLM's protocol differs from kvoffload's: vLLM's ``reset_cache`` resets the
manager while transfers are still in flight and never reports their completions (it flushes them
on the next step, before any new transfer starts). kvoffload's manager refuses a reset with
transfers in flight, so the adapter first completes them itself: loads as done, stores as failed
(their blocks are freed, never loadable). Safe because the flush runs before any new job could
reuse those CPU blocks.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from vllm.v1.kv_offload.base import (
    LoadStoreSpec,
    LookupResult,
    Medium,
    OffloadingEvent,
    OffloadingManager,
    OffloadKey,
    PrepareStoreOutput,
    ReqContext,
    RequestOffloadingContext,
)
from vllm.v1.kv_offload.cpu.common import CPULoadStoreSpec

from kvoffload.offload.errors import LifecycleViolation
from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.types import NO_CONTEXT
from kvoffload.vllm.keys import KeyCodec
from kvoffload.vllm.metrics import CounterDeltas, spec_counters


class StrictManagerAdapter(OffloadingManager):
    """vLLM's scheduler-side manager, backed by kvoffload's :class:`CPUOffloadingManager`.

    ``chunk_tokens`` is the token span of one offloaded chunk; it lets the adapter tell the
    kvoffload policies each stored chunk's parent (the chunk before it in the same prefix).
    """

    def __init__(self, manager: CPUOffloadingManager, chunk_tokens: int, policy_name: str = "") -> None:
        self.manager = manager
        self.chunk_tokens = chunk_tokens
        # The eviction policy's configured name: the label of the policy's counters in /metrics.
        self.policy_name = policy_name or "unknown"
        self._metric_deltas = CounterDeltas()
        self.codec = KeyCodec()
        self.violations: list[str] = []
        # Per active request: chunk end position (tokens) -> key, for the parent of a store.
        self._positions: dict[str, dict[int, int]] = {}

    # ------------------------------------------------------------------ translation
    def _keys(self, keys: Iterable[OffloadKey], context: ReqContext) -> list[int]:
        positions = self._positions.get(context.req_id)
        out = []
        for key in keys:
            as_int = self.codec.to_int(key)
            out.append(as_int)
            end = context.get_offload_key_position(key)
            if positions is not None and end is not None:
                positions[end] = as_int
        return out

    def _parent(self, first: OffloadKey, context: ReqContext) -> int | None:
        end = context.get_offload_key_position(first)
        positions = self._positions.get(context.req_id, {})
        return None if end is None else positions.get(end - self.chunk_tokens)

    def _strict(self, call: str, function: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except LifecycleViolation as violation:
            self.violations.append(f"{call}: {violation}")
            raise

    def get_stats(self) -> Any:
        """vLLM's ``OffloadingConnectorStats`` with the increase, since the last call, of what
        kvoffload adds to vLLM's counters (admissions, rejections and evictions by policy, each
        secondary tier's counters, violations); None when nothing changed. vLLM's OffloadingConnector
        calls it after every step and registers the names from ``KVOffloadSpec.build_metric_definitions``."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats

        tiers = getattr(self, "tiers", None)
        io = getattr(self, "io", None)
        counters = spec_counters(
            self.manager.stats,
            self.policy_name,
            len(self.violations),
            tiers.tier_stats if tiers is not None else None,
            io.stats() if io is not None else (),
        )
        increases = self._metric_deltas.take(counters)
        if not increases:
            return None
        stats = OffloadingConnectorStats()
        for (name, labelvalues), value in increases.items():
            stats.increase_counter(name, value, labelvalues)
        return stats

    # ------------------------------------------------------------------ requests
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        # vLLM's ReqContext carries no cache salt: tenants are kept apart by the salt vLLM mixes
        # into the first block hash, in every tier (docs/design.md, the spec's tiers).
        self._strict("on_new_request", self.manager.on_new_request, req_context.req_id, NO_CONTEXT)
        self._positions[req_context.req_id] = {}
        return RequestOffloadingContext()

    def on_request_finished(self, req_context: ReqContext) -> None:
        self._positions.pop(req_context.req_id, None)
        self._strict("on_request_finished", self.manager.on_request_finished, req_context.req_id)

    # ------------------------------------------------------------------ loads
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        keys = self._keys((key,), req_context)
        hits = self._strict("lookup", self.manager.lookup, req_context.req_id, keys)
        return LookupResult.HIT if hits else LookupResult.MISS

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        self._strict("touch", self.manager.touch, req_context.req_id, self._keys(keys, req_context))

    def prepare_load(self, keys: Collection[OffloadKey], req_context: ReqContext) -> LoadStoreSpec:
        int_keys = self._keys(keys, req_context)
        block_ids = self._strict("prepare_load", self.manager.prepare_load, req_context.req_id, int_keys)
        return CPULoadStoreSpec(list(block_ids))

    def complete_load(self, keys: Collection[OffloadKey], req_context: ReqContext) -> None:
        int_keys = [self.codec.to_int(key) for key in keys]
        self._strict("complete_load", self.manager.complete_load, req_context.req_id, int_keys)

    # ------------------------------------------------------------------ stores
    def prepare_store(self, keys: Collection[OffloadKey], req_context: ReqContext) -> PrepareStoreOutput | None:
        ordered = list(keys)
        if not ordered:
            return PrepareStoreOutput([], CPULoadStoreSpec([]), [])
        parent = self._parent(ordered[0], req_context)
        int_keys = self._keys(ordered, req_context)
        plan = self._strict("prepare_store", self.manager.prepare_store, req_context.req_id, int_keys, parent)
        if plan is None:
            return None
        to_bytes = self.codec.to_bytes
        return PrepareStoreOutput(
            keys_to_store=[OffloadKey(to_bytes(k)) for k in plan.keys_to_store],
            store_spec=CPULoadStoreSpec(list(plan.cpu_block_ids)),
            evicted_keys=[OffloadKey(to_bytes(k)) for k in plan.evicted_keys],
        )

    def complete_store(self, keys: Collection[OffloadKey], req_context: ReqContext, success: bool = True) -> None:
        int_keys = [self.codec.to_int(key) for key in keys]
        self._strict("complete_store", self.manager.complete_store, req_context.req_id, int_keys, success)

    # ------------------------------------------------------------------ housekeeping
    def take_events(self) -> Iterable[OffloadingEvent]:
        to_bytes = self.codec.to_bytes
        for event in self.manager.take_events():
            yield OffloadingEvent(
                keys=[OffloadKey(to_bytes(k)) for k in event.keys], medium=Medium.CPU, removed=event.removed
            )

    def reset_cache(self) -> None:
        for request_id, record in self.manager.requests_in_flight().items():
            loading = [key for key, count in record.loading.items() for _ in range(count)]
            if loading:
                self._strict("reset_cache", self.manager.complete_load, request_id, loading)
            for key, count in list(record.storing.items()):
                for _ in range(count):
                    self._strict("reset_cache", self.manager.complete_store, request_id, [key], False)
        self._strict("reset_cache", self.manager.reset_cache)

    def leaks(self) -> list[str]:
        """What the kvoffload manager still holds that it should not once the engine drained."""
        return self.manager.leaks()
