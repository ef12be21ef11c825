---- MODULE LetMemoKeys ----
\* k's values were memoised in one table for the whole definition: keyed on m by the generated
\* Next (which binds m, read first, as a value) and on p by the closures evaluating Prop (m is a
\* thunk over p there). A key (1) written for m = 1 was read back for p = 1: Prop reported
\* violated, TLC: success, 4 states.
EXTENDS Integers, FiniteSets
VARIABLE x
Init == x = 0
A(p) == LET m == p + 1 IN m > 0 /\ LET k == {w \in 0..3 : w < m} IN x' = Cardinality(k)
Next == \E p \in 0..2 : A(p)
Prop == [][\A p \in 0..2 : A(p) => x' = p + 1]_x
====
