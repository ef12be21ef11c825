---- MODULE PartialLivenessCheck ----
\* Found by tla_fuzz.py (2,000 specs, 3 jobs, a loaded machine): both engines find Prop0 violated,
\* but TLC reported 196 distinct states and depth 3 (the embedded checker 240 and 4). TLC checks
\* liveness on the state space found so far at its periodic progress reports, and stops at the
\* first violation, so its counts depend on timing. The runner passes -lncheck final: liveness is
\* checked once, on the complete state space (TLC alone: 240 states, depth 4, either way).
EXTENDS Integers, Sequences, FiniteSets, TLC
CONSTANT Proc
VARIABLES s0, s1, f2, s3
vars == <<s0, s1, f2, s3>>
Bump(v) == (v + 1) % 3
Small(v) == v <= 2
Put(v, w) == v' = w
Keep(v) == UNCHANGED v
RECURSIVE Total(_)
Total(S) == IF S = {} THEN 0 ELSE LET e == CHOOSE e \in S : TRUE IN f2[e] + Total(S \ {e})
Init ==
    /\ s0 = {}
    /\ s1 = {}
    /\ f2 \in [Proc -> 0..2]
    /\ s3 \in SUBSET Proc
A0(p) ==
    /\ Small(Total(Proc))
    /\ s3' = {q \in Proc : q \in s3}
    /\ s1' = s1 \cup {p}
    /\ UNCHANGED <<s0, f2>>
A1 ==
    /\ s0' = {q \in Proc : 0 < Cardinality(s1)}
    /\ UNCHANGED <<s1, f2, s3>>
A2 ==
    /\ s1' = {q \in Proc : s0 = {}}
    /\ Keep(<<s0, f2, s3>>)
Next == (\E p \in Proc : A0(p)) \/ A1 \/ A2
Spec == Init /\ [][Next]_vars
Inv0 == s0 \subseteq Proc /\ s1 \subseteq Proc /\ f2 \in [Proc -> 0..2] /\ s3 \subseteq Proc
Prop0 == <>[](Cardinality(s1) < Cardinality(s0))
====
