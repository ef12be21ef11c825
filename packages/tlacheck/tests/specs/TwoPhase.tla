------------------------------- MODULE TwoPhase -------------------------------
(* Two-phase commit, after Lamport's TwoPhase.tla. *)
CONSTANT RM
VARIABLES rmState, tmState, tmPrepared, msgs
vars == <<rmState, tmState, tmPrepared, msgs>>

Messages == [type : {"Prepared"}, rm : RM] \cup [type : {"Commit", "Abort"}]

TPTypeOK == /\ rmState \in [RM -> {"working", "prepared", "committed", "aborted"}]
            /\ tmState \in {"init", "done"}
            /\ tmPrepared \subseteq RM
            /\ msgs \subseteq Messages

TPInit == /\ rmState = [rm \in RM |-> "working"]
          /\ tmState = "init"
          /\ tmPrepared = {}
          /\ msgs = {}

TMRcvPrepared(rm) == /\ tmState = "init"
                     /\ [type |-> "Prepared", rm |-> rm] \in msgs
                     /\ tmPrepared' = tmPrepared \cup {rm}
                     /\ UNCHANGED <<rmState, tmState, msgs>>

TMCommit == /\ tmState = "init"
            /\ tmPrepared = RM
            /\ tmState' = "done"
            /\ msgs' = msgs \cup {[type |-> "Commit"]}
            /\ UNCHANGED <<rmState, tmPrepared>>

TMAbort == /\ tmState = "init"
           /\ tmState' = "done"
           /\ msgs' = msgs \cup {[type |-> "Abort"]}
           /\ UNCHANGED <<rmState, tmPrepared>>

RMPrepare(rm) == /\ rmState[rm] = "working"
                 /\ rmState' = [rmState EXCEPT ![rm] = "prepared"]
                 /\ msgs' = msgs \cup {[type |-> "Prepared", rm |-> rm]}
                 /\ UNCHANGED <<tmState, tmPrepared>>

RMChooseToAbort(rm) == /\ rmState[rm] = "working"
                       /\ rmState' = [rmState EXCEPT ![rm] = "aborted"]
                       /\ UNCHANGED <<tmState, tmPrepared, msgs>>

RMRcvCommitMsg(rm) == /\ [type |-> "Commit"] \in msgs
                      /\ rmState' = [rmState EXCEPT ![rm] = "committed"]
                      /\ UNCHANGED <<tmState, tmPrepared, msgs>>

RMRcvAbortMsg(rm) == /\ [type |-> "Abort"] \in msgs
                     /\ rmState' = [rmState EXCEPT ![rm] = "aborted"]
                     /\ UNCHANGED <<tmState, tmPrepared, msgs>>

TPNext == \/ TMCommit \/ TMAbort
          \/ \E rm \in RM :
               \/ TMRcvPrepared(rm) \/ RMPrepare(rm) \/ RMChooseToAbort(rm)
               \/ RMRcvCommitMsg(rm) \/ RMRcvAbortMsg(rm)

TPSpec == TPInit /\ [][TPNext]_vars

TCConsistent == \A rm1, rm2 \in RM : ~ /\ rmState[rm1] = "aborted"
                                       /\ rmState[rm2] = "committed"
===============================================================================
