---- MODULE LaterModules ----
\* Extends a module written after it in this file (braf of the corpus does so), as SANY allows.
EXTENDS Naturals, Limits
VARIABLE x
Init == x = 0
Next == x < Top /\ x' = x + 1
Bounded == x <= Top
====

---- MODULE Limits ----
EXTENDS Naturals
Top == 3
====
