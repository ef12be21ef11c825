------------------------------- MODULE Fairness -------------------------------
(* A is enabled only every other step: weak fairness does not force it, strong does. *)
VARIABLES x, y
vars == <<x, y>>
Init == x = 0 /\ y = 0
Toggle == y' = 1 - y /\ UNCHANGED x
A == y = 1 /\ x = 0 /\ x' = 1 /\ UNCHANGED y
Next == Toggle \/ A
WeakSpec == Init /\ [][Next]_vars /\ WF_vars(Toggle) /\ WF_vars(A)
StrongSpec == Init /\ [][Next]_vars /\ WF_vars(Toggle) /\ SF_vars(A)
EventuallyX == <>(x = 1)
===============================================================================
