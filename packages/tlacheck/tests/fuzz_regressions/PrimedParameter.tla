---- MODULE PrimedParameter ----
\* Found on a public example (a protocol that loses messages with Lose(q) == ... q' = ...):
\* an operator primes its parameter and a call passes a variable. TLA+ substitutes the argument,
\* so Drop(a) assigns a'. The embedded checker read q' as the value of q, so the step never
\* happened: a deadlock in the initial state, where TLC finds NotEmpty violated after two steps.
EXTENDS Naturals, Sequences
VARIABLES a, b
vars == <<a, b>>
Init == a = <<1, 2>> /\ b = <<3>>
Drop(q) == q # <<>> /\ q' = Tail(q)
Keep(q) == UNCHANGED q
Next == (Drop(a) /\ Keep(b)) \/ (Drop(b) /\ Keep(a))
NotEmpty == a # <<>>
====
