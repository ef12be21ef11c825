-------------------------- MODULE UndirectedGraphs --------------------------
(* Operators of the TLA+ community module UndirectedGraphs, defined in TLA+. *)
(* A graph is a record [node |-> N, edge |-> E], an edge a set of one or two  *)
(* nodes.                                                                    *)
EXTENDS Naturals, FiniteSets, Sequences

IsUndirectedGraph(G) ==
    /\ G = [node |-> G.node, edge |-> G.edge]
    /\ \A e \in G.edge : /\ Cardinality(e) \in {1, 2}
                         /\ e \subseteq G.node

IsLoopFreeUndirectedGraph(G) ==
    /\ IsUndirectedGraph(G)
    /\ \A e \in G.edge : Cardinality(e) = 2

UndirectedSubgraph(G) ==
    {H \in [node : SUBSET G.node, edge : SUBSET G.edge] : IsUndirectedGraph(H)}

Path(G) ==
    {p \in Seq(G.node) : /\ p # <<>>
                         /\ \A i \in 1..(Len(p) - 1) : {p[i], p[i + 1]} \in G.edge}

SimplePath(G) ==
    {p \in UNION {[1..k -> G.node] : k \in 1..Cardinality(G.node)} :
        /\ \A i, j \in DOMAIN p : i # j => p[i] # p[j]
        /\ \A i \in 1..(Len(p) - 1) : {p[i], p[i + 1]} \in G.edge}

\* The nodes reachable from m: the least fixed point of adding neighbours.
Reachable(m, G) ==
    LET Step(S) == S \cup {n \in G.node : \E k \in S : {k, n} \in G.edge}
        R[i \in Nat] == IF i = 0 THEN {m} ELSE Step(R[i - 1])
    IN  R[Cardinality(G.node)]

AreConnectedIn(m, n, G) == n \in Reachable(m, G)

ConnectionsIn(G) == [m, n \in G.node |-> AreConnectedIn(m, n, G)]

IsStronglyConnected(G) == \A m, n \in G.node : AreConnectedIn(m, n, G)

ConnectedComponents(G) == {Reachable(m, G) : m \in G.node}
=============================================================================
