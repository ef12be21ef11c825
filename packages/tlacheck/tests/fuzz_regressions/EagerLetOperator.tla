---- MODULE EagerLetOperator ----
\* The generated action evaluated `m` on entry to the LET (the body's first conjunct begins with
\* it) and bound it as a value, but the LET operator F was compiled to read `m` as a thunk: the
\* embedded checker crashed (AttributeError) where TLC finds 3 states.
EXTENDS Integers, Sequences
VARIABLE q, x
Init == q = <<[type |-> "req", n |-> 1]>> /\ x = 0
Next == LET m == Head(q)
            F(k) == m.n + k
        IN m.type = "req" /\ x' = F(x) % 3 /\ UNCHANGED q
Inv == x < 5
====
