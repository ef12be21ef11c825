------------------------- MODULE KVOffloadRefinement -------------------------
(***************************************************************************)
(* KVOffload.tla refines the declared lifecycles                           *)
(* (src/kvoffload/lifecycles/, generated into RequestLifecycle.tla and     *)
(* JobLifecycle.tla): every action                                         *)
(* moves every request and every job along a declared edge, along a        *)
(* composite step named here, or not at all.  KVOffloadRefinement.cfg       *)
(* checks both properties; `kvoffload link tla` also checks that every      *)
(* declared request edge is taken by some action, unless it is listed in    *)
(* UnmodelledRequestEdges, and that the generated modules are current.     *)
(***************************************************************************)
EXTENDS KVOffload

RL == INSTANCE RequestLifecycle
JL == INSTANCE JobLifecycle

\* Request r moves from sched[r] to sched'[r] along declared edges: one
\* trigger, or two in one atomic action.
Fires(r, t) == RL!Step(sched[r], t, sched'[r])
Fires2(r, t1, t2) == RL!Steps2(sched[r], t1, t2, sched'[r])

\* Which triggers each action fires for the request it moves.  BuildMeta and
\* ResetCache signal a finished request and, with nothing of it in flight,
\* clean it in the same action: signal, then clean.
MovesAsDeclared(r) ==
    \/ sched'[r] = sched[r]
    \/ Admit(r) /\ (Fires(r, "load") \/ Fires(r, "schedule"))
    \/ (Finish(r) \/ Abort(r)) /\ Fires(r, "finish")
    \/ BuildMeta(r) /\ (Fires(r, "signal") \/ Fires(r, "clean") \/ Fires2(r, "signal", "clean"))
    \/ (\E j \in JobsOf(r) : \E ok \in BOOLEAN : JobDone(j, ok)) /\ Fires(r, "load_done")
    \/ Preempt(r) /\ Fires(r, "preempt")
    \/ Readmit(r) /\ Fires(r, "resume")
    \/ ResetCache /\ (Fires(r, "reset") \/ Fires(r, "clean") \/ Fires2(r, "signal", "clean"))

FollowsRequestLifecycle == [][\A r \in Requests : MovesAsDeclared(r)]_vars

\* Declared request edges no action here takes: ResetCache waits for every
\* job, so a loading request (its load in flight) is never reset; the code
\* cancels a load prepared but not yet handed to the worker.
UnmodelledRequestEdges == {<<"loading", "reset", "waiting">>}

\* A job, named by what it copies, and its phase in the declared job
\* lifecycle.  The spec keeps no record of ended jobs, so an ended job's
\* phase is the initial one again.
JobKinds == {"load", "store"}
JobPhase(r, kind, c, js) ==
    IF \E j \in js : j.req = r /\ j.kind = kind /\ j.chunk = c /\ ~j.flushed THEN "submitted"
    ELSE IF \E j \in js : j.req = r /\ j.kind = kind /\ j.chunk = c THEN "flushed"
    ELSE JL!Initial

\* Admit (a load) and BuildMeta (stores) create a job already handed to the
\* worker: prepare, then submit.  JobDone ends one (complete or fail).
JobMove(from, to) ==
    \/ from = to
    \/ \E t \in JL!Triggers : JL!Step(from, t, to)
    \/ JL!Steps2(from, "prepare", "submit", to)
    \/ (to = JL!Initial /\ \E t \in JL!Triggers : \E e \in JL!Terminal : JL!Step(from, t, e))

FollowsJobLifecycle ==
    [][\A r \in Requests : \A kind \in JobKinds : \A c \in Chunks :
           JobMove(JobPhase(r, kind, c, jobs), JobPhase(r, kind, c, jobs'))]_vars

=============================================================================
