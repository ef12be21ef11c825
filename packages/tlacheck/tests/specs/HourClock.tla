------------------------------ MODULE HourClock ------------------------------
EXTENDS Naturals
VARIABLE hr
HCini == hr \in (1 .. 12)
HCnxt == hr' = IF hr # 12 THEN hr + 1 ELSE 1
HC == HCini /\ [][HCnxt]_hr /\ WF_hr(HCnxt)
HCUnfair == HCini /\ [][HCnxt]_hr

AlwaysReturns == []<>(hr = 1)
EventuallyNoon == <>(hr = 12)
ThreeLeadsToFour == (hr = 3) ~> (hr = 4)
Ticks == [][HCnxt]_hr
InRange == [](hr \in 1..12)
StaysAtOne == <>[](hr = 1)
Increasing == [][hr' > hr]_hr
===============================================================================
