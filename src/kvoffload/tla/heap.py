"""Python's cyclic garbage collector during a search.

A search keeps every state it finds, and its evaluation makes short-lived reference cycles (a LET
binding holds a thunk that holds the bindings). With the collector's default pacing, each older-
generation collection walks all the stored states again: about 40% of a search's time. While
:class:`SearchHeap` is active, automatic collection is off; every few hundred expanded states the
checker calls :meth:`SearchHeap.step`, which collects the garbage made since the previous step and
then freezes the survivors (the stored states, mostly), so that no later collection walks them
again. The liveness pass runs with the collector back on and the search's states still frozen.
"""

from __future__ import annotations

import gc
from types import TracebackType


class SearchHeap:
    """Collector pacing for one check (a context manager; see the module docstring)."""

    def __init__(self) -> None:
        self.was_enabled = gc.isenabled()

    def __enter__(self) -> SearchHeap:
        self.was_enabled = gc.isenabled()
        gc.disable()
        return self

    def step(self) -> None:
        """Collect the cycles made since the last step, then exempt the survivors from later
        collections."""
        gc.collect()
        gc.freeze()

    def searched(self) -> None:
        """The search is over: automatic collection resumes (the stored states stay frozen)."""
        self.step()
        if self.was_enabled:
            gc.enable()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        gc.unfreeze()
        if self.was_enabled:
            gc.enable()
        else:
            gc.disable()
