"""A recording proxy around a vLLM ``OffloadingManager`` that checks the manager contract on every call.

The connector scheduler holds the manager in its public ``manager`` attribute; the proxy replaces
it and forwards every call unchanged (it never raises and never changes an answer), recording:

- ``NoManagerCallAfterSignal``: ``lookup``, ``get_load_source``, ``prepare_load``, ``touch`` or
  ``prepare_store`` for a request after ``on_request_finished`` for it (completions of jobs still
  in flight are allowed: they drain after the signal);
- ``SignalExactlyOnce``: a second ``on_request_finished``, or (after the drain) a request never
  signaled;
- ``SignalAfterFinalStore``: a chunk the finished request computed and still held was never offered
  to ``prepare_store`` nor found by its ``lookup`` (owed chunks are settled by a later
  ``prepare_store`` or a ``reset_cache``,
  and reported after the drain);
- ``NoEvictWhileInUse``: ``prepare_store`` evicting a key pinned by an unfinished load or store, or
  handing out a CPU block such a key still occupies;
- ``NoLeak``: after the drain, keys still pinned.

The keys of vLLM are bytes; the proxy names them by a short index of first appearance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kvoffload.lifecycles.invariants import Violation

PER_REQUEST_QUERIES = frozenset({"lookup", "get_load_source", "prepare_load", "touch", "prepare_store"})


@dataclass
class ManagerCall:
    """One call the connector made: the engine step, the method, the request, the keys."""

    step: int
    method: str
    request_id: str | None
    keys: tuple[str, ...] = ()

    def __str__(self) -> str:
        keys = f" [{', '.join(self.keys)}]" if self.keys else ""
        who = f"({self.request_id})" if self.request_id else "()"
        return f"manager.{self.method}{who}{keys}"


@dataclass
class _Pin:
    request_id: str
    kind: str  # "load" or "store"
    block: int | None


@dataclass
class ContractLedger:
    """What the proxy learned: calls, signals, pins, owed chunks and the violations found."""

    calls: list[ManagerCall] = field(default_factory=list)
    known: set[str] = field(default_factory=set)
    signals: dict[str, int] = field(default_factory=dict)
    offered: dict[str, set[bytes]] = field(default_factory=dict)
    owed: dict[str, set[bytes]] = field(default_factory=dict)
    pins: dict[bytes, list[_Pin]] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    key_names: dict[bytes, str] = field(default_factory=dict)


def _block_ids(spec: Any) -> list[int] | None:
    ids = getattr(spec, "block_ids", None)
    return None if ids is None else [int(b) for b in ids]


class RecordingManager:
    """Forwards to ``inner``; ``step`` tells the engine step, ``expected_keys(request_id)`` the keys of
    the chunks a finished request computed and still held (its final stores must cover them)."""

    def __init__(
        self,
        inner: Any,
        step: Callable[[], int],
        expected_keys: Callable[[str], Iterable[bytes]],
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._inner = inner
        self._log = log
        # Where the proxy saw each key stored (prepare_store), and each CPU block's key: a load
        # from another block means a secondary tier promoted the key into the primary tier.
        self.block_of: dict[bytes, int] = {}
        self.key_of: dict[int, bytes] = {}
        self.on_promotion: Callable[[bytes, int], None] | None = None
        # Keys a lookup answered "pending" / "retry" for: a secondary tier is bringing them back.
        self.promoting: set[bytes] = set()
        self._step = step
        self._expected_keys = expected_keys
        self.ledger = ContractLedger()

    # ------------------------------------------------------------------ plumbing
    def __getattr__(self, name: str) -> Any:
        # Only public attributes are forwarded: copy and pickle probe dunder names on an instance
        # whose _inner is not set yet.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    @property
    def inner(self) -> Any:
        return self._inner

    def key_name(self, key: bytes) -> str:
        names = self.ledger.key_names
        if key not in names:
            names[key] = f"k{len(names)}"
        return names[key]

    def _record(self, method: str, request_id: str | None, keys: Iterable[bytes] = ()) -> None:
        ledger = self.ledger
        call = ManagerCall(self._step(), method, request_id, tuple(self.key_name(k) for k in keys))
        ledger.calls.append(call)
        if self._log is not None:
            self._log(str(call))
        if request_id is not None and method in PER_REQUEST_QUERIES and ledger.signals.get(request_id):
            self._violate(
                "NoManagerCallAfterSignal",
                f"manager.{method} for request {request_id!r} after on_request_finished told the manager it finished",
            )

    def _violate(self, invariant: str, message: str) -> None:
        self.ledger.violations.append(Violation(invariant, f"step {self._step()}: {message}"))

    def _pin(self, keys: list[bytes], request_id: str, kind: str, blocks: list[int] | None) -> None:
        for index, key in enumerate(keys):
            block = blocks[index] if blocks is not None and index < len(blocks) else None
            self.ledger.pins.setdefault(key, []).append(_Pin(request_id, kind, block))

    def _unpin(self, keys: Iterable[bytes], request_id: str, kind: str) -> None:
        for key in keys:
            pins = self.ledger.pins.get(key, [])
            for pin in pins:
                if pin.request_id == request_id and pin.kind == kind:
                    pins.remove(pin)
                    break
            if not pins:
                self.ledger.pins.pop(key, None)

    # ------------------------------------------------------------------ per-request calls
    def on_new_request(self, req_context: Any) -> Any:
        self._record("on_new_request", req_context.req_id)
        self.ledger.known.add(req_context.req_id)
        return self._inner.on_new_request(req_context)

    def lookup(self, key: bytes, req_context: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("lookup", req_context.req_id, [key])
        result = self._inner.lookup(key, req_context, *args, **kwargs)
        name = getattr(result, "name", None)
        if name in ("HIT_PENDING", "RETRY"):
            self.promoting.add(key)
        elif name == "HIT" or (name is None and result):
            # Already offloaded: the request need not store it again.
            self.ledger.offered.setdefault(req_context.req_id, set()).add(key)
        return result

    def get_load_source(self, key: bytes, req_context: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("get_load_source", req_context.req_id, [key])
        return self._inner.get_load_source(key, req_context, *args, **kwargs)

    def touch(self, keys: Any, req_context: Any, *args: Any, **kwargs: Any) -> Any:
        self._record("touch", req_context.req_id, list(keys))
        return self._inner.touch(keys, req_context, *args, **kwargs)

    def prepare_load(self, keys: Any, req_context: Any, *args: Any, **kwargs: Any) -> Any:
        keys = list(keys)
        self._record("prepare_load", req_context.req_id, keys)
        spec = self._inner.prepare_load(keys, req_context, *args, **kwargs)
        blocks = _block_ids(spec)
        self._pin(keys, req_context.req_id, "load", blocks)
        for key, block in zip(keys, blocks or (), strict=False):
            if self.block_of.get(key) != block or key in self.promoting:
                self.promoting.discard(key)
                self._place(key, block)
                if self.on_promotion is not None:
                    self.on_promotion(key, block)
        return spec

    def _place(self, key: bytes, block: int) -> None:
        self.block_of[key] = block
        self.key_of[block] = key

    def complete_load(self, keys: Any, req_context: Any, *args: Any, **kwargs: Any) -> Any:
        keys = list(keys)
        self._record("complete_load", req_context.req_id, keys)
        self._unpin(keys, req_context.req_id, "load")
        return self._inner.complete_load(keys, req_context, *args, **kwargs)

    def prepare_store(self, keys: Any, req_context: Any, *args: Any, **kwargs: Any) -> Any:
        keys = list(keys)
        request_id = req_context.req_id
        self._record("prepare_store", request_id, keys)
        self.ledger.offered.setdefault(request_id, set()).update(keys)
        owed = self.ledger.owed.get(request_id)
        if owed:
            owed.difference_update(keys)
        output = self._inner.prepare_store(keys, req_context, *args, **kwargs)
        if output is not None:
            self._check_store_output(request_id, list(output.keys_to_store), output)
        return output

    def complete_store(self, keys: Any, req_context: Any, *args: Any, **kwargs: Any) -> Any:
        keys = list(keys)
        self._record("complete_store", req_context.req_id, keys)
        self._unpin(keys, req_context.req_id, "store")
        return self._inner.complete_store(keys, req_context, *args, **kwargs)

    def on_request_finished(self, req_context: Any) -> Any:
        request_id = req_context.req_id
        self._record("on_request_finished", request_id)
        ledger = self.ledger
        ledger.signals[request_id] = ledger.signals.get(request_id, 0) + 1
        if ledger.signals[request_id] > 1:
            self._violate("SignalExactlyOnce", f"on_request_finished for request {request_id!r} a second time")
        else:
            owed = set(self._expected_keys(request_id)) - ledger.offered.get(request_id, set())
            if owed:
                ledger.owed[request_id] = owed
        return self._inner.on_request_finished(req_context)

    def reset_cache(self, *args: Any, **kwargs: Any) -> Any:
        self._record("reset_cache", None)
        # Everything offloaded is dropped: no store is owed, and pins of flushed jobs are void
        # (their completions are stale and never reach the manager).
        self.ledger.owed.clear()
        self.ledger.pins.clear()
        self.block_of.clear()
        self.key_of.clear()
        return self._inner.reset_cache(*args, **kwargs)

    # ------------------------------------------------------------------ checks
    def _check_store_output(self, request_id: str, keys_to_store: list[bytes], output: Any) -> None:
        pins = self.ledger.pins
        for key in getattr(output, "evicted_keys", None) or ():
            self.block_of.pop(key, None)
            if pins.get(key):
                users = ", ".join(f"{p.kind} of {p.request_id!r}" for p in pins[key])
                self._violate(
                    "NoEvictWhileInUse",
                    f"prepare_store for {request_id!r} evicted key {self.key_name(key)} while a {users} still uses it",
                )
        blocks = _block_ids(getattr(output, "store_spec", None))
        in_use = {pin.block: (key, pin) for key, key_pins in pins.items() for pin in key_pins if pin.block is not None}
        for index, key in enumerate(keys_to_store):
            block = blocks[index] if blocks is not None and index < len(blocks) else None
            holder = in_use.get(block)
            if holder is not None and holder[0] != key:
                other, pin = holder
                self._violate(
                    "NoEvictWhileInUse",
                    f"prepare_store for {request_id!r} hands CPU block {block} to key {self.key_name(key)} while the "
                    f"{pin.kind} of {pin.request_id!r} still uses it for key {self.key_name(other)}",
                )
        self._pin(keys_to_store, request_id, "store", blocks)
        for key, block in zip(keys_to_store, blocks or (), strict=False):
            self._place(key, block)

    def drain_violations(self) -> list[Violation]:
        """What must hold once every request finished and every job drained."""
        ledger = self.ledger
        found = [
            Violation("SignalExactlyOnce", f"request {rid!r} was never signaled (on_request_finished)")
            for rid in sorted(ledger.known)
            if not ledger.signals.get(rid)
        ]
        found += [
            Violation(
                "SignalAfterFinalStore",
                f"request {rid!r} was signaled before chunk(s) {sorted(self.key_name(k) for k in keys)} it computed "
                "were offered to prepare_store, and they never were",
            )
            for rid, keys in sorted(ledger.owed.items())
            if keys
        ]
        found += [
            Violation("NoLeak", f"key {self.key_name(key)} still pinned by " + ", ".join(
                f"{p.kind} of {p.request_id!r}" for p in pins))
            for key, pins in ledger.pins.items()
            if pins
        ]
        return found
