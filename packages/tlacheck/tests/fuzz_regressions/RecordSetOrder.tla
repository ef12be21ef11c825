---- MODULE RecordSetOrder ----
\* Found by tla_fuzz.py: TLC enumerates [n: 0..2, b: BOOLEAN] with the last field written varying
\* fastest; the embedded checker enumerated it sorted by field name (n fastest), so it met the
\* deadlocking initial state (n = 2) after expanding another number of states than TLC.
EXTENDS Integers
VARIABLES r, k
Init == r \in [n: 0..2, b: BOOLEAN] /\ k = 0
Step == r.n # 2 /\ r' = [r EXCEPT !.n = 1] /\ k' = (k + 1) % 3
Next == Step
====
