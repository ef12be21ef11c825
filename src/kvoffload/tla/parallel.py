"""Successor generation in worker processes, for a search whose counts equal the sequential one.

The checker hands a batch of queued states (in queue order) to :func:`generate`; the batch is cut
into contiguous chunks, one per process (the calling process takes the first, forked children the
rest: they share the compiled model copy-on-write). Each state's successors come back as
``(label, successor)`` pairs in generation order, so the checker then processes them exactly as it
would have generated them itself: same order, same counters, same first violation. A failure while
generating (an evaluation error, a successor that leaves a variable unassigned) is recorded after
the successors generated before it and re-raised by :func:`replay` at the same point.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator, Sequence
from typing import Any

from .syntax import EMPTY, UNSET, Ctx, Gen
from .values import Value

State = tuple[Value, ...]
# Per state: (SUCCESSOR, label, state) items, then optionally (UNASSIGNED, label, variable index)
# or (FAILED, exception, None).
Successors = list[tuple[int, Any, Any]]
SUCCESSOR, UNASSIGNED, FAILED = 0, 1, 2


def _expand(nxt: Gen, states: Sequence[State], ids: Sequence[int], nv: int) -> list[Successors]:
    out: list[Successors] = []
    for i in ids:
        c = Ctx(states[i], [UNSET] * nv)
        found: Successors = []
        try:
            for lab in nxt(c, EMPTY):
                n = c.n
                assert n is not None
                if any(v is UNSET for v in n):
                    found.append((UNASSIGNED, lab, next(k for k, v in enumerate(n) if v is UNSET)))
                    break
                found.append((SUCCESSOR, lab, tuple(n)))
        except Exception as exc:  # re-raised by replay() in the checker, at this state
            found.append((FAILED, exc, None))
        out.append(found)
    return out


def generate(nxt: Gen, states: Sequence[State], ids: list[int], nv: int, workers: int) -> dict[int, Successors]:
    """The successors of the states ``ids``, computed by ``workers`` processes."""
    size = -(-len(ids) // workers)
    chunks = [ids[k:k + size] for k in range(0, len(ids), size)]
    children: list[tuple[int, int]] = []
    for chunk in chunks[1:]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: expand, send, exit without running the parent's cleanup
            os.close(read)
            try:
                data = pickle.dumps(_expand(nxt, states, chunk, nv), protocol=pickle.HIGHEST_PROTOCOL)
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(data)
            finally:
                os._exit(0)
        os.close(write)
        children.append((pid, read))
    results = _expand(nxt, states, chunks[0], nv)
    for pid, read in children:
        with os.fdopen(read, "rb") as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
        if not data:
            raise RuntimeError("a successor-generation worker process died")
        results += pickle.loads(data)
    return dict(zip(ids, results, strict=True))


def replay(n: list[Value], found: Successors) -> Iterator[str | None]:
    """Yield the recorded successors of one state like the action generator would, setting the
    next-state list ``n`` to each; re-raise a recorded failure where it happened."""
    for kind, a, b in found:
        if kind == FAILED:
            raise a
        if kind == UNASSIGNED:
            n[:] = [None] * len(n)
            n[b] = UNSET  # the checker names the first unassigned variable
            yield a
            return
        n[:] = b
        yield a
