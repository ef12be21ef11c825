---- MODULE RefinedFairness ----
\* Found on a public example (an allocator that refines a simpler one, whose fairness is a
\* PROPERTY): the abstract action AbsInc does not mention the implementation's variable t, so
\* its successors leave t' open. The embedded checker looked those partial successors up among
\* the states, found none, and so never counted an explored step as an <<AbsInc>>_x step: it
\* reported WF_x(AbsInc) violated (exit 13), where TLC finds that it holds.
EXTENDS Naturals
VARIABLES x, t
vars == <<x, t>>
Init == x = 0 /\ t = 0
Tick == t' = 1 - t /\ UNCHANGED x
Inc == t = 1 /\ x' = (x + 1) % 3 /\ t' = 0
Spec == Init /\ [][Tick \/ Inc]_vars /\ WF_vars(Tick) /\ SF_vars(Inc)
AbsInc == x' = (x + 1) % 3
AbsFairness == WF_x(AbsInc)
====
