---------------------------- MODULE KVOffloadTiers ----------------------------
(***************************************************************************)
(* Secondary tiers under the CPU tier: the cascade (CPU -> tier, after a   *)
(* store completed) and the promotion (tier -> CPU, started by a lookup    *)
(* that answers "not yet"), as kvoffload.tiers.manager implements them.    *)
(*                                                                         *)
(* The request side is the protocol of KVOffload.tla, reduced to what the  *)
(* tiers interact with: admission (lookup, load or promotion), computing   *)
(* chunks, finishing or aborting, build_connector_meta (stores, THEN the   *)
(* signal, then clean) and job completions.  Preemption and reset_cache    *)
(* are left to KVOffload.tla.  All requests share one prompt, so chunk c   *)
(* of every request has the same key c: what r1 cascades, r2 can promote.  *)
(*                                                                         *)
(* The rule this spec exists for is the tiering form of vLLM #49635: the   *)
(* tiering manager keeps per-request state (the cascades and promotions    *)
(* of the request) and must drop it only after the deferred finish signal  *)
(* AND once the request's stores, cascades and promotions drained.         *)
(* EagerTierFinalise = TRUE drops it at the signal (vLLM's bug): a store   *)
(* that completes after the signal then cascades for a dropped request.    *)
(*                                                                         *)
(* Invariant names are the ones of src/kvoffload/tiers/invariants.py.      *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    Requests,           \* model values, e.g. {r1, r2}
    NumKeys,            \* chunks of the shared prompt
    CpuBlocks,          \* CPU tier capacity (chunks)
    TierSlots,          \* secondary tier capacity (chunks)
    EagerTierFinalise   \* TRUE: drop the tier state at the signal (the bug)

ASSUME /\ NumKeys \in Nat /\ NumKeys > 0
       /\ CpuBlocks \in Nat /\ CpuBlocks > 0
       /\ TierSlots \in Nat /\ TierSlots > 0
       /\ EagerTierFinalise \in BOOLEAN

Keys == 1..NumKeys
SchedStates == {"waiting", "loading", "running", "finished_pending_store", "signaled", "cleaned"}
LiveStates == {"waiting", "loading", "running"}
\* The tiering manager's per-request state (kvoffload.tiers.lifecycles.TIER_REQUEST).
TierStates == {"none", "active", "signaled", "finalised"}
\* CPU entry states: written by a store, ready, written by a promotion.
CpuStates == {"writing", "ready", "promoting"}
\* Secondary tier chunk states (TIER_CHUNK without "dropped": dropped = absent).
SlotStates == {"writing", "resident", "reading"}

VARIABLES
    sched,       \* sched[r]: the connector's lifecycle state
    computed,    \* computed[r]: chunks of r in GPU memory
    storeBuilt,  \* storeBuilt[r]: chunks already offered to prepare_store
    signals,     \* signals[r]: on_request_finished calls
    tierState,   \* tierState[r]: the tiering manager's state of r
    tried,       \* tried[r]: keys r already tried to promote (never retried)
    cpu,         \* set of [key, st] CPU entries (one block each)
    tier,        \* set of [key, st] secondary tier entries (one slot each)
    jobs,        \* set of [kind, req, key]: "store" / "cascade" / "promote" of key;
                 \* "load" of keys 1..key
    badCalls     \* tier calls for a request whose tier state was dropped (a crash)

vars == <<sched, computed, storeBuilt, signals, tierState, tried, cpu, tier, jobs, badCalls>>

-----------------------------------------------------------------------------
Entry(k, st) == [key |-> k, st |-> st]
Job(kind, r, k) == [kind |-> kind, req |-> r, key |-> k]
InCpu(k) == \E e \in cpu : e.key = k
CpuReady(k) == Entry(k, "ready") \in cpu
InTier(k) == \E e \in tier : e.key = k
JobsOf(r) == {j \in jobs : j.req = r}
\* The scheduler's jobs of r (it cleans r once these drained).
GpuJobsOf(r) == {j \in JobsOf(r) : j.kind \in {"store", "load"}}
\* A CPU block is in use while written, or read by a load or a cascade.
CpuInUse(e) == \/ e.st # "ready"
               \/ \E j \in jobs : \/ j.kind = "load" /\ e.key <= j.key
                                  \/ j.kind = "cascade" /\ j.key = e.key
CpuEvictable == {e \in cpu : ~CpuInUse(e)}
\* CPU outcomes of placing n new blocks: evict just enough idle entries.
CpuRoom(n) ==
    LET need == IF Cardinality(cpu) + n > CpuBlocks THEN Cardinality(cpu) + n - CpuBlocks ELSE 0
    IN {V \in SUBSET CpuEvictable : Cardinality(V) = need}
TierRoom ==
    IF Cardinality(tier) < TierSlots THEN {{}}
    ELSE {{e} : e \in {x \in tier : x.st = "resident"}}
\* A tier call on behalf of r: a crash if r's tier state was dropped.
TierCall(r, call) ==
    IF tierState[r] = "finalised" THEN badCalls \cup {[req |-> r, call |-> call]} ELSE badCalls
\* r's tier state after its jobs became J: finalised once signaled and drained.
Finalised(r, J) ==
    IF tierState[r] = "signaled" /\ ~\E j \in J : j.req = r THEN "finalised" ELSE tierState[r]

-----------------------------------------------------------------------------
Init ==
    /\ sched = [r \in Requests |-> "waiting"]
    /\ computed = [r \in Requests |-> 0]
    /\ storeBuilt = [r \in Requests |-> 0]
    /\ signals = [r \in Requests |-> 0]
    /\ tierState = [r \in Requests |-> "none"]
    /\ tried = [r \in Requests |-> {}]
    /\ cpu = {}
    /\ tier = {}
    /\ jobs = {}
    /\ badCalls = {}

(* get_num_new_matched_tokens: h chunks are ready in CPU memory.  If chunk  *)
(* h+1 is being promoted, the lookup says "not yet" (Admit is disabled).    *)
(* If it is only in the tier and r did not try it yet, a promotion starts   *)
(* (its CPU block is allocated write-pending) and the lookup says "not      *)
(* yet".  Otherwise h > 0 chunks are loaded, or r runs at once.             *)
CanPromote(r, k) ==
    /\ k \in Keys /\ ~InCpu(k) /\ Entry(k, "resident") \in tier /\ k \notin tried[r]
    /\ CpuRoom(1) # {}

Admit(r) ==
    /\ sched[r] = "waiting"
    /\ \E h \in 0..NumKeys :
        /\ \A c \in 1..h : CpuReady(c)
        /\ (h < NumKeys => ~CpuReady(h + 1))
        /\ Entry(h + 1, "promoting") \notin cpu
        /\ tierState' = [tierState EXCEPT ![r] = "active"]
        /\ IF CanPromote(r, h + 1)
           THEN \E V \in CpuRoom(1) :
                /\ cpu' = (cpu \ V) \cup {Entry(h + 1, "promoting")}
                /\ tier' = (tier \ {Entry(h + 1, "resident")}) \cup {Entry(h + 1, "reading")}
                /\ jobs' = jobs \cup {Job("promote", r, h + 1)}
                /\ tried' = [tried EXCEPT ![r] = @ \cup {h + 1}]
                /\ UNCHANGED sched
           ELSE /\ sched' = [sched EXCEPT ![r] = IF h > 0 THEN "loading" ELSE "running"]
                /\ jobs' = IF h > 0 THEN jobs \cup {Job("load", r, h)} ELSE jobs
                /\ UNCHANGED <<cpu, tier, tried>>
    /\ UNCHANGED <<computed, storeBuilt, signals, badCalls>>

ComputeChunk(r) ==
    /\ sched[r] = "running"
    /\ computed[r] < NumKeys
    /\ computed' = [computed EXCEPT ![r] = @ + 1]
    /\ UNCHANGED <<sched, storeBuilt, signals, tierState, tried, cpu, tier, jobs, badCalls>>

Finish(r) ==
    /\ sched[r] \in LiveStates
    /\ sched' = [sched EXCEPT ![r] = "finished_pending_store"]
    /\ UNCHANGED <<computed, storeBuilt, signals, tierState, tried, cpu, tier, jobs, badCalls>>

(* build_connector_meta for r: store its filled-but-unstored chunks that are *)
(* not in CPU yet (evicting idle blocks, or storing nothing), THEN signal a *)
(* finished r, then clean r once its stores and load drained.               *)
BuildMeta(r) ==
    LET storing == sched[r] \in {"running", "finished_pending_store"}
        S == IF storing THEN {c \in (storeBuilt[r] + 1)..computed[r] : ~InCpu(c)} ELSE {}
        signalNow == sched[r] = "finished_pending_store"
    IN
    /\ \/ storing /\ storeBuilt[r] < computed[r]
       \/ signalNow
       \/ sched[r] = "signaled" /\ GpuJobsOf(r) = {}
    /\ storeBuilt' = [storeBuilt EXCEPT ![r] = IF storing THEN computed[r] ELSE @]
    /\ \E V \in IF S = {} \/ CpuRoom(Cardinality(S)) = {} THEN {{}} ELSE CpuRoom(Cardinality(S)) :
        LET placed == S # {} /\ CpuRoom(Cardinality(S)) # {}
            newJobs == IF placed THEN {Job("store", r, c) : c \in S} ELSE {}
            J == jobs \cup newJobs
        IN /\ cpu' = IF placed THEN (cpu \ V) \cup {Entry(c, "writing") : c \in S} ELSE cpu
           /\ jobs' = J
           /\ sched' = [sched EXCEPT ![r] =
                          IF signalNow \/ @ = "signaled"
                          THEN IF \E j \in J : j.req = r /\ j.kind \in {"store", "load"}
                               THEN "signaled" ELSE "cleaned"
                          ELSE @]
           /\ tierState' = [tierState EXCEPT ![r] =
                              IF signalNow
                              THEN IF EagerTierFinalise \/ ~\E j \in J : j.req = r
                                   THEN "finalised" ELSE "signaled"
                              ELSE @]
    /\ signals' = IF signalNow THEN [signals EXCEPT ![r] = @ + 1] ELSE signals
    /\ UNCHANGED <<computed, tried, tier, badCalls>>

(* A store of key k completed: its CPU block is ready and, if the tier does *)
(* not hold k, a cascade starts (pinning the block) when the tier has room. *)
StoreDone(j) ==
    LET k == j.key
        r == j.req
        cpuAfter == (cpu \ {Entry(k, "writing")}) \cup {Entry(k, "ready")}
    IN
    /\ j.kind = "store"
    /\ cpu' = cpuAfter
    /\ IF InTier(k)
       THEN /\ jobs' = jobs \ {j}
            /\ UNCHANGED <<tier, badCalls>>
            /\ tierState' = [tierState EXCEPT ![r] = Finalised(r, jobs \ {j})]
       ELSE /\ badCalls' = TierCall(r, "cascade")
            /\ \E V \in TierRoom :
                LET J == IF tierState[r] = "finalised" THEN jobs \ {j}
                         ELSE (jobs \ {j}) \cup {Job("cascade", r, k)}
                IN /\ jobs' = J
                   /\ tier' = IF tierState[r] = "finalised" THEN tier
                              ELSE (tier \ V) \cup {Entry(k, "writing")}
                   /\ tierState' = [tierState EXCEPT ![r] = Finalised(r, J)]
    /\ UNCHANGED <<sched, computed>>

LoadDone(j) ==
    /\ j.kind = "load"
    /\ jobs' = jobs \ {j}
    /\ IF sched[j.req] = "loading"
       THEN /\ sched' = [sched EXCEPT ![j.req] = "running"]
            /\ computed' = [computed EXCEPT ![j.req] = j.key]
       ELSE UNCHANGED <<sched, computed>>
    /\ tierState' = [tierState EXCEPT ![j.req] = Finalised(j.req, jobs \ {j})]
    /\ UNCHANGED <<cpu, tier, badCalls>>

(* A cascade reported: written (the slot is resident) or failed (freed).   *)
CascadeDone(j, ok) ==
    /\ j.kind = "cascade"
    /\ jobs' = jobs \ {j}
    /\ tier' = IF ok THEN (tier \ {Entry(j.key, "writing")}) \cup {Entry(j.key, "resident")}
               ELSE tier \ {Entry(j.key, "writing")}
    /\ badCalls' = TierCall(j.req, "complete_cascade")
    /\ tierState' = [tierState EXCEPT ![j.req] = Finalised(j.req, jobs \ {j})]
    /\ UNCHANGED <<sched, computed, cpu>>

(* A promotion reported: the chunk matched its key and checksum (the CPU    *)
(* block becomes ready) or not (I/O error, checksum: both copies dropped,   *)
(* the request recomputes).                                                 *)
PromoteDone(j, ok) ==
    /\ j.kind = "promote"
    /\ jobs' = jobs \ {j}
    /\ cpu' = IF ok THEN (cpu \ {Entry(j.key, "promoting")}) \cup {Entry(j.key, "ready")}
              ELSE cpu \ {Entry(j.key, "promoting")}
    /\ tier' = IF ok THEN (tier \ {Entry(j.key, "reading")}) \cup {Entry(j.key, "resident")}
               ELSE tier \ {Entry(j.key, "reading")}
    /\ badCalls' = TierCall(j.req, "complete_promotion")
    /\ tierState' = [tierState EXCEPT ![j.req] = Finalised(j.req, jobs \ {j})]
    /\ UNCHANGED <<sched, computed>>

JobDone(j) ==
    /\ \/ StoreDone(j)
       \/ LoadDone(j)
       \/ \E ok \in BOOLEAN : CascadeDone(j, ok)
       \/ \E ok \in BOOLEAN : PromoteDone(j, ok)
    /\ UNCHANGED <<storeBuilt, signals, tried>>

JobDoneOf(r) == \E j \in JobsOf(r) : JobDone(j)

Terminated ==
    /\ \A r \in Requests : sched[r] = "cleaned"
    /\ jobs = {}
    /\ UNCHANGED vars

Next ==
    \/ \E r \in Requests : Admit(r) \/ ComputeChunk(r) \/ Finish(r) \/ BuildMeta(r)
    \/ \E j \in jobs : JobDone(j)
    \/ Terminated

Fairness == \A r \in Requests : WF_vars(BuildMeta(r)) /\ WF_vars(JobDoneOf(r))

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
TypeOK ==
    /\ \A r \in Requests : /\ sched[r] \in SchedStates
                           /\ computed[r] \in 0..NumKeys
                           /\ tierState[r] \in TierStates
                           /\ tried[r] \subseteq Keys
    /\ Cardinality(cpu) <= CpuBlocks /\ Cardinality(tier) <= TierSlots
    /\ \A e \in cpu : e.key \in Keys /\ e.st \in CpuStates /\ \A e2 \in cpu : e2.key = e.key => e2 = e
    /\ \A e \in tier : e.key \in Keys /\ e.st \in SlotStates /\ \A e2 \in tier : e2.key = e.key => e2 = e

\* A CPU block under a cascade is ready (pinned, not evicted); one under a
\* promotion is write-pending; the tier chunk a promotion reads is "reading".
NoEvictUnderTierJob ==
    \A j \in jobs :
        /\ j.kind = "cascade" => CpuReady(j.key) /\ Entry(j.key, "writing") \in tier
        /\ j.kind = "promote" => Entry(j.key, "promoting") \in cpu /\ Entry(j.key, "reading") \in tier

\* No load reads a chunk that is still being promoted (or written).
NoLoadWhilePromoting ==
    \A j \in jobs : j.kind = "load" => \A c \in 1..j.key : CpuReady(c)

\* The tier state is finalised only after the signal and once drained.
TierStateUntilSignal ==
    \A r \in Requests : tierState[r] = "finalised" => signals[r] = 1 /\ JobsOf(r) = {}

\* No tier call (a cascade, a tier job's completion) is ever made for a
\* request whose tier state was dropped: the crash of #49635's tiering form.
NoTierCallAfterFinalise == badCalls = {}

\* At quiescence nothing is pinned, written or read, and every tier state is gone.
NoLeak ==
    (jobs = {} /\ \A r \in Requests : sched[r] = "cleaned") =>
        /\ \A r \in Requests : tierState[r] = "finalised"
        /\ \A e \in cpu : e.st = "ready"
        /\ \A e \in tier : e.st = "resident"

\* Every finished request's tier state is eventually finalised.
EventuallyFinalised ==
    \A r \in Requests : sched[r] \in {"finished_pending_store", "signaled"} ~> tierState[r] = "finalised"
=============================================================================
