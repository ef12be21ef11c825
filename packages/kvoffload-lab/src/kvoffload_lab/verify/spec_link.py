"""The link between the declared lifecycles and the TLA+ spec, as checks that can fail (``kvoffload link``).

The declarations (``kvoffload.lifecycles``) are rendered as TLA+ modules (``RequestLifecycle.tla``,
``JobLifecycle.tla``, by :mod:`kvoffload_lab.statemachine.lifecycle_tla`) that
``tla/KVOffloadRefinement.tla`` instances; that module extends ``tla/KVOffload.tla`` and states how
each of its actions moves requests and jobs. Three checks, all run by ``make tla``:

1. **current**: the committed modules equal a fresh rendering of the declarations (a declaration
   changed without ``kvoffload link tla --write`` fails here, naming the file);
2. **refinement**: with modules rendered from the declarations given, ``KVOffloadRefinement.cfg``
   (properties ``FollowsRequestLifecycle`` and ``FollowsJobLifecycle``) passes: every action of the
   spec moves every request and job only along declared edges, or along the composite steps the
   spec names (a removed edge fails here, with the action that takes it);
3. **coverage**: every declared request edge is taken by some action of the spec, in a one-request
   model, unless the refinement module lists it in ``UnmodelledRequestEdges`` (and then it must not be taken):
   an added edge fails here. Jobs are checked for refinement only: the spec keeps no record of
   ended jobs, so their terminal edges cannot be told apart.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvoffload.lifecycles.job import JOB_LIFECYCLE
from kvoffload.lifecycles.request import REQUEST_LIFECYCLE
from kvoffload.statemachine.declaration import LifecycleDeclaration
from kvoffload_lab.statemachine.lifecycle_tla import lifecycle_module

SPEC = "KVOffload.tla"
REFINEMENT = "KVOffloadRefinement.tla"
LINK_CONFIG = "KVOffloadRefinement.cfg"
REGENERATE = "kvoffload link tla --write"
DECLARATIONS: tuple[LifecycleDeclaration, ...] = (REQUEST_LIFECYCLE, JOB_LIFECYCLE)
SOURCES = {
    REQUEST_LIFECYCLE.name: "src/kvoffload/lifecycles/request.py",
    JOB_LIFECYCLE.name: "src/kvoffload/lifecycles/job.py",
}
# One request, one chunk, one CPU block: every request edge of the spec is reachable, in well
# under a second per edge.
COVERAGE_MODEL = """CONSTANTS
    Requests = {r1}
    NumChunks = 1
    CpuBlocks = 1
    EagerSignal = FALSE
"""


@dataclass
class LinkReport:
    """What the link checks found; ``problems`` empty means the link holds."""

    problems: list[str] = field(default_factory=list)
    covered_edges: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def rendered_modules(declarations: Sequence[LifecycleDeclaration]) -> list[tuple[str, str, str]]:
    """``(declaration name, file name, text)`` of every declaration's generated module."""
    out = []
    for declaration in declarations:
        name, text = lifecycle_module(declaration, SOURCES.get(declaration.name, ""), REGENERATE)
        out.append((declaration.name, f"{name}.tla", text))
    return out


def write_modules(declarations: Sequence[LifecycleDeclaration], directory: Path) -> list[Path]:
    """Write the generated modules into ``directory``; returns their paths."""
    paths = []
    for _, file_name, text in rendered_modules(declarations):
        path = directory / file_name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def stale_modules(declarations: Sequence[LifecycleDeclaration], tla_dir: Path) -> list[str]:
    """A problem for every committed module that differs from its declaration's rendering."""
    problems = []
    for declared, file_name, text in rendered_modules(declarations):
        path = tla_dir / file_name
        if not path.exists():
            problems.append(f"{path}: missing; write it with `kvoffload link {tla_dir} --write`")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(
                f"{path}: differs from the {declared} declaration ({SOURCES.get(declared, 'kvoffload.lifecycles')}); "
                f"regenerate it with `kvoffload link {tla_dir} --write`"
            )
    return problems


def _workspace(declarations: Sequence[LifecycleDeclaration], tla_dir: Path, into: Path) -> Path:
    """A copy of the spec (and its link model) with modules rendered from ``declarations``."""
    for name in (SPEC, REFINEMENT, LINK_CONFIG):
        shutil.copy(tla_dir / name, into / name)
    write_modules(declarations, into)
    return into / REFINEMENT


def refinement_problems(declarations: Sequence[LifecycleDeclaration], tla_dir: Path) -> list[str]:
    """Check ``KVOffloadRefinement.cfg`` against modules rendered from ``declarations``."""
    from tlacheck import check_model

    with tempfile.TemporaryDirectory() as scratch:
        spec = _workspace(declarations, tla_dir, Path(scratch))
        result = check_model(spec, spec.with_name(LINK_CONFIG))
    if result.result == "success":
        return []
    if result.violated is None:
        return [f"{tla_dir / LINK_CONFIG}: {result.result}: {result.message}"]
    action = result.trace[-1].action if result.trace else "?"
    return [
        f"{tla_dir / REFINEMENT}: {result.violated} is violated: action {action} (state {len(result.trace)} of the "
        f"counterexample) moves an instance along an edge its declaration does not have"
    ]


def _edge_check(spec: Path, source: str, trigger: str, dest: str, listed_check: bool) -> str:
    """The outcome of one coverage run: ``listed``, ``taken`` or ``never taken``."""
    from tlacheck import check_model

    edge = f'<<"{source}", "{trigger}", "{dest}">>'
    spec.with_name("LinkCheck.tla").write_text(
        f"""---- MODULE LinkCheck ----
EXTENDS KVOffloadRefinement
\\* Over a variable, so that it is an invariant of every state: a constant invariant that is FALSE
\\* is refused before the search, by TLC and the embedded checker alike.
NotListed == DOMAIN sched = Requests => {edge} \\notin UnmodelledRequestEdges
Takes == \\E r \\in Requests : sched[r] = "{source}" /\\ sched'[r] = "{dest}"
NeverTaken == [][~Takes]_vars
====
""",
        encoding="utf-8",
    )
    cfg = spec.with_name("LinkCheck.cfg")
    invariant = "INVARIANT NotListed\n" if listed_check else ""
    cfg.write_text(f"INIT Init\nNEXT Next\n{COVERAGE_MODEL}{invariant}PROPERTY NeverTaken\n", encoding="utf-8")
    result = check_model(spec.with_name("LinkCheck.tla"), cfg)
    if result.violated == "NotListed":
        return "listed"
    return "taken" if result.violated == "NeverTaken" else "never taken"


def coverage_problems(declarations: Sequence[LifecycleDeclaration], tla_dir: Path) -> tuple[list[str], int]:
    """A problem for every declared request edge the spec never takes and does not list as unmodelled,
    and for every listed one it takes after all; also the number of edges taken."""
    problems: list[str] = []
    covered = 0
    declaration = next(d for d in declarations if d.name == REQUEST_LIFECYCLE.name)
    with tempfile.TemporaryDirectory() as scratch:
        spec = _workspace(declarations, tla_dir, Path(scratch))
        for source, trigger, transition in declaration.edges():
            edge = f"{source} --{trigger}--> {transition.dest}"
            outcome = _edge_check(spec, source, trigger, transition.dest, listed_check=True)
            if outcome == "taken":
                covered += 1
            elif outcome == "never taken":
                problems.append(
                    f"{tla_dir / REFINEMENT}: declared {declaration.name} edge {edge} is taken by no action; model it, "
                    f"or list it in UnmodelledRequestEdges with the reason"
                )
            elif _edge_check(spec, source, trigger, transition.dest, listed_check=False) == "taken":
                problems.append(
                    f"{tla_dir / REFINEMENT}: {edge} is listed in UnmodelledRequestEdges but an action takes it"
                )
    return problems, covered


def check_link(tla_dir: Path, declarations: Sequence[LifecycleDeclaration] = DECLARATIONS) -> LinkReport:
    """Every check of the module docstring, for ``declarations`` (a request and a job lifecycle)
    against the spec in ``tla_dir``."""
    report = LinkReport(stale_modules(declarations, tla_dir))
    report.problems += refinement_problems(declarations, tla_dir)
    problems, report.covered_edges = coverage_problems(declarations, tla_dir)
    report.problems += problems
    return report
