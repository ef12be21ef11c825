---------------------------- MODULE SequencesExt ----------------------------
(* Operators of the TLA+ community module SequencesExt, defined in TLA+.   *)
EXTENDS Naturals, FiniteSets, Sequences

ToSet(s) == {s[i] : i \in DOMAIN s}

Range(s) == {s[i] : i \in DOMAIN s}

SetToSeq(S) ==
    CHOOSE f \in [1..Cardinality(S) -> S] : \A i, j \in DOMAIN f : f[i] = f[j] => i = j

SetToSeqs(S) ==
    {f \in [1..Cardinality(S) -> S] : \A i, j \in DOMAIN f : f[i] = f[j] => i = j}

Contains(s, e) == \E i \in 1..Len(s) : s[i] = e

Reverse(s) == [i \in 1..Len(s) |-> s[(Len(s) - i) + 1]]

Remove(s, e) == SelectSeq(s, LAMBDA t : t # e)

ReplaceAll(s, old, new) == [i \in 1..Len(s) |-> IF s[i] = old THEN new ELSE s[i]]

InsertAt(s, i, e) == SubSeq(s, 1, i - 1) \o <<e>> \o SubSeq(s, i, Len(s))

ReplaceAt(s, i, e) == [s EXCEPT ![i] = e]

RemoveAt(s, i) == SubSeq(s, 1, i - 1) \o SubSeq(s, i + 1, Len(s))

Cons(elt, seq) == <<elt>> \o seq

Front(s) == SubSeq(s, 1, Len(s) - 1)

Last(s) == s[Len(s)]

IsPrefix(s, t) == Len(s) <= Len(t) /\ SubSeq(s, 1, Len(s)) = SubSeq(t, 1, Len(s))

IsStrictPrefix(s, t) == IsPrefix(s, t) /\ s # t

IsSuffix(s, t) == IsPrefix(Reverse(s), Reverse(t))

IsStrictSuffix(s, t) == IsSuffix(s, t) /\ s # t

Prefixes(s) == {SubSeq(s, 1, l) : l \in 0..Len(s)}

Suffixes(s) == {SubSeq(s, l, Len(s)) : l \in 1..Len(s) + 1}

CommonPrefixes(S) ==
    LET P == UNION {Prefixes(seq) : seq \in S}
    IN  {prefix \in P : \A t \in S : IsPrefix(prefix, t)}

LongestCommonPrefix(S) ==
    CHOOSE longest \in CommonPrefixes(S) :
        \A other \in CommonPrefixes(S) : Len(other) <= Len(longest)

SeqOf(set, n) == UNION {[1..m -> set] : m \in 0..n}

BoundedSeq(S, n) == SeqOf(S, n)

TupleOf(set, n) == [1..n -> set]

Indices(s) == DOMAIN s

FoldLeft(op(_, _), base, s) ==
    LET iter[i \in 0..Len(s)] == IF i = 0 THEN base ELSE op(iter[i - 1], s[i])
    IN  iter[Len(s)]

FoldRight(op(_, _), s, base) ==
    LET iter[i \in 0..Len(s)] == IF i = 0 THEN base ELSE op(s[Len(s) - i + 1], iter[i - 1])
    IN  iter[Len(s)]

FoldSeq(op(_, _), base, s) == FoldLeft(LAMBDA acc, x : op(x, acc), base, s)

FlattenSeq(seqs) == FoldLeft(LAMBDA acc, s : acc \o s, <<>>, seqs)

Zip(s, t) == [i \in 1..Len(s) |-> <<s[i], t[i]>>]

Interleave(s, t) == [i \in 1..2 * Len(s) |-> IF i % 2 = 1 THEN s[(i + 1) \div 2] ELSE t[i \div 2]]

SubSeqs(s) == {SubSeq(s, i + 1, j) : i, j \in 0..Len(s)}

ReplaceFirstSubSeq(r, s, t) ==
    IF \E i \in 0..Len(t) - Len(s) : SubSeq(t, i + 1, i + Len(s)) = s
    THEN LET i == CHOOSE i \in 0..Len(t) - Len(s) :
                    /\ SubSeq(t, i + 1, i + Len(s)) = s
                    /\ \A j \in 0..i - 1 : SubSeq(t, j + 1, j + Len(s)) # s
         IN  SubSeq(t, 1, i) \o r \o SubSeq(t, i + Len(s) + 1, Len(t))
    ELSE t
=============================================================================
