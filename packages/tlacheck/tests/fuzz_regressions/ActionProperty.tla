---- MODULE ActionProperty ----
\* Found by tla_fuzz.py: a PROPERTY [][A]_v broken by a step. TLC reports "Action property Step0
\* is violated" and exits 13, its status for temporal properties; the embedded checker exited 12,
\* and the runner read TLC's 13 as a liveness failure. Both now give a safety failure, exit 13.
\* Each state's successors repeat (k is not part of the state): the property is evaluated once
\* per distinct step, and still found broken on the first step that breaks it.
EXTENDS Naturals
VARIABLE x
Init == x = 0
Next == \E k \in 1..3 : \E d \in {1, 2} : x' = (x + d) % 7
Step0 == [][x' # 3]_x
====
