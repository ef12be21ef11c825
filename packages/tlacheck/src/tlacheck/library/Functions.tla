----------------------------- MODULE Functions -----------------------------
(* Operators of the TLA+ community module Functions, defined in TLA+.      *)
EXTENDS Naturals, FiniteSets

Restrict(f, S) == [x \in S |-> f[x]]

RestrictDomain(f, Test(_)) == [x \in {y \in DOMAIN f : Test(y)} |-> f[x]]

RestrictValues(f, Test(_)) ==
    LET D == {x \in DOMAIN f : Test(f[x])} IN [x \in D |-> f[x]]

IsRestriction(f, g) ==
    /\ DOMAIN f \subseteq DOMAIN g
    /\ \A x \in DOMAIN f : f[x] = g[x]

Range(f) == {f[x] : x \in DOMAIN f}

Inverse(f, S, T) == [t \in T |-> CHOOSE s \in S : t \in Range(f) => f[s] = t]

AntiFunction(f) == [y \in Range(f) |-> CHOOSE x \in DOMAIN f : f[x] = y]

IsInjective(f) == \A a, b \in DOMAIN f : f[a] = f[b] => a = b

IsSurjective(f, S, T) == \A t \in T : \E s \in S : f[s] = t

IsBijection(f, S, T) == IsInjective(f) /\ IsSurjective(f, S, T)

Injection(S, T) == {M \in [S -> T] : IsInjective(M)}

Surjection(S, T) == {M \in [S -> T] : IsSurjective(M, S, T)}

Bijection(S, T) == Injection(S, T) \cap Surjection(S, T)

ExistsInjection(S, T) == Injection(S, T) # {}

ExistsSurjection(S, T) == Surjection(S, T) # {}

ExistsBijection(S, T) == Bijection(S, T) # {}

Pointwise(Op(_, _), f, g) == [x \in DOMAIN f |-> Op(f[x], g[x])]

FoldFunction(op(_, _), base, fun) ==
    LET iter[s \in SUBSET DOMAIN fun] ==
            IF s = {} THEN base
            ELSE LET x == CHOOSE x \in s : TRUE
                 IN  op(fun[x], iter[s \ {x}])
    IN  iter[DOMAIN fun]

FoldFunctionOnSet(op(_, _), base, fun, indices) ==
    LET iter[s \in SUBSET indices] ==
            IF s = {} THEN base
            ELSE LET x == CHOOSE x \in s : TRUE
                 IN  op(fun[x], iter[s \ {x}])
    IN  iter[indices]
=============================================================================
