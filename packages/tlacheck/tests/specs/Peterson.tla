------------------------------- MODULE Peterson -------------------------------
(* Peterson's mutual exclusion for two processes 0 and 1. *)
VARIABLES pc, flag, turn
vars == <<pc, flag, turn>>
Procs == {0, 1}
Other(p) == 1 - p

Init == /\ pc = [p \in Procs |-> "idle"]
        /\ flag = [p \in Procs |-> FALSE]
        /\ turn = 0

SetFlag(p) == /\ pc[p] = "idle"
              /\ flag' = [flag EXCEPT ![p] = TRUE]
              /\ pc' = [pc EXCEPT ![p] = "setturn"]
              /\ UNCHANGED turn
SetTurn(p) == /\ pc[p] = "setturn"
              /\ turn' = Other(p)
              /\ pc' = [pc EXCEPT ![p] = "wait"]
              /\ UNCHANGED flag
Enter(p) == /\ pc[p] = "wait"
            /\ flag[Other(p)] = FALSE \/ turn = p
            /\ pc' = [pc EXCEPT ![p] = "cs"]
            /\ UNCHANGED <<flag, turn>>
Exit(p) == /\ pc[p] = "cs"
           /\ flag' = [flag EXCEPT ![p] = FALSE]
           /\ pc' = [pc EXCEPT ![p] = "idle"]
           /\ UNCHANGED turn

Proc(p) == SetFlag(p) \/ SetTurn(p) \/ Enter(p) \/ Exit(p)
Next == \E p \in Procs : Proc(p)

\* A process that has raised its flag keeps going; it may stay idle forever.
Fairness == \A p \in Procs : WF_vars(SetTurn(p) \/ Enter(p) \/ Exit(p))
Spec == Init /\ [][Next]_vars /\ Fairness
\* Without fairness a waiting process may simply never be scheduled again.
SpecNoFairness == Init /\ [][Next]_vars

TypeOK == /\ pc \in [Procs -> {"idle", "setturn", "wait", "cs"}]
          /\ flag \in [Procs -> BOOLEAN]
          /\ turn \in Procs
MutualExclusion == ~(pc[0] = "cs" /\ pc[1] = "cs")
StarvationFree == \A p \in Procs : (pc[p] = "wait") ~> (pc[p] = "cs")
===============================================================================
