"""Python's cyclic garbage collector during a search.

A search keeps every state it finds. With the collector's default pacing, each older-generation
collection walks all the stored states again: about 40% of the CPU time of KVOffload.cfg. While
:class:`SearchHeap` is active, the checker calls :meth:`SearchHeap.step` every few hundred states,
which freezes (``gc.freeze``) everything alive at that moment, the stored states above all, so
that no later collection walks them again. The young collections keep running as usual: the
short-lived reference cycles of evaluation (a LET binding holds a thunk that holds the bindings)
are freed while their memory is still in cache. A cycle that dies after surviving the young
collections stays frozen until the check ends (:meth:`SearchHeap.__exit__` unfreezes).
"""

from __future__ import annotations

import gc
from types import TracebackType


class SearchHeap:
    """Collector pacing for one check (a context manager; see the module docstring)."""

    def __enter__(self) -> SearchHeap:
        return self

    def step(self) -> None:
        """Exempt every object alive now from later collections."""
        gc.freeze()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        gc.unfreeze()
