---- MODULE GuardBranches ----
\* "States generated" (docs/tla.md): TLC counts a successor once per branch its evaluation of the
\* action takes, and a guard \E q \in S : P or P \/ Q branches once per witness or true disjunct;
\* the embedded checker counts each successor once per way the action assigns it.
EXTENDS Integers
VARIABLE x
Init == x = 0
Exists == (\E q \in {1, 2, 3} : q > 0) /\ x' = 1 - x
Or == (x = 0 \/ x = 0 \/ TRUE) /\ x' = 1 - x
Plain == x' = 1 - x
====
