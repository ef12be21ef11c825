---------------------------- MODULE RequestLifecycle ----------------------------
\* The request lifecycle, generated from its declaration (src/kvoffload/lifecycles/request.py).
\* Do not edit: regenerate it with `kvoffload link tla --write`.
\* A spec that instances it states, as a property, that its actions move instances only along
\* these edges.

States == {"waiting", "loading", "running", "preempted", "finished_pending_store", "signaled", "cleaned"}
Initial == "waiting"
Terminal == {"cleaned"}
Triggers == {"lookup", "schedule", "load", "load_done", "realloc", "preempt", "resume", "finish", "signal", "clean", "reset"}

\* <<from, trigger, to>> for every (state, trigger) the runtime accepts.
Edges == {
    <<"waiting", "lookup", "waiting">>,
    <<"waiting", "schedule", "running">>,
    <<"waiting", "load", "loading">>,
    <<"loading", "load_done", "running">>,
    <<"running", "realloc", "running">>,
    <<"running", "preempt", "preempted">>,
    <<"waiting", "preempt", "waiting">>,
    <<"preempted", "resume", "waiting">>,
    <<"waiting", "finish", "finished_pending_store">>,
    <<"loading", "finish", "finished_pending_store">>,
    <<"running", "finish", "finished_pending_store">>,
    <<"preempted", "finish", "finished_pending_store">>,
    <<"finished_pending_store", "signal", "signaled">>,
    <<"signaled", "clean", "cleaned">>,
    <<"waiting", "reset", "waiting">>,
    <<"loading", "reset", "waiting">>,
    <<"running", "reset", "waiting">>,
    <<"preempted", "reset", "waiting">>
}

\* <<from, trigger, guard>>: the edge is taken only when the guard holds.
\* no_jobs_in_flight: the request has no load or store job in flight
Guarded == {
    <<"preempted", "resume", "no_jobs_in_flight">>,
    <<"signaled", "clean", "no_jobs_in_flight">>
}

\* from --t--> to is a declared edge.
Step(from, t, to) == <<from, t, to>> \in Edges

\* from --t1--> mid --t2--> to: two declared edges taken in one atomic action.
Steps2(from, t1, t2, to) == \E mid \in States : Step(from, t1, mid) /\ Step(mid, t2, to)
=============================================================================
