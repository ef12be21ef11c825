---- MODULE ModelValueOrder ----
\* Found while fixing RecordSetOrder: TLC orders model values as the config first names them
\* (Proc = {p1, p0}: p1 first), so CHOOSE picks p1 and p1's function values vary slowest; the
\* embedded checker ordered them by name.
EXTENDS Integers
CONSTANTS Proc, p0
VARIABLES leader, f
Init == leader = (CHOOSE p \in Proc : TRUE) /\ f \in [Proc -> 0..1]
Next == leader' = leader /\ f' = [f EXCEPT ![leader] = 1 - @]
LeaderFirst == leader # p0
FirstZero == f[p0] = 0
====
