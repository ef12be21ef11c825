---- MODULE Helper ----
EXTENDS Naturals
CONSTANT K
Step == K
Double(v) == v + v
LOCAL Hidden == 1
====
