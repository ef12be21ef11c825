------------------------------- MODULE Channel -------------------------------
(* A bounded FIFO channel between a sender and a receiver, with sequences. *)
EXTENDS Naturals, Sequences
CONSTANTS Data, Cap
VARIABLES queue, lastRcvd, sent
vars == <<queue, lastRcvd, sent>>

Init == /\ queue = <<>>
        /\ lastRcvd = "none"
        /\ sent = 0

Send(d) == /\ Len(queue) < Cap
           /\ queue' = Append(queue, d)
           /\ sent' = (sent + 1) % 3
           /\ UNCHANGED lastRcvd

Receive == /\ queue # <<>>
           /\ lastRcvd' = Head(queue)
           /\ queue' = Tail(queue)
           /\ UNCHANGED sent

Next == (\E d \in Data : Send(d)) \/ Receive

Spec == Init /\ [][Next]_vars

TypeOK == /\ queue \in Seq(Data)
          /\ Len(queue) <= Cap
          /\ lastRcvd \in Data \cup {"none"}
          /\ sent \in 0..2
\* SubSeq and \o agree with Head/Tail.
SeqLaws == queue = <<>> \/ queue = <<Head(queue)>> \o SubSeq(queue, 2, Len(queue))
===============================================================================
