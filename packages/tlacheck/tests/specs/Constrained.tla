------------------------------ MODULE Constrained ------------------------------
(* An unbounded walk made finite by a state CONSTRAINT and an ACTION_CONSTRAINT. *)
EXTENDS Integers
VARIABLES x, y
Init == x = 0 /\ y \in {0, 1}
Next == \/ x' = x + 1 /\ y' = y
        \/ x' = x + 2 /\ y' = 1 - y
        \/ x' = x - 1 /\ UNCHANGED y
Bound == x <= 6 /\ x >= -2
NoBigDrop == x' >= x - 1
Small == x < 100
===============================================================================
