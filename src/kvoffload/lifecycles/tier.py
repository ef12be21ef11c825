"""The tier lifecycles, as data: a chunk's residency in a secondary tier, a promotion, a cascade
job and a request's tier state. Run by the same runtime as the request lifecycle
(:class:`kvoffload.statemachine.runtime.DeclaredMachine`) and drawn by ``kvoffload diagram``.

Rules the tables encode:

- A chunk being written to a tier (``writing``) is not readable; a chunk being read (``reading``)
  is never evicted: ``evict`` only leaves ``resident``.
- A read that fails its checksum or key check ends the chunk (``corrupt`` -> ``dropped``): it is
  never served and never read again.
- A promotion and a cascade job each report exactly one outcome: ``done`` or ``fail`` only leave
  the in-flight state; a second report is an illegal transition.
- A request's tier state is finalised (``finalise``) only after the deferred finish signal
  (``signal``) AND once no cascade or promotion of the request is in flight (guard
  ``no_tier_jobs``). Dropping it at the signal is the tiering form of vLLM #49635.
"""

from __future__ import annotations

from kvoffload.statemachine.declaration import LifecycleDeclaration, StateDecl, TransitionDecl

# Chunk residency in one secondary tier.
WRITING = "writing"
RESIDENT = "resident"
READING = "reading"
DROPPED = "dropped"

CHUNK_RESIDENCY = LifecycleDeclaration(
    name="tier_chunk",
    states=(
        StateDecl(WRITING, "a cascade job is writing the chunk into its slot; not readable yet"),
        StateDecl(RESIDENT, "written and checksummed; may be promoted or evicted"),
        StateDecl(READING, "a promotion is reading the chunk; never evicted"),
        StateDecl(DROPPED, "gone: evicted, failed write or failed check; its slot is free"),
    ),
    initial=WRITING,
    terminal=frozenset({DROPPED}),
    transitions=(
        TransitionDecl("written", (WRITING,), RESIDENT, doc="the cascade write completed"),
        TransitionDecl("write_failed", (WRITING,), DROPPED, doc="the cascade write failed"),
        TransitionDecl("read", (RESIDENT,), READING, doc="a promotion started reading the chunk"),
        TransitionDecl("read_done", (READING,), RESIDENT, doc="the bytes matched key and checksum"),
        TransitionDecl("corrupt", (READING,), DROPPED, doc="checksum/key mismatch or I/O error: never served"),
        TransitionDecl("evict", (RESIDENT,), DROPPED, doc="the tier's policy chose the chunk as victim"),
        TransitionDecl("reset", (RESIDENT,), DROPPED, doc="reset_cache dropped the tier's index"),
    ),
)

def _job_lifecycle(name: str, running: tuple[str, str], done: tuple[str, str], failed: str) -> LifecycleDeclaration:
    """A tier job: in flight, then exactly one outcome (``done`` or ``fail``)."""
    return LifecycleDeclaration(
        name=name,
        states=(StateDecl(*running), StateDecl(*done), StateDecl("failed", failed)),
        initial=running[0],
        terminal=frozenset({done[0], "failed"}),
        transitions=(TransitionDecl("done", (running[0],), done[0]), TransitionDecl("fail", (running[0],), "failed")),
    )


# A promotion: secondary tier -> CPU blocks of the primary tier.
PROMOTION = _job_lifecycle(
    "promotion",
    ("promoting", "CPU blocks allocated and write-pending; the tier read is in flight"),
    ("promoted", "some leading chunks verified and ready in CPU memory; the rest freed"),
    "nothing usable (miss, I/O error, bad checksum): blocks freed, the request recomputes",
)

# A cascade job: CPU blocks (pinned) -> one secondary tier.
CASCADE = _job_lifecycle(
    "cascade",
    ("cascading", "source CPU blocks pinned (not evictable); the tier write is in flight"),
    ("cascaded", "written; CPU blocks unpinned"),
    "write failed or tier down; CPU blocks unpinned, tier slots freed",
)

# A probe of a shared tier: which of the next chunks does it hold?
PROBE = _job_lifecycle(
    "probe",
    ("probing", "asking a shared tier which chunks it holds; nothing allocated"),
    ("probed", "the tier answered; a promotion of the chunks it holds may follow"),
    "the tier did not answer (down, timeout): treated as holding nothing",
)

# A request's tier state in the tiering manager.
TIER_ACTIVE = "active"
TIER_SIGNALED = "signaled"
TIER_FINALISED = "finalised"
NO_TIER_JOBS = "no_tier_jobs"

TIER_REQUEST = LifecycleDeclaration(
    name="tier_request",
    states=(
        StateDecl(TIER_ACTIVE, "announced; may look up, promote and cascade"),
        StateDecl(TIER_SIGNALED, "on_request_finished received; cascades/promotions may still drain"),
        StateDecl(TIER_FINALISED, "state dropped: signaled and no tier job in flight"),
    ),
    initial=TIER_ACTIVE,
    terminal=frozenset({TIER_FINALISED}),
    guards={NO_TIER_JOBS: "no CPU transfer, cascade or promotion of the request is in flight"},
    transitions=(
        TransitionDecl("signal", (TIER_ACTIVE,), TIER_SIGNALED, doc="the deferred on_request_finished"),
        TransitionDecl("finalise", (TIER_SIGNALED,), TIER_FINALISED, guard=NO_TIER_JOBS),
    ),
)

TIER_LIFECYCLES: tuple[LifecycleDeclaration, ...] = (CHUNK_RESIDENCY, PROMOTION, CASCADE, PROBE, TIER_REQUEST)
