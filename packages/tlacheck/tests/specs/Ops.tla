---- MODULE Ops ----
EXTENDS Naturals, Sequences, TLC
CONSTANTS Lim, Impl
VARIABLE x
a (+) b == (a + b) % 5
INSTANCE Helper WITH K <- Lim
Seven == 7
Init == x = 0
Next == x' = x (+) Step
Inv == /\ ENABLED Next
       /\ Double(x) = 2 * x
       /\ Impl = 7
       /\ "ab" \o "c" = "abc"
       /\ PrintT(x)
====
