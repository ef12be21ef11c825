"""Successor generation in worker processes, for a search whose counts equal the sequential one.

The checker hands runs of queued states to :func:`generate`, which forks a child for each; the
children share the compiled model, the stored states and the fingerprint table copy-on-write, and
several run at once while the checker goes on with the states before theirs. A child expands each
state of its run and sends back, per state and in generation order, one small record per
successor, so that the checker processes them exactly as it would have generated them itself:
same order, same counters, same first violation.

Most successors were found before the batch was cut: the child sends their index only (``KNOWN``,
after checking the implied actions on the step). An out-of-model successor whose invariants hold
is only counted (``OUTSIDE``). Every other successor comes back whole (``FULL``) with its
fingerprint key and whether its invariants hold, and the checker runs its usual per-successor
logic on it. A failure while generating (an evaluation error, a successor that leaves a variable
unassigned) is recorded after the successors generated before it and re-raised at the same point.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from typing import Any

from .syntax import EMPTY, UNSET, Ctx, Gen
from .values import Value

State = tuple[Value, ...]
# Per state: records (KNOWN, label, index, suffix_ok), (OUTSIDE, label), (FULL, label, state, key,
# invariants_ok), then optionally (UNASSIGNED, label, variable index) or (FAILED, exception).
Successors = list[tuple[Any, ...]]
KNOWN, OUTSIDE, FULL, UNASSIGNED, FAILED = 0, 1, 2, 3, 4


class Expansion:
    """What a child needs to expand states like the checker (the checker's own tables)."""

    def __init__(
        self, nxt: Gen, states: Sequence[State], seen: dict[Any, int], nv: int,
        key: Callable[[State], Any] | None, in_model: Callable[[State, Ctx], bool] | None,
        invariants_hold: Callable[[State], bool], implied: list[tuple[str, Any, dict[str, Value]]],
        suffix: list[tuple[Any, dict[str, Value]]], memos: list[list[Any]],
    ) -> None:
        self.nxt, self.states, self.seen, self.nv = nxt, states, seen, nv
        self.key, self.in_model, self.invariants_hold = key, in_model, invariants_hold
        self.implied, self.suffix = implied, suffix
        # The checker's successor memos (for the liveness pass): a child's entries would be lost.
        self.memos = memos

    def expand(self, ids: Sequence[int]) -> list[Successors]:
        out: list[Successors] = []
        nv, nxt, seen, key, in_model = self.nv, self.nxt, self.seen, self.key, self.in_model
        implied, suffix, holds = self.implied, self.suffix, self.invariants_hold
        unset_id = id(UNSET)
        for i in ids:
            c = Ctx(self.states[i], [UNSET] * nv)
            found: Successors = []
            try:
                for lab in nxt(c, EMPTY):
                    n = c.n
                    assert n is not None
                    t = tuple(n)
                    if unset_id in map(id, t):
                        found.append((UNASSIGNED, lab, next(k for k, v in enumerate(t) if v is UNSET)))
                        break
                    try:
                        steps_ok = all(fn(c, env) is True for _name, fn, env in implied)
                        if in_model is not None and not in_model(t, c):
                            found.append((OUTSIDE, lab) if steps_ok and holds(t) else (FULL, lab, t, None, False))
                            continue
                        k = key(t) if key is not None else t
                        j = seen.get(k, -1)
                        if j >= 0 and steps_ok:
                            on_suffix = bool(suffix) and all(fn(c, env) is True for fn, env in suffix)
                            found.append((KNOWN, lab, j, on_suffix))
                        else:
                            found.append((FULL, lab, t, k if key is not None else None, j < 0 and holds(t)))
                    except Exception:
                        # The checker evaluates this successor again and reports the error in order.
                        found.append((FULL, lab, t, None, False))
            except Exception as exc:  # re-raised by replay() in the checker, at this state
                found.append((FAILED, exc))
            out.append(found)
        return out


class Batch:
    """The successor records of the states ``start .. end-1``, computed by one child process and
    read when the checker first needs them."""

    def __init__(self, start: int, end: int, pid: int, pipe: int) -> None:
        self.start, self.end, self.pid, self.pipe = start, end, pid, pipe
        self.records: list[Successors] | None = None

    def take(self, i: int) -> Successors:
        """The records of state ``i`` (waiting for the child the first time)."""
        if self.records is None:
            with os.fdopen(self.pipe, "rb") as pipe:
                data = pipe.read()
            os.waitpid(self.pid, 0)
            if not data:
                raise RuntimeError("a successor-generation worker process died")
            self.records = pickle.loads(data)
        return self.records[i - self.start]

    def close(self) -> None:
        """Stop and reap the child if its records were not read (the search stopped early)."""
        if self.records is None:
            os.close(self.pipe)  # the child's write fails, and it exits
            os.waitpid(self.pid, 0)
            self.records = []


def generate(expansion: Expansion, start: int, end: int) -> Batch:
    """Fork a child that expands the states ``start .. end-1``."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: expand, send, exit without running the parent's cleanup
        os.close(read)
        try:
            for box in expansion.memos:
                box[0] = None
            data = pickle.dumps(expansion.expand(range(start, end)), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write, "wb") as pipe:
                pipe.write(data)
        finally:
            os._exit(0)
    os.close(write)
    return Batch(start, end, pid, read)


def forked_map(fn: Callable[[Any], Any], items: Sequence[Any], workers: int) -> list[Any]:
    """``[fn(x) for x in items]`` with the items shared out over this process and ``workers - 1``
    forked children (each takes a contiguous share; results and exceptions come back pickled, and
    an exception is re-raised in item order)."""
    size = -(-len(items) // max(1, workers))
    shares = [list(range(k, min(k + size, len(items)))) for k in range(0, len(items), size)] if items else []
    children: list[tuple[int, int, list[int]]] = []
    for share in shares[1:]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                out: list[tuple[bool, Any]] = []
                for k in share:
                    try:
                        out.append((True, fn(items[k])))
                    except Exception as exc:
                        out.append((False, exc))
                        break
                data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(data)
            finally:
                os._exit(0)
        os.close(write)
        children.append((pid, read, share))
    results: list[Any] = []
    failure: Exception | None = None
    received: list[list[tuple[bool, Any]]] = []
    try:
        try:
            for k in shares[0] if shares else []:
                results.append(fn(items[k]))
        except Exception as exc:  # raised below, after the children are reaped
            failure = exc
        for pid, read, _share in children:
            with os.fdopen(read, "rb") as pipe:
                data = pipe.read()
            os.waitpid(pid, 0)
            received.append(pickle.loads(data) if data else [(False, RuntimeError("a worker process died"))])
        children = []
    finally:
        for pid, read, _share in children:  # interrupted: stop the children that are left
            os.close(read)
            os.waitpid(pid, 0)
    if failure is not None:
        raise failure
    for out in received:
        for ok, value in out:
            if not ok:
                raise value
            results.append(value)
    return results
