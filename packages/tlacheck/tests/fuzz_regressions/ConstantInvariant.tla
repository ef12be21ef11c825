---- MODULE ConstantInvariant ----
\* Found by tla_fuzz.py: an invariant that reads no variable and is FALSE. TLC evaluates it once,
\* before the search, and refuses the model (a config error); the embedded checker reported a
\* violation in the first initial state.
EXTENDS Integers
CONSTANT Proc
VARIABLE x
Init == x \in 0..1
Next == x' = 1 - x
Never == \A q \in Proc : 0 # 0
====
