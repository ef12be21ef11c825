-------------------------------- MODULE TLAPS --------------------------------
(* The TLA+ proof system's backend pragmas. TLC skips proofs; these definitions
   only let specs that EXTEND TLAPS be parsed and model-checked. *)
SMT == TRUE
SMTT(X) == TRUE
CVC3 == TRUE
CVC3T(X) == TRUE
Yices == TRUE
YicesT(X) == TRUE
veriT == TRUE
veriTT(X) == TRUE
Z3 == TRUE
Z3T(X) == TRUE
Spass == TRUE
SpassT(X) == TRUE
Zenon == TRUE
ZenonT(X) == TRUE
Isa == TRUE
IsaT(X) == TRUE
IsaM(X) == TRUE
IsaMT(X, Y) == TRUE
Auto == TRUE
Force == TRUE
Blast == TRUE
SimpIsa == TRUE
AutoBlast == TRUE
SlowBlast == TRUE
AllProvers == TRUE
AllProversT(X) == TRUE
AllSMT == TRUE
AllSMTT(X) == TRUE
AllIsa == TRUE
AllIsaT(X) == TRUE
LS4 == TRUE
PTL == TRUE
PropositionalTemporalLogic == TRUE
SetExtensionality == TRUE
NoSetContainsEverything == TRUE
IsaWithSetExtensionality == TRUE
ExpandENABLED == TRUE
ExpandCdot == TRUE
AutoUSE == TRUE
Lambdify == TRUE
ENABLEDaxioms == TRUE
ENABLEDrewrites == TRUE
ENABLEDrules == TRUE
LevelComparison == TRUE
=============================================================================
