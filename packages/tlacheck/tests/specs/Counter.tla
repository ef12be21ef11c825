------------------------------- MODULE Counter -------------------------------
(* A bounded counter, instantiated by InstanceSpec. *)
EXTENDS Naturals
CONSTANT Limit
VARIABLE c
CInit == c = 0
Inc == c < Limit /\ c' = c + 1
Reset == c = Limit /\ c' = 0
CNext == Inc \/ Reset
InRange == c \in 0..Limit
===============================================================================
