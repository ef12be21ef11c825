---- MODULE PropertyAsInvariant ----
\* Found by tla_fuzz.py: a PROPERTY []P broken by an initial state. TLC checks it as an invariant
\* and names it by its formula ("Invariant b is violated by the initial state"), not by the
\* property's name; the embedded checker names the property (Always). With a second property
\* (Later) the runner cannot tell which one TLC meant: the embedded checker's must be among them.
\* A []P whose P is no plain name TLC names by the property's name (found so, fuzzing).
EXTENDS Naturals
VARIABLES n, b
vars == <<n, b>>
Init == n = 0 /\ b \in BOOLEAN
Next == n' = (n + 1) % 2 /\ b' = ~b
Spec == Init /\ [][Next]_vars
Small == n < 2
Always == [](b)
Later == <>(n = 1)
====
