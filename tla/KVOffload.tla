------------------------------- MODULE KVOffload -------------------------------
(***************************************************************************)
(* The KV-cache offloading protocol between the scheduler-side connector, *)
(* the offloading manager (CPU block pool) and the transfer worker.       *)
(*                                                                         *)
(* Reading guide for engineers who know the scheduler but not TLA+:        *)
(*   - A "state" is one value for every VARIABLE below.  An "action" is a  *)
(*     predicate over the current state (unprimed names) and the next one  *)
(*     (primed names, x'); it is a guard plus an update.  The model        *)
(*     checker starts from Init and tries every enabled action in every    *)
(*     reachable state, i.e. every interleaving of scheduler steps, job    *)
(*     completions and failures.                                           *)
(*   - [f EXCEPT ![k] = v] is "f with f[k] replaced by v"; @ inside it is  *)
(*     the old f[k].  UNCHANGED <<a, b>> means a' = a /\ b' = b.           *)
(*   - An invariant must hold in every reachable state; a violation comes  *)
(*     back as the shortest sequence of actions that reaches a bad state.  *)
(*                                                                         *)
(* The one rule this spec exists for (docs/design.md, "ordering rules"): the *)
(* manager is told that a request finished (on_request_finished, the       *)
(* "signal") only after every final store job of that request has been     *)
(* prepared, and the scheduler forgets the request only once it is         *)
(* signaled and has no transfer in flight.  EagerSignal = TRUE models the  *)
(* pre-fix ordering, which crashed production servers with a KeyError.     *)
(*                                                                         *)
(* Reading a counterexample (`kvoffload tla check`, or TLC's own output):  *)
(* state 1 is Init; every later state is labelled with the action that    *)
(* produced it (Admit, ComputeChunk, Finish, Abort, BuildMeta, JobDone,    *)
(* Preempt, Readmit, ResetCache) and kvoffload prints only the variables  *)
(* that changed.  The pre-fix model (KVOffload_EagerSignal.cfg) fails so:  *)
(*   2 Admit:        sched[r1] = "running", mgr[r1] = "known"              *)
(*   3 ComputeChunk: computed[r1] = 1          (chunk 1 filled, unstored)  *)
(*   4 Finish:       sched[r1] = "signaled", mgr[r1] = "finished"  (signal) *)
(*   5 BuildMeta:    afterSignal = {[req |-> r1, call |-> "prepare_store"]} *)
(* i.e. prepare_store for a request the manager dropped: the KeyError.     *)
(* A liveness counterexample ends with "Back to state i": the states from  *)
(* i on repeat forever, and the property never comes true on that loop.    *)
(*                                                                         *)
(* No SYMMETRY: TLC cannot soundly combine symmetry with the liveness      *)
(* check, and the fixed model is small (about 12k states) without it.     *)
(*                                                                         *)
(* Invariant and state names are the ones of src/kvoffload/lifecycles/;    *)
(* a test cross-checks them.                                               *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    Requests,     \* the requests, as model values, e.g. {r1, r2}
    NumChunks,    \* chunks (= one manager key each) a request can fill
    CpuBlocks,    \* size of the manager's CPU block pool (one chunk each)
    EagerSignal   \* TRUE: pre-fix ordering (signal inside request_finished)

ASSUME /\ NumChunks \in Nat /\ NumChunks > 0
       /\ CpuBlocks \in Nat /\ CpuBlocks > 0
       /\ EagerSignal \in BOOLEAN

Chunks == 1..NumChunks

\* The scheduler-side lifecycle of docs/design.md (lifecycles/request.py).
LifecycleStates == {"waiting", "loading", "running", "preempted",
                    "finished_pending_store", "signaled", "cleaned"}
\* States from which the engine may still finish or abort the request.
LiveStates == {"waiting", "loading", "running", "preempted"}
\* The manager's view of a request: never seen, tracked, or dropped after
\* on_request_finished.
ManagerStates == {"unknown", "known", "finished"}

\* A CPU block's content: chunk c of request r, valid (ready) or still being
\* written by a store job.  Block numbers are left out on purpose: which
\* physical block holds a key does not matter to the protocol, and leaving
\* them out halves the state space (no permutations of identical blocks).
Entry(r, c, ready) == [req |-> r, chunk |-> c, ready |-> ready]

VARIABLES
    \* sched[r]: the connector's lifecycle state of request r.
    sched,
    \* computed[r]: chunks of r whose KV is in GPU memory (filled by the engine
    \* or loaded back).  Preemption drops them to 0.
    computed,
    \* storeBuilt[r]: chunks 1..storeBuilt[r] were already handed to
    \* prepare_store (or it was decided not to store them).  Store jobs are
    \* built for chunks storeBuilt[r]+1 .. computed[r]: "filled but unstored".
    storeBuilt,
    \* mgr[r]: the manager's per-request state (see ManagerStates).
    mgr,
    \* signals[r]: how many times on_request_finished(r) was called.
    signals,
    \* cpu: the manager's CPU block pool, as the set of the Entry records its
    \* occupied blocks hold; CpuBlocks - Cardinality(cpu) blocks are free.
    \* Keys are unique (a chunk is handed to prepare_store at most once per
    \* cache lifetime, see storeBuilt), so one entry is one block.
    cpu,
    \* jobs: transfer jobs in flight (prepared and submitted, outcome not yet
    \* reported to the scheduler).  A record
    \*   [req |-> r, kind |-> "load" or "store", chunk |-> c, flushed |-> B]:
    \* a store writes chunk c of r into the CPU block reserved for it; a load
    \* reads chunks 1..c of r from the CPU blocks holding them.  flushed: the
    \* copy was waited for on preemption (so the GPU blocks it reads may be
    \* reused), but its outcome is not reported yet.
    jobs,
    \* afterSignal: manager calls (lookup, prepare_load, prepare_store) made
    \* for a request the manager had already dropped.  The real, strict
    \* manager raises on such a call (the reference KeyError crash); the spec
    \* records it so that NoManagerCallAfterSignal can see it.
    afterSignal

vars == <<sched, computed, storeBuilt, mgr, signals, cpu, jobs, afterSignal>>

-----------------------------------------------------------------------------
(* Helpers *)

JobsOf(r) == {j \in jobs : j.req = r}
NoJobs(r) == JobsOf(r) = {}
\* A block is in use while a job reads (load) or writes (store) it.
InUse(e) == \E j \in jobs : /\ j.req = e.req
                             /\ IF j.kind = "store" THEN j.chunk = e.chunk
                                                   ELSE e.chunk <= j.chunk
\* Chunk c of r is in the CPU cache with valid data.
Cached(r, c) == Entry(r, c, TRUE) \in cpu
\* Manager calls on a dropped request are recorded, not performed.
CallsAfterSignal(r, call) ==
    IF mgr[r] = "finished" THEN afterSignal \cup {[req |-> r, call |-> call]}
                           ELSE afterSignal

\* Requests for which build_connector_meta builds store jobs.  In the fixed
\* ordering only requests the manager still knows.  In the pre-fix ordering
\* the scheduler did not know that request_finished had already signaled the
\* manager, so it still built the final stores of signaled requests.
StoringStates == IF EagerSignal
                 THEN {"running", "finished_pending_store", "signaled"}
                 ELSE {"running", "finished_pending_store"}

-----------------------------------------------------------------------------
(* Initial state: requests are known to the scheduler only; nothing cached. *)

Init ==
    /\ sched = [r \in Requests |-> "waiting"]
    /\ computed = [r \in Requests |-> 0]
    /\ storeBuilt = [r \in Requests |-> 0]
    /\ mgr = [r \in Requests |-> "unknown"]
    /\ signals = [r \in Requests |-> 0]
    /\ cpu = {}
    /\ jobs = {}
    /\ afterSignal = {}

-----------------------------------------------------------------------------
(* Actions *)

(* get_num_new_matched_tokens + update_state_after_alloc: the manager looks  *)
(* up r's chunks (learning the request); a hit prefix of h > 0 chunks is     *)
(* loaded by one load job (trigger `load`, waiting -> loading), which pins   *)
(* those blocks (prepare_load, see InUse); no hit schedules r at once.      *)
(* Waiting implies no job in flight (Readmit's guard), so JobsExclusive      *)
(* holds by construction.                                                    *)
Admit(r) ==
    /\ sched[r] = "waiting"
    /\ \E h \in 0..NumChunks :
        \* h is the length of the longest cached prefix of r.
        /\ \A c \in 1..h : Cached(r, c)
        /\ (h < NumChunks => ~Cached(r, h + 1))
        /\ afterSignal' = CallsAfterSignal(r, IF h > 0 THEN "prepare_load" ELSE "lookup")
        /\ mgr' = [mgr EXCEPT ![r] = IF @ = "unknown" THEN "known" ELSE @]
        /\ IF h > 0
           THEN /\ sched' = [sched EXCEPT ![r] = "loading"]
                /\ jobs' = jobs \cup
                     {[req |-> r, kind |-> "load", chunk |-> h, flushed |-> FALSE]}
           ELSE /\ sched' = [sched EXCEPT ![r] = "running"]
                /\ UNCHANGED jobs
    /\ UNCHANGED <<computed, storeBuilt, signals, cpu>>

(* The engine runs r one step and fills its next chunk of KV cache. *)
ComputeChunk(r) ==
    /\ sched[r] = "running"
    /\ computed[r] < NumChunks
    /\ computed' = [computed EXCEPT ![r] = @ + 1]
    /\ UNCHANGED <<sched, storeBuilt, mgr, signals, cpu, jobs, afterSignal>>

(* request_finished for a request that stopped normally (from running) or was *)
(* aborted (from any live state).  Fixed ordering: only remember that it      *)
(* finished; the signal waits for BuildMeta.  Pre-fix ordering: signal the    *)
(* manager right here, which drops the request although its last filled      *)
(* chunks have no store job yet.                                              *)
EndRequest(r) ==
    IF EagerSignal
    THEN /\ sched' = [sched EXCEPT ![r] = "signaled"]
         /\ mgr' = [mgr EXCEPT ![r] = "finished"]
         /\ signals' = [signals EXCEPT ![r] = @ + 1]
         /\ UNCHANGED <<computed, storeBuilt, cpu, jobs, afterSignal>>
    ELSE /\ sched' = [sched EXCEPT ![r] = "finished_pending_store"]
         /\ UNCHANGED <<computed, storeBuilt, mgr, signals, cpu, jobs, afterSignal>>

Finish(r) ==
    /\ sched[r] = "running"
    /\ EndRequest(r)

Abort(r) ==
    /\ sched[r] \in LiveStates
    /\ EndRequest(r)

(* build_connector_meta, restricted to request r, in docs/design.md order: *)
(*  1. build store jobs for r's filled-but-unstored chunks (this includes the *)
(*     final stores of a finished request): one prepare_store call, which    *)
(*     may evict cached blocks no job uses (see StoreOutcomes) or return     *)
(*     None, and then nothing is stored.  Either way these chunks are        *)
(*     decided: storeBuilt moves past them.                                  *)
(*  2. THEN signal r if it finished: its final stores now exist.              *)
(*  3. THEN clean r if it is signaled and no job of r is in flight.           *)
(* Modelling the step per request keeps the state space small; requests do    *)
(* not interact inside build_connector_meta except through the block pool,    *)
(* which is covered by interleaving the per-request steps.                    *)
ToStore(r) == IF sched[r] \in StoringStates THEN (storeBuilt[r] + 1)..computed[r] ELSE {}

\* Cached blocks prepare_store may evict: valid and not used by any job.  A
\* block being written is never ready, so it is never a victim.
Evictable == {e \in cpu : e.ready /\ ~InUse(e)}

\* The possible (cpu, new jobs) outcomes of prepare_store(S) for r.  The
\* manager evicts only as many blocks as it lacks free ones, and any
\* evictable blocks may be the victims (this over-approximates LRU and ARC).
\* When it cannot place every chunk it returns None: nothing is stored.
StoreOutcomes(r, S) ==
    LET used == Cardinality(S) + Cardinality(cpu)
        need == IF used > CpuBlocks THEN used - CpuBlocks ELSE 0
        victims == {V \in SUBSET Evictable : Cardinality(V) = need}
    IN IF S = {} \/ mgr[r] = "finished" \/ victims = {}
       THEN {[cpu |-> cpu, new |-> {}]}
       ELSE {[cpu |-> (cpu \ V) \cup {Entry(r, c, FALSE) : c \in S},
              new |-> {[req |-> r, kind |-> "store", chunk |-> c, flushed |-> FALSE] : c \in S}] :
               V \in victims}

BuildMeta(r) ==
    LET S == ToStore(r)
        signalNow == sched[r] = "finished_pending_store"
    IN
    \* Enabled only when the step does something for r, so that weak fairness
    \* of BuildMeta means "the scheduler keeps stepping", not "it may idle".
    /\ \/ S # {}
       \/ signalNow
       \/ (sched[r] = "signaled" /\ NoJobs(r))
    /\ afterSignal' = IF S # {} THEN CallsAfterSignal(r, "prepare_store") ELSE afterSignal
    /\ storeBuilt' = [storeBuilt EXCEPT ![r] = IF S # {} THEN computed[r] ELSE @]
    /\ \E o \in StoreOutcomes(r, S) :
        /\ cpu' = o.cpu
        /\ jobs' = jobs \cup o.new
        /\ LET drained == \A j \in jobs \cup o.new : j.req # r
           IN sched' = [sched EXCEPT ![r] =
                          IF signalNow \/ @ = "signaled"
                          THEN IF drained THEN "cleaned" ELSE "signaled"
                          ELSE @]
    /\ mgr' = IF signalNow THEN [mgr EXCEPT ![r] = "finished"] ELSE mgr
    /\ signals' = IF signalNow THEN [signals EXCEPT ![r] = @ + 1] ELSE signals
    /\ UNCHANGED computed

(* update_connector_output: the worker reports job j's outcome.  Completions *)
(* may arrive after the signal (complete_store/complete_load are allowed     *)
(* then).  A successful store makes its block a valid cache entry; a failed  *)
(* one frees the block (nothing valid was written).  A load that succeeds    *)
(* restores chunks 1..j.chunk in GPU memory (`load_done`); a failed load     *)
(* still moves r to running, which recomputes from scratch.  A load that     *)
(* completes after r was aborted changes nothing but the job set.            *)
JobDone(j, ok) ==
    /\ jobs' = jobs \ {j}
    /\ IF j.kind = "store"
       THEN /\ cpu' = IF ok
                      THEN (cpu \ {Entry(j.req, j.chunk, FALSE)}) \cup {Entry(j.req, j.chunk, TRUE)}
                      ELSE cpu \ {Entry(j.req, j.chunk, FALSE)}
            /\ UNCHANGED <<sched, computed>>
       ELSE /\ IF sched[j.req] = "loading"
               THEN /\ sched' = [sched EXCEPT ![j.req] = "running"]
                    /\ computed' = [computed EXCEPT ![j.req] = IF ok THEN j.chunk ELSE 0]
               ELSE UNCHANGED <<sched, computed>>
            /\ UNCHANGED cpu
    /\ UNCHANGED <<storeBuilt, mgr, signals, afterSignal>>

\* Some job of r completes or fails (the unit of fairness: see Spec).
JobDoneOf(r) == \E j \in JobsOf(r) : \E ok \in BOOLEAN : JobDone(j, ok)

(* The engine preempts running r and takes its GPU blocks back.  Its in-flight *)
(* stores are flushed first (waited for, so the GPU blocks they read can be    *)
(* reused: GpuBlockFence); their outcome is still reported later by JobDone,   *)
(* which is why Readmit waits for them.  GPU contents are gone: computed = 0.  *)
Flushed(j) == [req |-> j.req, kind |-> j.kind, chunk |-> j.chunk, flushed |-> TRUE]

Preempt(r) ==
    /\ sched[r] = "running"
    /\ sched' = [sched EXCEPT ![r] = "preempted"]
    /\ computed' = [computed EXCEPT ![r] = 0]
    /\ jobs' = {IF j.req = r /\ j.kind = "store" THEN Flushed(j) ELSE j : j \in jobs}
    /\ UNCHANGED <<storeBuilt, mgr, signals, cpu, afterSignal>>

(* `resume`: a preempted request goes back to waiting only once every job of *)
(* it has reported, or a new load could overlap an old store (JobsExclusive).*)
Readmit(r) ==
    /\ sched[r] = "preempted"
    /\ NoJobs(r)
    /\ sched' = [sched EXCEPT ![r] = "waiting"]
    /\ UNCHANGED <<computed, storeBuilt, mgr, signals, cpu, jobs, afterSignal>>

(* reset_cache: allowed only with no transfer in flight (a reset must not    *)
(* free a block a job reads or writes).  Finished requests are signaled if   *)
(* they were not yet (nothing is left to store: the cache is being dropped)  *)
(* and cleaned; live requests start over from waiting with nothing computed  *)
(* and nothing stored; every CPU block is freed.                             *)
ResetCache ==
    /\ jobs = {}
    /\ \E r \in Requests : sched[r] # "cleaned" \/ computed[r] # 0
    /\ LET pending(r) == sched[r] = "finished_pending_store"
           live(r) == sched[r] \in LiveStates
       IN /\ sched' = [r \in Requests |-> IF live(r) THEN "waiting" ELSE "cleaned"]
          /\ signals' = [r \in Requests |-> IF pending(r) THEN signals[r] + 1 ELSE signals[r]]
          /\ mgr' = [r \in Requests |-> IF pending(r) THEN "finished" ELSE mgr[r]]
          /\ storeBuilt' = [r \in Requests |->
                              IF live(r) THEN 0
                              ELSE IF pending(r) /\ computed[r] > storeBuilt[r]
                                   THEN computed[r] ELSE storeBuilt[r]]
          /\ computed' = [r \in Requests |-> IF live(r) THEN 0 ELSE computed[r]]
    /\ cpu' = {}
    /\ UNCHANGED <<jobs, afterSignal>>

(* Every request is cleaned: the system is quiescent.  Stuttering here keeps *)
(* the final state from being reported as a deadlock.                        *)
Terminated ==
    /\ \A r \in Requests : sched[r] = "cleaned"
    /\ UNCHANGED vars

Next ==
    \/ \E r \in Requests : Admit(r)
    \/ \E r \in Requests : ComputeChunk(r)
    \/ \E r \in Requests : Finish(r)
    \/ \E r \in Requests : Abort(r)
    \/ \E r \in Requests : BuildMeta(r)
    \/ \E j \in jobs : \E ok \in BOOLEAN : JobDone(j, ok)
    \/ \E r \in Requests : Preempt(r)
    \/ \E r \in Requests : Readmit(r)
    \/ ResetCache
    \/ Terminated

(* Fairness, per request: a request's jobs keep completing (the worker does *)
(* not hang) and the scheduler keeps calling build_connector_meta.  Per      *)
(* request, because another request may create jobs forever (preempt and    *)
(* readmit in a loop), and fairness over "some job completes" would let it   *)
(* starve this request's jobs.                                               *)
Fairness == \A r \in Requests : WF_vars(BuildMeta(r)) /\ WF_vars(JobDoneOf(r))

Spec == Init /\ [][Next]_vars /\ Fairness

-----------------------------------------------------------------------------
(* Invariants (names as in src/kvoffload/lifecycles/invariants.py) *)

TypeOK ==
    /\ DOMAIN sched = Requests /\ \A r \in Requests : sched[r] \in LifecycleStates
    /\ DOMAIN computed = Requests /\ \A r \in Requests : computed[r] \in 0..NumChunks
    /\ DOMAIN storeBuilt = Requests /\ \A r \in Requests : storeBuilt[r] \in 0..NumChunks
    /\ DOMAIN mgr = Requests /\ \A r \in Requests : mgr[r] \in ManagerStates
    /\ DOMAIN signals = Requests /\ \A r \in Requests : signals[r] \in Nat
    /\ Cardinality(cpu) <= CpuBlocks
    /\ \A e \in cpu : /\ e.req \in Requests
                      /\ e.chunk \in Chunks
                      /\ e.ready \in BOOLEAN
                      \* one block per key
                      /\ \A e2 \in cpu : (e2.req = e.req /\ e2.chunk = e.chunk) => e2 = e
    /\ \A j \in jobs : /\ j.req \in Requests
                       /\ j.kind \in {"load", "store"}
                       /\ j.chunk \in Chunks
                       /\ j.flushed \in BOOLEAN
    /\ \A e \in afterSignal : e.req \in Requests

\* on_request_finished(r) only once prepare_store was issued for every chunk
\* r filled (or it was decided that nothing remains to store).
SignalAfterFinalStore ==
    \A r \in Requests : signals[r] > 0 => storeBuilt[r] >= computed[r]

\* No lookup/prepare_load/prepare_store for r after on_request_finished(r).
NoManagerCallAfterSignal == afterSignal = {}

\* The manager is told at most once, and every signaled or cleaned request
\* was told exactly once.
SignalExactlyOnce ==
    \A r \in Requests :
        /\ signals[r] <= 1
        /\ (sched[r] \in {"signaled", "cleaned"} => signals[r] = 1)
        /\ (mgr[r] = "finished" <=> signals[r] = 1)

\* State is dropped only when signaled and no job of r is in flight.
CleanOnlyWhenDrained ==
    \A r \in Requests : sched[r] = "cleaned" => (NoJobs(r) /\ signals[r] = 1)

\* A request has either one load job or zero or more store jobs, never both;
\* a loading request has exactly its load job.
JobsExclusive ==
    \A r \in Requests :
        LET loads == {j \in JobsOf(r) : j.kind = "load"}
        IN /\ Cardinality(loads) <= 1
           /\ (loads # {} => JobsOf(r) = loads)
           /\ (sched[r] = "loading" => Cardinality(loads) = 1)

\* A CPU block being loaded from, or being written, is never evicted or
\* reused: while a job is in flight, the blocks it reads still hold their
\* valid chunks, and the block it writes is still reserved for its chunk.
NoEvictWhileInUse ==
    \A j \in jobs :
        IF j.kind = "store"
        THEN Entry(j.req, j.chunk, FALSE) \in cpu
        ELSE \A c \in 1..j.chunk : Cached(j.req, c)

\* A GPU block read by an in-flight store is not handed to new work before
\* that store completed or was flushed.  GPU blocks are not modelled one by
\* one: r's chunks 1..computed[r] are its GPU blocks, and a finished
\* request's blocks stay allocated (delayed free) until it is cleaned.
GpuBlockFence ==
    \A j \in jobs :
        (j.kind = "store" /\ ~j.flushed) =>
            \/ j.chunk <= computed[j.req]
            \/ sched[j.req] \in {"finished_pending_store", "signaled"}

\* At quiescence (every request cleaned) no job, and so no pinned or
\* write-pending CPU block, is left.  (The manager's per-request state of a
\* cleaned request is "finished": it was dropped on the signal.)
NoLeak ==
    (\A r \in Requests : sched[r] = "cleaned") =>
        /\ jobs = {}
        /\ \A r \in Requests : mgr[r] = "finished"
        /\ \A e \in cpu : e.ready

(* Liveness *)

Finished(r) == sched[r] \in {"finished_pending_store", "signaled"}
Cleaned(r) == sched[r] = "cleaned"

\* Every finished request is eventually cleaned, if jobs keep completing.
EventuallyCleaned == \A r \in Requests : Finished(r) ~> Cleaned(r)

=============================================================================
