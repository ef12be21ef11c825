"""Random small TLA+ specs inside the embedded checker's supported subset (hypothesis strategy),
for the differential fuzzing of the embedded checker against TLC (`tla_fuzz.py`).

A spec has two to four variables, each of one kind: an integer in ``0..M``, a boolean, a subset
of the constant set ``Proc``, a function ``[Proc -> 0..M]``, a record ``[n: 0..M, b: BOOLEAN]``,
a sequence over ``0..M`` of length at most ``L`` (initially drawn from ``Seq(0..M)`` under a
bound: ``BSeq(S)``, the sequences up to ``L`` long, intersected with ``Seq(S)``, or substituted
for ``Seq`` by the config), a function of pairs ``[Proc -> (0..M) \\X BOOLEAN]`` (updated through
two-level ``EXCEPT`` paths such as ``![p][1]``), a set of records of model values
``SUBSET [src: Proc, ok: BOOLEAN]`` (read through ``UNION``, ``SUBSET`` and set maps) or a record
of a function ``[f: [Proc -> 0..M], c: 0..M]`` (``![p].f``-style paths, invariants over both).
Every update keeps a variable inside its kind's finite domain (``% (M + 1)``, a length guard), so
every state space is finite and small. Actions (some with a parameter ``p \\in Proc``) are
guards and updates built from ``\\E``, ``IF``, ``CASE``, ``UNCHANGED``, ``EXCEPT``, operators with
parameters, ``LET`` (in expressions, and around an update whose guard reads the definition
first, beside a definition memoised on ``p``), recursive operators, and ``Near(v)``, whose LET
mixes definitions memoised on ``v`` with ones that read variables or read each other; invariants,
action properties (``[][A => P']_vars``), deadlock on or off, ``WF``/``SF`` fairness with temporal
properties, and ``SYMMETRY`` on ``Proc`` (then without liveness, and nothing names one of its
elements).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import strategies as st

KINDS = ("int", "bool", "set", "fun", "rec", "seq", "grid", "msgs", "recfun")
# The kinds with the largest domains: at most one of each, and two of them, in a spec.
BIG = ("fun", "seq", "grid", "recfun")


def _text(text: str) -> Callable[[], str]:
    """An option that needs no further draws."""
    return lambda: text


@dataclass(frozen=True)
class Variable:
    name: str
    kind: str


@dataclass
class GeneratedSpec:
    """One random model: the module's and the config's text, what it is built from, and the
    PYTHONHASHSEED the embedded checker runs it under."""

    module: str
    config: str
    constructs: set[str] = field(default_factory=set)
    hash_seed: int = 0


class _Builder:
    """Draws expressions for one spec; records the constructs it used."""

    def __init__(self, draw: st.DrawFn, variables: list[Variable], top: int, length: int) -> None:
        self.draw = draw
        self.variables = variables
        self.top = top  # M: integers range over 0..M
        self.length = length  # L: sequences are at most L long
        self.used: set[str] = set()
        self.lets = 0  # LET names are unique in a spec: SANY rejects a name defined twice in a scope
        self.calls_near = False  # whether an expression called Near(v) (then the module defines it)

    def of(self, kind: str) -> list[Variable]:
        return [v for v in self.variables if v.kind == kind]

    def pick(self, options: list[str]) -> str:
        return self.draw(st.sampled_from(options))

    def choose(self, options: list[Callable[[], str]]) -> str:
        """Builds only the option drawn. (Building every option and then picking one cost about a
        thousand draws a spec, most of the fuzzing's time.)"""
        expression = self.draw(st.sampled_from(options))()
        self._note(expression)
        return expression

    def integer(self, bound: list[str], depth: int = 0) -> str:
        """An integer expression (not necessarily in 0..M)."""
        options: list[Callable[[], str]] = [lambda: str(self.draw(st.integers(0, self.top)))]
        options += [_text(v.name) for v in self.of("int")]
        options += [_text(f"Len({v.name})") for v in self.of("seq")]
        options += [_text(f"Cardinality({v.name})") for v in self.of("set")]
        options += [_text(f"{v.name}.n") for v in self.of("rec")]
        options += [_text(f"{v.name}[{b}]") for v in self.of("fun") for b in bound]
        options += [_text(f"{v.name}[{b}][1]") for v in self.of("grid") for b in bound]
        options += [_text(f"{v.name}.c") for v in self.of("recfun")]
        options += [_text(f"{v.name}.f[{b}]") for v in self.of("recfun") for b in bound]
        options += [_text(f"Cardinality({v.name})") for v in self.of("msgs")]
        options += [_text(f"Cardinality({{r.src : r \\in {v.name}}})") for v in self.of("msgs")]
        # SANY applies UNION and SUBSET before the set operator that follows them.
        options += [_text(f"Cardinality(UNION {{{{r.src}} : r \\in {v.name}}} \\cup {{{b}}})")
                    for v in self.of("msgs") for b in bound]
        options += [_text(f"Cardinality(UNION {{{{r.src}} : r \\in {v.name}}} \\ {w.name})")
                    for v in self.of("msgs") for w in self.of("set")]
        options += [_text(f"Cardinality(UNION {{{{r.src}} : r \\in {v.name}}} \\cup {{q \\in Proc : "
                          f"[src |-> q, ok |-> TRUE] \\in {v.name}}})") for v in self.of("msgs") if "q" not in bound]
        options += [_text(f"Cardinality(SUBSET {{r.src : r \\in {v.name}}} \\ {{{{}}}})") for v in self.of("msgs")]
        if self.of("fun"):
            options.append(_text("Total(Proc)"))
        if self.of("seq"):
            options.append(_text(f"SeqSum({self.of('seq')[0].name})"))
        if depth < 2:
            def sub() -> str:
                return self.integer(bound, depth + 1)

            def let() -> str:
                self.lets += 1
                name = f"t{self.lets}"
                return f"(LET {name} == {sub()} IN {name} * 2)"

            def near() -> str:
                self.calls_near = True
                return f"Near({sub()})"

            options += [lambda: f"Bump({sub()})", lambda: f"({sub()} + {sub()})", lambda: f"({sub()} - 1)", let,
                        lambda: f"(IF {self.boolean(bound, depth + 1)} THEN {sub()} ELSE 0)", near]
            if "q" not in bound:
                options.append(lambda: f"Cardinality({{q \\in Proc : {self.boolean(['q'], depth + 1)}}})")
        return self.choose(options)

    def boolean(self, bound: list[str], depth: int = 0) -> str:
        """A boolean expression."""
        def integer() -> str:
            return self.integer(bound, depth + 1)

        options: list[Callable[[], str]] = [
            lambda: f"{integer()} {self.pick(['=', '#', '<', '<='])} {integer()}", lambda: f"Small({integer()})"]
        options += [_text(v.name) for v in self.of("bool")]
        options += [_text(f"{v.name}.b") for v in self.of("rec")]
        options += [_text(f"{v.name}[{b}][2]") for v in self.of("grid") for b in bound]
        options += [_text(f"{b} \\in {v.name}") for v in self.of("set") for b in bound]
        options += [_text(f"{v.name} = {{}}") for v in self.of("set")]
        options += [_text(f"{v.name} = <<>>") for v in self.of("seq")]
        options += [_text(f"{v.name} \\in Seq(0..{self.top - 1}) \\cap Seq(0..{self.top})") for v in self.of("seq")]
        options += [_text(f"{{{v.name}}} \\subseteq Seq({{0}})") for v in self.of("seq")]
        options += [_text(f"{v.name} \\in [1..Len({v.name}) -> 0..{self.top}] \\ Seq({{0}})") for v in self.of("seq")]
        options += [_text(f"(\\A q \\in Proc : {v.name}.f[q] <= {v.name}.c)") for v in self.of("recfun")
                    if "q" not in bound]
        options += [_text(f"{v.name} = [f |-> {v.name}.f, c |-> {v.name}.c]") for v in self.of("recfun")]
        options += [_text(f"{v.name}.f[{b}] = {v.name}.c") for v in self.of("recfun") for b in bound]
        options += [_text(f"(\\A r \\in {v.name} : r.ok)") for v in self.of("msgs")]
        options += [_text(f"{v.name} = {{}}") for v in self.of("msgs")]
        options += [_text(f"(\\E r \\in {v.name} : r.src = {b})") for v in self.of("msgs") for b in bound]
        options += [_text(f"[src |-> {b}, ok |-> TRUE] \\in {v.name}") for v in self.of("msgs") for b in bound]
        if depth < 2:
            def sub() -> str:
                return self.boolean(bound, depth + 1)

            options += [lambda: f"~({sub()})", lambda: f"({sub()} /\\ {sub()})", lambda: f"({sub()} \\/ {sub()})",
                        lambda: f"({sub()} => {sub()})"]
            if "q" not in bound:
                options += [lambda: f"(\\A q \\in Proc : {self.boolean([*bound, 'q'], depth + 1)})",
                            lambda: f"(\\E q \\in Proc : {self.boolean([*bound, 'q'], depth + 1)})"]
        return self.choose(options)

    def _note(self, expression: str) -> None:
        for marker, construct in (("\\E", "exists"), ("\\A", "forall"), ("IF ", "if"), ("LET ", "let"),
                                  ("Bump(", "operator with parameters"), ("Small(", "operator with parameters"),
                                  ("Total(", "recursive operator"), ("SeqSum(", "recursive operator"),
                                  ("Near(", "memoised LET definitions"), ("UNION ", "UNION"),
                                  ("SUBSET ", "SUBSET"), ("\\cap Seq(", "Seq(S) intersected"),
                                  (".f[", "record of a function")):
            if marker in expression:
                self.used.add(construct)

    def modular(self, bound: list[str]) -> str:
        return f"({self.integer(bound)}) % {self.top + 1}"

    def update(self, variable: Variable, bound: list[str]) -> str:
        """``x' = ...`` (or ``\\E``/``\\in`` choices) keeping ``variable`` in its domain."""
        x, m = variable.name, self.top + 1
        p = bound[0] if bound else None
        options: list[tuple[str, Callable[[], str]]]
        if variable.kind == "int":
            options = [("assign", lambda: f"{x}' = {self.modular(bound)}"),
                       ("if", lambda: f"{x}' = IF {self.boolean(bound)} THEN {self.modular(bound)} ELSE {x}"),
                       ("case", lambda: f"{x}' = CASE {self.boolean(bound)} -> {self.modular(bound)} "
                                        f"[] {self.boolean(bound)} -> {self.draw(st.integers(0, self.top))} "
                                        f"[] OTHER -> {x}"),
                       ("exists", _text(f"\\E v \\in 0..{self.top} : v # {x} /\\ {x}' = v")),
                       ("primed parameter", lambda: f"Put({x}, {self.modular(bound)})")]
        elif variable.kind == "bool":
            options = [("assign", _text(f"{x}' = ~{x}")), ("assign", lambda: f"{x}' = ({self.boolean(bound)})"),
                       ("in", _text(f"{x}' \\in BOOLEAN")),
                       ("primed parameter", _text(f"Put({x}, ~{x})"))]
        elif variable.kind == "set":
            options = [("assign", lambda: f"{x}' = {{q \\in Proc : {self.boolean(['q'])}}}"),
                       ("assign", _text(f"{x}' = {{}}"))]
            if p:
                options += [("assign", _text(f"{x}' = {x} \\cup {{{p}}}")), ("assign", _text(f"{x}' = {x} \\ {{{p}}}")),
                            ("if", _text(f"{x}' = IF {p} \\in {x} THEN {x} \\ {{{p}}} ELSE {x} \\cup {{{p}}}"))]
        elif variable.kind == "fun":
            options = [("assign", _text(f"{x}' = [q \\in Proc |-> ({x}[q] + 1) % {m}]")),
                       ("except", _text(f"\\E q \\in Proc : {x}' = [{x} EXCEPT ![q] = 0]"))]
            if p:
                options += [("except", _text(f"{x}' = [{x} EXCEPT ![{p}] = (@ + 1) % {m}]")),
                            ("except", lambda: f"{x}' = [{x} EXCEPT ![{p}] = {self.modular(bound)}]")]
        elif variable.kind == "grid":
            options = [("assign", _text(f"{x}' = [q \\in Proc |-> <<({x}[q][1] + 1) % {m}, {x}[q][2]>>]")),
                       ("nested except", _text(f"\\E q \\in Proc : {x}' = [{x} EXCEPT ![q][1] = 0]"))]
            if p:
                options += [("nested except", _text(f"{x}' = [{x} EXCEPT ![{p}][1] = (@ + 1) % {m}]")),
                            ("nested except", _text(f"{x}' = [{x} EXCEPT ![{p}][2] = ~@]")),
                            ("nested except", lambda: f"{x}' = [{x} EXCEPT ![{p}][1] = {self.modular(bound)}, "
                                                      f"![{p}][2] = {self.boolean(bound)}]"),
                            ("except", _text(f"{x}' = [{x} EXCEPT ![{p}] = <<@[1], ~@[2]>>]"))]
        elif variable.kind == "msgs":
            flip = f"({x} \\ {{r}}) \\cup {{[r EXCEPT !.ok = ~@]}}"
            options = [("set of records", _text(f"\\E r \\in {x} : {x}' = {x} \\ {{r}}")),
                       ("set of records", _text(f"\\E r \\in {x} : {x}' = {flip}")),
                       ("set of records", _text(f"{x}' = {{r \\in {x} : r.ok}}")),
                       ("set of records", _text(f"{x}' = {{[r EXCEPT !.ok = TRUE] : r \\in {x}}}"))]
            if p:
                options += [("set of records",
                             lambda: f"{x}' = {x} \\cup {{[src |-> {p}, ok |-> {self.boolean(bound)}]}}"),
                            ("set of records", _text(f"{x}' = {x} \\ {{[src |-> {p}, ok |-> TRUE]}}"))]
        elif variable.kind == "recfun":
            options = [("record of a function", lambda: f"{x}' = [{x} EXCEPT !.c = {self.modular(bound)}]"),
                       ("record of a function", _text(f"\\E q \\in Proc : {x}' = [{x} EXCEPT !.f[q] = 0, "
                                                      f"!.c = (@ + 1) % {m}]")),
                       ("record of a function", _text(f"{x}' = [f |-> [q \\in Proc |-> {x}.c], c |-> {x}.c]"))]
            if p:
                options += [("record of a function", _text(f"{x}' = [{x} EXCEPT !.f[{p}] = (@ + 1) % {m}]"))]
        elif variable.kind == "rec":
            options = [("except", _text(f"{x}' = [{x} EXCEPT !.n = (@ + 1) % {m}]")),
                       ("except", _text(f"{x}' = [{x} EXCEPT !.b = ~@]")),
                       ("assign", lambda: f"{x}' = [n |-> {self.modular(bound)}, b |-> {self.boolean(bound)}]")]
        else:
            options = [("assign", lambda: f"Len({x}) < {self.length} /\\ {x}' = Append({x}, {self.modular(bound)})"),
                       ("assign", _text(f"{x} # <<>> /\\ {x}' = Tail({x})")),
                       ("if", _text(f"{x}' = IF Len({x}) > 0 THEN SubSeq({x}, 1, Len({x}) - 1) ELSE {x}")),
                       ("function", _text(f"{x}' = [i \\in 1..Len({x}) |-> ({x}[i] + 1) % {m}]"))]
        construct, text = self.draw(st.sampled_from(options))
        self.used.add(construct)
        return text()

    def typing(self, variable: Variable) -> str:
        """``variable`` is in its kind's domain."""
        x, top = variable.name, self.top
        return {
            "int": f"{x} \\in 0..{top}",
            "bool": f"{x} \\in BOOLEAN",
            "set": f"{x} \\subseteq Proc",
            "fun": f"{x} \\in [Proc -> 0..{top}]",
            "grid": f"{x} \\in [Proc -> (0..{top}) \\X BOOLEAN]",
            "rec": f"{x} \\in [n: 0..{top}, b: BOOLEAN]",
            "seq": f"{x} \\in Seq(0..{top}) /\\ Len({x}) <= {self.length}",
            "msgs": f"{x} \\subseteq [src: Proc, ok: BOOLEAN]",
            "recfun": f"{x} \\in [f: [Proc -> 0..{top}], c: 0..{top}]",
        }[variable.kind]

    def initial(self, variable: Variable) -> str:
        x, top = variable.name, self.top
        fixed, chosen = {
            "int": (f"{x} = {self.draw(st.integers(0, top))}", f"{x} \\in 0..{top}"),
            "bool": (f"{x} = FALSE", f"{x} \\in BOOLEAN"),
            "set": (f"{x} = {{}}", f"{x} \\in SUBSET Proc"),
            "fun": (f"{x} = [q \\in Proc |-> 0]", f"{x} \\in [Proc -> 0..{top}]"),
            "grid": (f"{x} = [q \\in Proc |-> <<0, FALSE>>]", f"{x} \\in [Proc -> (0..{top}) \\X BOOLEAN]"),
            "rec": (f"{x} = [n |-> 0, b |-> FALSE]", f"{x} \\in [n: 0..{top}, b: BOOLEAN]"),
            "seq": (f"{x} = <<>>", self.pick([f"{x} \\in BSeq(0..{top})",
                                              f"{x} \\in Seq(0..{top}) \\cap BSeq(0..{top})",
                                              f"{x} \\in BSeq(0..{top}) \\cap Seq(0..{top})",
                                              f"{x} \\in {{s \\in BSeq(0..{top}) : s \\in Seq(0..{top})}}"])),
            "msgs": (f"{x} = {{}}", f"{x} \\in SUBSET {{[src |-> q, ok |-> FALSE] : q \\in Proc}}"),
            "recfun": (f"{x} = [f |-> [q \\in Proc |-> 0], c |-> 0]", f"{x} \\in [f: [Proc -> 0..{top}], c: {{0}}]"),
        }[variable.kind]
        return self.draw(st.sampled_from([fixed, chosen]))

    def near(self) -> str:
        """``Near(v)``: a LET whose definitions that read only ``v`` and loop are memoised on ``v``,
        beside ones that read variables (``b``), read both (``c``), or read ``v`` only where it is
        not 0 (``e``); the body reads a random selection of them."""
        top = self.top
        defs = {"a": f"{{w \\in 0..{top} : w # v}}",
                "b": f"{self.integer([], 2)} + v",  # at depth 2: no call of Near inside Near
                "c": "{w \\in a : w <= b}",
                "d": "Cardinality({w \\in a : w >= v})",
                "e": "IF v = 0 THEN {} ELSE {w \\in 1..(6 \\div v) : w = 1}"}
        terms = {"a": "Cardinality(a)", "b": "b", "c": "Cardinality(c)", "d": "d", "e": "Cardinality(e)"}
        chosen = self.draw(st.lists(st.sampled_from(sorted(terms)), min_size=1, max_size=3, unique=True))
        body = " + ".join(terms[t] for t in chosen)
        lines = "\n".join(f"        {name} == {text}" for name, text in defs.items())
        return f"Near(v) ==\n    LET\n{lines}\n    IN {body}"


@st.composite
def specs(draw: st.DrawFn) -> GeneratedSpec:
    """A random model (module ``Fuzz`` and its config)."""
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=2, max_size=4))
    # At most one function, one sequence and one function of pairs, and two of them: they have
    # the largest domains.
    for big in BIG:
        while kinds.count(big) > 1:
            kinds.remove(big)
    while sum(big in kinds for big in BIG) > 2:
        kinds.remove(next(big for big in reversed(BIG) if big in kinds))
    variables = [Variable(f"{kind[0]}{i}", kind) for i, kind in enumerate(kinds)]
    top = draw(st.integers(1, 2))
    length = 2
    size = draw(st.integers(2, 3))
    symmetric = draw(st.booleans())
    liveness = not symmetric and draw(st.booleans())
    salt = draw(st.integers(0, 2**32 - 1))
    override_seq = draw(st.booleans())
    builder = _Builder(draw, variables, top, length)
    names = [v.name for v in variables]
    funs, seqs = builder.of("fun"), builder.of("seq")

    actions: list[tuple[str, bool]] = []
    bodies = []
    for index in range(draw(st.integers(1, 3))):
        parameter = draw(st.booleans())
        bound = ["p"] if parameter else []
        changed = draw(st.lists(st.sampled_from(variables), min_size=1, max_size=len(variables), unique=True))
        guards = draw(st.sampled_from([0, 0, 1, 1, 2]))  # a guard too many disables most actions
        conjuncts = [builder.boolean(bound) for _ in range(guards)]
        if guards:
            builder.used.add("guard")
        conjuncts += [builder.update(v, bound) for v in changed]
        if draw(st.integers(0, 3)) == 0:
            # A LET around the last update, its guard reading the definition first (evaluated on
            # entry by the generated actions); a sequence's Head only where it is not empty.
            builder.lets += 1
            name = f"u{builder.lets}"
            head = [f"{v.name} # <<>> /\\ " for v in seqs if draw(st.booleans())][:1]
            definiens = f"Head({seqs[0].name})" if head else builder.integer(bound)
            # Beside it, where the action has a parameter, a definition memoised on p.
            others = f"others{builder.lets}" if parameter and draw(st.booleans()) else ""
            guard = f"{name} {builder.pick(['<=', '#', '>'])} {builder.integer(bound)}"
            if others:
                guard += f" + Cardinality({others})"
                others = f" {others} == {{q \\in Proc : q # p}}"
                builder.used.add("LET memoised on a parameter")
            conjuncts[-1] = f"{''.join(head)}(LET {name} == {definiens}{others} IN {guard} /\\ {conjuncts[-1]})"
            builder.used.add("LET around an update")
        untouched = [v.name for v in variables if v not in changed]
        if untouched:
            # Keep(v) == UNCHANGED v: an operator that primes its parameter (TLA+ substitutes it).
            keep = draw(st.sampled_from(["UNCHANGED", "Keep"]))
            conjuncts.append(f"{keep}(<<{', '.join(untouched)}>>)" if keep == "Keep"
                             else f"UNCHANGED <<{', '.join(untouched)}>>")
            builder.used.add("unchanged" if keep == "UNCHANGED" else "primed parameter")
        name = f"A{index}"
        head = f"{name}(p)" if parameter else name
        bodies.append(f"{head} ==\n" + "\n".join(f"    /\\ {c}" for c in conjuncts))
        actions.append((name, parameter))

    calls = [f"(\\E p \\in Proc : {name}(p))" if parameter else name for name, parameter in actions]
    fairness = []
    if liveness:
        for name, parameter in actions:
            kind = draw(st.sampled_from(["", "WF", "SF"]))
            if kind:
                builder.used.add(kind)
                call = f"{kind}_vars({name}(p))" if parameter else f"{kind}_vars({name})"
                # Parenthesised: a second "\\A p" inside the first one's scope would redefine p.
                fairness.append(f"(\\A p \\in Proc : {call})" if parameter else call)
    # The type invariant holds unless a checker evaluates an update wrongly; the random ones are
    # often broken (in an initial state or deeper), sometimes an implication that holds.
    invariants = [" /\\ ".join(builder.typing(v) for v in variables)] if draw(st.booleans()) else []
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2]))):
        invariants.append(draw(st.sampled_from([lambda: builder.boolean([]),
                                                lambda: f"({builder.boolean([])}) => ({builder.boolean([])})"]))())
    properties = []
    if liveness:
        for _ in range(draw(st.integers(1, 2))):
            a, b = builder.boolean([]), builder.boolean([])
            form = draw(st.sampled_from(["[]<>({a})", "<>[]({a})", "({a}) ~> ({b})", "<>({a})", "[]({a})"]))
            builder.used.add(form.replace("({a})", "P").replace("({b})", "Q"))
            properties.append(form.format(a=a, b=b))

    # Action properties hold on every step: an action implies a primed state predicate, or a state
    # predicate implies one. Safety, so with SYMMETRY too.
    steps = []
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        after = f"({builder.boolean([])})'"
        if draw(st.booleans()):
            name, parameter = draw(st.sampled_from(actions))
            builder.used.add("[][A => P']_v")
            steps.append(f"[][\\A p \\in Proc : {name}(p) => {after}]_vars" if parameter
                         else f"[][{name} => {after}]_vars")
        else:
            builder.used.add("[][P => Q']_v")
            steps.append(f"[][({builder.boolean([])}) => {after}]_vars")

    lines = ["---- MODULE Fuzz ----", "EXTENDS Integers, Sequences, FiniteSets, TLC",
             "CONSTANT Proc", f"VARIABLES {', '.join(names)}", f"vars == <<{', '.join(names)}>>",
             f"Bump(v) == (v + 1) % {top + 1}", f"Small(v) == v <= {top}", "Put(v, w) == v' = w",
             "Keep(v) == UNCHANGED v"]
    if funs:
        f = funs[0].name
        lines += ["RECURSIVE Total(_)",
                  f"Total(S) == IF S = {{}} THEN 0 ELSE LET e == CHOOSE e \\in S : TRUE IN {f}[e] + Total(S \\ {{e}})"]
    if seqs:
        lines += ["RECURSIVE SeqSum(_)", "SeqSum(s) == IF s = <<>> THEN 0 ELSE Head(s) + SeqSum(Tail(s))",
                  f"BSeq(S) == UNION {{[1..n -> S] : n \\in 0..{length}}}"]
    if builder.calls_near:
        lines.append(builder.near())
    lines.append("Init ==\n" + "\n".join(f"    /\\ {builder.initial(v)}" for v in variables))
    lines += bodies
    lines.append("Next == " + " \\/ ".join(calls))
    lines.append("Spec == Init /\\ [][Next]_vars" + "".join(f" /\\ {f}" for f in fairness))
    lines += [f"Inv{i} == {text}" for i, text in enumerate(invariants)]
    lines += [f"Prop{i} == {text}" for i, text in enumerate(properties)]
    lines += [f"Step{i} == {text}" for i, text in enumerate(steps)]
    if symmetric:
        lines.append("Sym == Permutations(Proc)")
    lines.append("====")

    elements = ", ".join(f"p{i}" for i in range(size))
    config = ["SPECIFICATION Spec", f"CONSTANT Proc = {{{elements}}}"]
    config += [f"INVARIANT Inv{i}" for i in range(len(invariants))]
    config += [f"PROPERTY Prop{i}" for i in range(len(properties))]
    config += [f"PROPERTY Step{i}" for i in range(len(steps))]
    if seqs and override_seq:
        # As MCMajority's `Seq <- BoundedSeq`: Seq(S) is then enumerable.
        config.append("CONSTANT Seq <- BSeq")
        builder.used.add("Seq overridden")
    if symmetric:
        config.append("SYMMETRY Sym")
        builder.used.add("symmetry")
    if not draw(st.booleans()):
        config.append("CHECK_DEADLOCK FALSE")
        builder.used.add("deadlock off")
    else:
        builder.used.add("deadlock on")
    if invariants:
        builder.used.add("invariant")
    builder.used.update(f"variable {v.kind}" for v in variables)
    if any(parameter for _, parameter in actions):
        builder.used.add("action with parameter")
    module, config_text = "\n".join(lines) + "\n", "\n".join(config) + "\n"
    # Hypothesis draws a few small integers far more often than the rest (0 for a spec in five):
    # hashed with the spec's text, each spec gets a seed of its own.
    digest = hashlib.sha256(f"{salt}\0{module}\0{config_text}".encode()).digest()
    return GeneratedSpec(module, config_text, builder.used, int.from_bytes(digest[:4], "big"))
