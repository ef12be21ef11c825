---------------------------- MODULE SequencesExtTheorems ----------------------------
EXTENDS SequencesExt, SequenceTheorems
(* Theorems only (for the TLA+ proof system): TLC skips them, and so does the
   embedded checker, so the module declares nothing a model can use. *)
=============================================================================
