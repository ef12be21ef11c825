"""The transfer job lifecycle, as data: the second machine of the same framework.

A job (one batched copy of whole chunks, ``TransferJob``) is built by the scheduler, handed to the
worker in one step's metadata, possibly flushed (the worker waits for it before GPU blocks it
reads are reused), and ends with exactly one reported outcome. ``reset_cache`` makes every job
that has not ended stale: its outcome is then ignored apart from unpinning its CPU blocks.

Rules that the table encodes (the scheduler fires these triggers through the declared machine,
so a report of a job in the wrong state raises, naming the job, its state and the trigger):

- ``prepare`` (the job is built) is guarded by ``request_not_signaled``: no job is built for a
  request the manager was already told about (SignalAfterFinalStore, NoManagerCallAfterSignal);
- ``complete`` and ``fail`` only leave ``submitted`` or ``flushed``: the worker reports only jobs
  it was handed, and each at most once (completed, failed and discarded are terminal);
- a ``stale`` job is flushed again by the next metadata and ``discard``-ed when its outcome, or
  its cancellation before the worker saw it, arrives.
"""

from __future__ import annotations

from kvoffload.statemachine.declaration import GuardDecl, LifecycleDeclaration, StateDecl, TransitionDecl

NEW = "new"
PREPARED = "prepared"
SUBMITTED = "submitted"
FLUSHED = "flushed"
STALE = "stale"
COMPLETED = "completed"
FAILED = "failed"
DISCARDED = "discarded"

REQUEST_NOT_SIGNALED = "request_not_signaled"

JOB_LIFECYCLE = LifecycleDeclaration(
    name="job",
    states=(
        StateDecl(NEW, "the record exists; nothing reserved yet"),
        StateDecl(PREPARED, "CPU blocks reserved (prepare_store) or pinned (prepare_load); not handed to the worker"),
        StateDecl(SUBMITTED, "handed to the worker in a step's metadata; copying"),
        StateDecl(FLUSHED, "the worker was told to wait for it; its outcome is not reported yet"),
        StateDecl(STALE, "reset_cache came first: flushed, and its outcome will be ignored"),
        StateDecl(COMPLETED, "reported done"),
        StateDecl(FAILED, "reported failed"),
        StateDecl(DISCARDED, "a stale job's outcome (or its cancellation) arrived"),
    ),
    initial=NEW,
    terminal=frozenset({COMPLETED, FAILED, DISCARDED}),
    guards={
        REQUEST_NOT_SIGNALED: GuardDecl(
            "the job's request was not signaled yet: the manager still knows it",
            variable="request_signals", op="==", value=0,
        )
    },
    transitions=(
        TransitionDecl("prepare", (NEW,), PREPARED, guard=REQUEST_NOT_SIGNALED, doc="the job was built"),
        TransitionDecl("submit", (PREPARED,), SUBMITTED, doc="build_connector_meta handed it to the worker"),
        TransitionDecl("flush", (SUBMITTED,), FLUSHED, doc="preemption or the GPU block fence"),
        TransitionDecl("flush", (STALE,), STALE, doc="the metadata after reset_cache waits for it"),
        TransitionDecl("complete", (SUBMITTED, FLUSHED), COMPLETED, doc="the worker reported it done"),
        TransitionDecl("fail", (SUBMITTED, FLUSHED), FAILED, doc="the worker reported it failed"),
        TransitionDecl("reset", (PREPARED, SUBMITTED, FLUSHED), STALE, doc="reset_cache"),
        TransitionDecl("discard", (STALE,), DISCARDED, doc="its outcome arrived, or it was cancelled unsubmitted"),
    ),
)
