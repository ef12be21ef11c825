----------------------------- MODULE InstanceSpec -----------------------------
(* Two counters from one module via named INSTANCE ... WITH, an unnamed      *)
(* INSTANCE, RECURSIVE operators, recursive functions, LET and CASE.         *)
EXTENDS Naturals, FiniteSets, TLC
CONSTANTS N
VARIABLES x, y
vars == <<x, y>>

A == INSTANCE Counter WITH c <- x, Limit <- N
B == INSTANCE Counter WITH c <- y, Limit <- N + 1

RECURSIVE SumSet(_)
SumSet(S) == IF S = {} THEN 0 ELSE LET m == CHOOSE e \in S : TRUE IN m + SumSet(S \ {m})

fact[n \in Nat] == IF n = 0 THEN 1 ELSE n * fact[n - 1]

Apply2(F(_), v) == F(F(v))
Double(v) == 2 * v

Init == A!CInit /\ B!CInit
Next == \/ A!CNext /\ UNCHANGED y
        \/ B!CNext /\ UNCHANGED x
Spec == Init /\ [][Next]_vars

Kind == CASE x = y -> "same"
          [] x < y -> "below"
          [] OTHER -> "above"

Inv == /\ A!InRange /\ B!InRange
       /\ SumSet({x, N + 10}) = IF x = N + 10 THEN x ELSE x + N + 10
       /\ fact[x] >= 1
       /\ Apply2(Double, y) = 4 * y
       /\ Apply2(LAMBDA v : v + 1, x) = x + 2
       /\ Kind \in {"same", "below", "above"}
       /\ LET s == x + y IN s >= x
       /\ Cardinality({x, y}) \in {1, 2}
\* Fails exactly when both counters are at their limits.
NotBothFull == ~(x = N /\ y = N + 1)
===============================================================================
