---- MODULE TwoProperties ----
\* Found by tla_fuzz.py: one counterexample (an initial state, then stuttering) violates both
\* properties. TLC names both ("Temporal properties P and Q were violated") and writes the
\* stuttering as a state of its own; the embedded checker names the first and loops back.
EXTENDS Integers, Sequences, FiniteSets
CONSTANT Proc
VARIABLES s0, s1
vars == <<s0, s1>>
Init == s0 \in SUBSET Proc /\ s1 = <<>>
Grow(p) == /\ s1' = IF Len(s1) > 0 THEN SubSeq(s1, 1, Len(s1) - 1) ELSE s1
           /\ s0' = s0 \cup {p}
Shrink(p) == s1 # <<>> /\ s1' = Tail(s1) /\ UNCHANGED s0
Next == (\E p \in Proc : Grow(p)) \/ (\E p \in Proc : Shrink(p))
Spec == Init /\ [][Next]_vars /\ (\A p \in Proc : SF_vars(Grow(p)))
Empties == (Cardinality(s0) > 2) ~> (s0 = {})
Never == <>(s1 # <<>>)
====
