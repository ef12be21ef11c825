"""Errors of the offloading system."""

from __future__ import annotations


class LifecycleViolation(RuntimeError):
    """A call that breaks the lifecycle contract between the scheduler and the manager.

    ``invariant`` is the name (as in lifecycles/invariants.py and tla/) of the rule the call would break,
    so checkers report it the same way whether the manager or an invariant caught it.
    """

    def __init__(self, invariant: str, request_id: object, call: str, state: str, detail: str = ""):
        self.invariant = invariant
        self.request_id = request_id
        self.call = call
        self.state = state
        message = f"{invariant}: {call}() for request {request_id!r} in state {state!r}"
        super().__init__(f"{message}: {detail}" if detail else message)

