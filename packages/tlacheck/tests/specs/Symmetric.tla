------------------------------- MODULE Symmetric -------------------------------
(* Identical processes cycling idle -> busy -> done -> idle; at most two busy. *)
EXTENDS FiniteSets, TLC
CONSTANT Procs
VARIABLE st
Init == st = [p \in Procs |-> "idle"]
Busy == {p \in Procs : st[p] = "busy"}
Start(p) == /\ st[p] = "idle" /\ Cardinality(Busy) < 2
            /\ st' = [st EXCEPT ![p] = "busy"]
Stop(p) == st[p] = "busy" /\ st' = [st EXCEPT ![p] = "done"]
Again(p) == st[p] = "done" /\ st' = [st EXCEPT ![p] = "idle"]
Next == \E p \in Procs : Start(p) \/ Stop(p) \/ Again(p)
Spec == Init /\ [][Next]_st
TypeOK == st \in [Procs -> {"idle", "busy", "done"}]
AtMostTwoBusy == Cardinality(Busy) <= 2
Perms == Permutations(Procs)
===============================================================================
