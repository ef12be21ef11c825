---------------------------- MODULE JobLifecycle ----------------------------
\* The job lifecycle, generated from its declaration (src/kvoffload/lifecycles/job.py).
\* Do not edit: regenerate it with `kvoffload link tla --write`.
\* A spec that instances it states, as a property, that its actions move instances only along
\* these edges.

States == {"new", "prepared", "submitted", "flushed", "stale", "completed", "failed", "discarded"}
Initial == "new"
Terminal == {"completed", "discarded", "failed"}
Triggers == {"prepare", "submit", "flush", "complete", "fail", "reset", "discard"}

\* <<from, trigger, to>> for every (state, trigger) the runtime accepts.
Edges == {
    <<"new", "prepare", "prepared">>,
    <<"prepared", "submit", "submitted">>,
    <<"submitted", "flush", "flushed">>,
    <<"stale", "flush", "stale">>,
    <<"submitted", "complete", "completed">>,
    <<"flushed", "complete", "completed">>,
    <<"submitted", "fail", "failed">>,
    <<"flushed", "fail", "failed">>,
    <<"prepared", "reset", "stale">>,
    <<"submitted", "reset", "stale">>,
    <<"flushed", "reset", "stale">>,
    <<"stale", "discard", "discarded">>
}

\* <<from, trigger, guard>>: the edge is taken only when the guard holds.
\* request_not_signaled: the job's request was not signaled yet: the manager still knows it
Guarded == {
    <<"new", "prepare", "request_not_signaled">>
}

\* from --t--> to is a declared edge.
Step(from, t, to) == <<from, t, to>> \in Edges

\* from --t1--> mid --t2--> to: two declared edges taken in one atomic action.
Steps2(from, t1, t2, to) == \E mid \in States : Step(from, t1, mid) /\ Step(mid, t2, to)
=============================================================================
