---- MODULE InitialViolation ----
\* Found by tla_fuzz.py: TLC reports an invariant broken by an initial state without a
\* "State 1:" header and without statistics; the runner read no trace from it.
EXTENDS Integers
VARIABLES x, y
Init == x \in 0..2 /\ y = 0
Next == x' = (x + 1) % 3 /\ y' = y
NotOne == x # 1
====
