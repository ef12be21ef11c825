"""The request offload lifecycle, as data (docs/design.md, "The request lifecycle").

The scheduler never assigns a state: it fires these triggers through the declared machine, so a
trigger fired from a state that does not accept it is an error naming the request, the state and
the trigger. The TLA+ spec (tla/KVOffload.tla) uses the same state names; a test cross-checks.

Rules that the table encodes:

- ``signal`` (tell the manager ``on_request_finished``) only leaves ``finished_pending_store``, and
  only ``build_connector_meta`` fires it, after that step's store jobs are built; so the manager
  always hears about a finish after the request's final store was prepared.
- ``clean`` (drop all state) and ``resume`` (re-admit a preempted request) are guarded by
  ``no_jobs_in_flight``: nothing is dropped or re-used while a transfer may still touch its blocks.
- ``reset`` (reset_cache) sends live requests back to ``waiting``; finished ones are signaled (if
  not yet) and cleaned by the ordinary ``signal`` and ``clean`` triggers, so "exactly once" holds.
- The engine's calls are triggers too, where they change no state: ``lookup`` only for a waiting
  request (a preempted one is resumed first), ``realloc`` (the engine allocates again once a loaded
  request is scheduled) only for a running one, and ``preempt`` of a waiting request (tracked as
  waiting after reset_cache, nothing in flight) leaves it waiting.
"""

from __future__ import annotations

from kvoffload.statemachine.declaration import GuardDecl, LifecycleDeclaration, StateDecl, TransitionDecl

WAITING = "waiting"
LOADING = "loading"
RUNNING = "running"
PREEMPTED = "preempted"
FINISHED_PENDING_STORE = "finished_pending_store"
SIGNALED = "signaled"
CLEANED = "cleaned"

LIVE_STATES: frozenset[str] = frozenset({WAITING, LOADING, RUNNING, PREEMPTED})
# Finished, not yet cleaned: the engine may still report such a request (a late preemption).
FINISHED_STATES: frozenset[str] = frozenset({FINISHED_PENDING_STORE, SIGNALED})

NO_JOBS_IN_FLIGHT = "no_jobs_in_flight"

REQUEST_LIFECYCLE = LifecycleDeclaration(
    name="request",
    states=(
        StateDecl(WAITING, "tracked by the connector; nothing in flight; a lookup may be issued"),
        StateDecl(LOADING, "exactly one load job (CPU -> GPU) in flight"),
        StateDecl(RUNNING, "scheduled by the engine; zero or more store jobs (GPU -> CPU) in flight"),
        StateDecl(PREEMPTED, "GPU blocks taken back; in-flight stores flushed; re-admitted once drained"),
        StateDecl(FINISHED_PENDING_STORE, "finished or aborted; final stores not built; manager not told"),
        StateDecl(SIGNALED, "final stores built; on_request_finished called once; jobs may still drain"),
        StateDecl(CLEANED, "all state dropped"),
    ),
    initial=WAITING,
    terminal=frozenset({CLEANED}),
    guards={
        NO_JOBS_IN_FLIGHT: GuardDecl(
            "the request has no load or store job in flight", variable="jobs_in_flight", op="==", value=0
        )
    },
    transitions=(
        TransitionDecl("lookup", (WAITING,), WAITING, doc="get_num_new_matched_tokens: what the CPU tier holds"),
        TransitionDecl("schedule", (WAITING,), RUNNING, doc="scheduled with nothing to load"),
        TransitionDecl("load", (WAITING,), LOADING, doc="a load job of offloaded chunks was prepared"),
        TransitionDecl("load_done", (LOADING,), RUNNING, doc="the load job completed or failed"),
        TransitionDecl(
            "realloc", (RUNNING,), RUNNING, doc="update_state_after_alloc again once a loaded request is scheduled"
        ),
        TransitionDecl("preempt", (RUNNING,), PREEMPTED, doc="the engine took the GPU blocks back"),
        TransitionDecl(
            "preempt", (WAITING,), WAITING, doc="after reset_cache: nothing in flight, nothing to undo"
        ),
        TransitionDecl(
            "resume", (PREEMPTED,), WAITING, guard=NO_JOBS_IN_FLIGHT, doc="re-admitted after draining"
        ),
        TransitionDecl(
            "finish",
            (WAITING, LOADING, RUNNING, PREEMPTED),
            FINISHED_PENDING_STORE,
            doc="request_finished: finished or aborted; only recorded",
        ),
        TransitionDecl(
            "signal",
            (FINISHED_PENDING_STORE,),
            SIGNALED,
            doc="build_connector_meta built the final stores, then told the manager",
        ),
        TransitionDecl("clean", (SIGNALED,), CLEANED, guard=NO_JOBS_IN_FLIGHT, doc="drop all state"),
        TransitionDecl(
            "reset", (WAITING, LOADING, RUNNING, PREEMPTED), WAITING, doc="reset_cache: start over"
        ),
    ),
)
