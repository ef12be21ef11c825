-------------------------------- MODULE Deadlock --------------------------------
(* Two workers take two locks in opposite orders: the classic deadlock. *)
VARIABLES a, b
Init == a = "free" /\ b = "free"
P1TakeA == a = "free" /\ a' = "p1" /\ UNCHANGED b
P1TakeB == a = "p1" /\ b = "free" /\ b' = "p1" /\ UNCHANGED a
P1Release == a = "p1" /\ b = "p1" /\ a' = "free" /\ b' = "free"
P2TakeB == b = "free" /\ b' = "p2" /\ UNCHANGED a
P2TakeA == b = "p2" /\ a = "free" /\ a' = "p2" /\ UNCHANGED b
P2Release == a = "p2" /\ b = "p2" /\ a' = "free" /\ b' = "free"
Next == P1TakeA \/ P1TakeB \/ P1Release \/ P2TakeB \/ P2TakeA \/ P2Release
================================================================================
