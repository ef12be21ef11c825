--------------------------- MODULE FiniteSetsExt ---------------------------
(* Operators of the TLA+ community module FiniteSetsExt, defined in TLA+.  *)
EXTENDS Naturals, FiniteSets, Functions

FoldSet(op(_, _), base, set) ==
    LET iter[s \in SUBSET set] ==
            IF s = {} THEN base
            ELSE LET x == CHOOSE x \in s : TRUE
                 IN  op(x, iter[s \ {x}])
    IN  iter[set]

ReduceSet(op(_, _), set, acc) == FoldSet(op, acc, set)

MapThenFoldSet(op(_, _), base, f(_), choose(_), S) ==
    LET iter[s \in SUBSET S] ==
            IF s = {} THEN base
            ELSE LET x == choose(s)
                 IN  op(f(x), iter[s \ {x}])
    IN  iter[S]

Sum(set) == FoldSet(LAMBDA x, y : x + y, 0, set)

Product(set) == FoldSet(LAMBDA x, y : x * y, 1, set)

MapThenSumSet(op(_), set) == FoldSet(LAMBDA x, y : op(x) + y, 0, set)

Max(S) == CHOOSE x \in S : \A y \in S : x >= y

Min(S) == CHOOSE x \in S : \A y \in S : x <= y

Quantify(S, P(_)) == Cardinality({s \in S : P(s)})

kSubset(k, S) == {s \in SUBSET S : Cardinality(s) = k}

SymDiff(A, B) == (A \ B) \cup (B \ A)

Flatten(S) == UNION S

Choose(S) == CHOOSE x \in S : TRUE

IsInjectiveOn(f(_), S) == \A x, y \in S : f(x) = f(y) => x = y
=============================================================================
