---- MODULE Deadlock ----
\* Found by tla_fuzz.py: the runner named a deadlock "deadlock", the embedded checker "Deadlock".
EXTENDS Integers
VARIABLE x
Init == x = 0
Next == x < 2 /\ x' = x + 1
====
