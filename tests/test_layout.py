"""The package layout is the architecture: who may import whom, and no reading of another's privates.

Every package under ``src/kvoffload`` has a rule in :data:`ALLOWED`, the kvoffload packages it may
import (lazy imports inside functions included); the rules form layers, so no two packages import
each other:

- ``statemachine`` (the framework) imports nothing else of kvoffload;
- the TLA+ checker is its own distribution, ``tlacheck`` (packages/tlacheck), which never imports
  kvoffload (its own tests say so); of kvoffload, only the checkers' layers import it
  (:data:`MAY_IMPORT_THE_CHECKER`: ``verify``, ``vllm.check``, ``vllm.live``, ``benchmarks``,
  ``commands``), never the framework or the product;
- ``lifecycles`` (what must hold: the lifecycles as data and the invariants) does not depend on
  the code it judges;
- ``offload``, ``dataplane`` and ``tiers`` (the product) import no checker, simulator or command,
  and the CPU tier knows nothing of the tiers below it;
- ``dataplane`` (the worker, the mover and what moves bytes) sits above ``offload`` (the control
  plane) and imports only its shared vocabulary, ``types`` and ``errors``: never the scheduler, the
  manager or the policies; the control plane does not import the data plane;
- ``sim`` (the engine simulator) never imports ``verify`` (the explorer's models, the bug zoo, the
  spec links): a bug-zoo mutant's engine is assembled by the commands; ``verify``'s engine model
  keeps its requests as the simulator's ``SimRequest`` and follows vLLM's rules as ``sim`` writes
  them, once (``sim.vllm_rules``);
- ``tracestudy`` (the Mooncake trace through the real scheduler, bounds, oracles) builds on the
  simulator's GPU block pool; only the commands import it;
- ``vllm`` builds on both; ``benchmarks`` raise their own error and do not import the commands;
- ``commands`` import everything but the CLI, which imports only the commands.

Within the product (:data:`PRODUCT_MODULES`) no two modules import each other either, through any
chain.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import kvoffload

ROOT = Path(kvoffload.__file__).parent

FRAMEWORK = ("statemachine",)
PRODUCT = ("offload", "dataplane", "tiers", "lifecycles", *FRAMEWORK)
# package ("" is kvoffload/__init__.py, "cli" is kvoffload/cli.py) -> the packages it may import
# besides itself.
ALLOWED: dict[str, tuple[str, ...]] = {
    "": (),
    "statemachine": (),
    "lifecycles": FRAMEWORK,
    "offload": ("lifecycles", *FRAMEWORK),
    "dataplane": ("offload",),
    "tiers": ("offload", "lifecycles", *FRAMEWORK),
    "sim": PRODUCT,
    "tracestudy": ("sim", *PRODUCT),
    "verify": ("sim", *PRODUCT),
    "vllm": ("sim", "verify", *PRODUCT),
    "benchmarks": ("sim", *PRODUCT),
    "commands": ("benchmarks", "vllm", "tracestudy", "sim", "verify", *PRODUCT),
    "cli": ("commands",),
}
# (module, imported module) that breaks ALLOWED until its owner moves it, each with its reason.
def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield ".".join(("kvoffload", *parts)), path


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imports(module: str, path: Path) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, imported module, names) for every import, lazy ones inside functions included."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base, tuple(alias.name for alias in node.names)


MODULES = list(_modules())


def test_every_package_has_a_rule() -> None:
    packages = {_package(module) for module, _ in MODULES}
    assert packages == set(ALLOWED), f"packages without a rule: {sorted(packages - set(ALLOWED))}"


def test_the_rules_are_layers() -> None:
    order = list(TopologicalSorter({package: set(allowed) for package, allowed in ALLOWED.items()}).static_order())
    assert order.index("statemachine") < order.index("offload") < order.index("dataplane") < order.index("sim")
    assert order.index("sim") < order.index("tracestudy") < order.index("commands")


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[module for module, _ in MODULES])
def test_imports_follow_the_layout(module: str, path: Path) -> None:
    package = _package(module)
    allowed = (package, *ALLOWED.get(package, ()))
    wrong = []
    for line, imported, names in _imports(module, path):
        if not imported.startswith("kvoffload"):
            continue
        target = _package(imported)
        if target not in allowed:
            wrong.append(f"{path}:{line}: {module} imports {imported} (kvoffload.{package} must not)")
        private = [name for name in names if name.startswith("_") and not name.startswith("__")]
        if private and target != package:
            wrong.append(f"{path}:{line}: imports private name(s) {private} of another package")
    assert not wrong, "\n".join(wrong)


# The control plane's modules the data plane may import: the vocabulary both planes speak.
CONTROL_PLANE_SHARED = ("kvoffload.offload.types", "kvoffload.offload.errors")


def _control_plane_modules(imported: str, names: tuple[str, ...]) -> list[str]:
    """The modules of ``kvoffload.offload`` an import names (``from kvoffload.offload import x``: x)."""
    if imported == "kvoffload.offload":
        return [f"{imported}.{name}" for name in names]
    return [imported] if imported.startswith("kvoffload.offload.") else []


@pytest.mark.parametrize(
    ("module", "path"),
    [(module, path) for module, path in MODULES if _package(module) == "dataplane"],
    ids=[module for module, _ in MODULES if _package(module) == "dataplane"],
)
def test_the_data_plane_imports_only_the_control_planes_vocabulary(module: str, path: Path) -> None:
    wrong = [
        f"{path}:{line}: {module} imports {target} (the data plane imports only {CONTROL_PLANE_SHARED})"
        for line, imported, names in _imports(module, path)
        for target in _control_plane_modules(imported, names)
        if target not in CONTROL_PLANE_SHARED
    ]
    assert not wrong, "\n".join(wrong)


def test_the_data_plane_rule_sees_the_scheduler(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from kvoffload.offload import scheduler, types\nfrom kvoffload.offload.manager import X\n")
    targets = [target for _, imported, names in _imports("kvoffload.dataplane.bad", bad)
               for target in _control_plane_modules(imported, names)]
    assert [target for target in targets if target not in CONTROL_PLANE_SHARED] == [
        "kvoffload.offload.scheduler", "kvoffload.offload.manager"]


def test_importing_the_control_planes_vocabulary_loads_nothing_else_of_it() -> None:
    # What the data plane imports: kvoffload/offload/__init__.py runs first, and imports its public
    # names on first use, so the scheduler, the manager and the policies stay unloaded.
    code = ("import sys, kvoffload.offload.types, kvoffload.offload.errors\n"
            "print(' '.join(m for m in sys.modules if m.startswith('kvoffload.offload')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")])}
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=env).stdout.split()
    assert set(loaded) <= {"kvoffload.offload", *CONTROL_PLANE_SHARED}, loaded


def test_the_control_planes_public_names_resolve() -> None:
    import kvoffload.offload as offload

    missing = [name for name in offload.__all__ if name not in dir(offload) or getattr(offload, name, None) is None]
    assert not missing
    with pytest.raises(AttributeError):
        offload.NoSuchName  # noqa: B018


def _package_graph() -> dict[str, set[str]]:
    """package -> the other packages it imports, lazy imports included."""
    graph: dict[str, set[str]] = {package: set() for package in ALLOWED}
    for module, path in MODULES:
        package = _package(module)
        for _, imported, _ in _imports(module, path):
            if imported.startswith("kvoffload") and _package(imported) != package:
                graph.setdefault(package, set()).add(_package(imported))
    return graph


def test_no_import_cycle_between_packages() -> None:
    try:
        TopologicalSorter(_package_graph()).prepare()
    except CycleError as error:
        pytest.fail(f"packages import each other: {' -> '.join(error.args[1])}")


def test_the_cycle_check_sees_a_cycle() -> None:
    with pytest.raises(CycleError):
        TopologicalSorter({"sim": {"verify"}, "verify": {"sim"}}).prepare()


# The product: the packages the kvoffload distribution keeps once the lab moves out (these lab
# modules, checkers and explorers, still live in its packages). No two of its modules import each
# other through any chain, lazy imports included: such a circle is a side channel between modules.
PRODUCT_PACKAGES = ("lifecycles", "statemachine", "offload", "dataplane", "tiers", "vllm")
LAB_IN_PRODUCT_PACKAGES = tuple(f"kvoffload.{name}" for name in (
    "statemachine.explore", "statemachine.explore_parallel", "statemachine.replay", "statemachine.trace_tla",
    "statemachine.lifecycle_tla", "vllm.check", "vllm.simple", "vllm.live", "vllm.own", "vllm.harness",
    "vllm.locate"))


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _module_graph(modules: list[tuple[str, Path]]) -> dict[str, set[str]]:
    """module -> the modules of ``modules`` it imports (``from package import module`` names the
    module; any other name, the package's ``__init__``), lazy imports included."""
    known = {module for module, _ in modules}
    graph: dict[str, set[str]] = {module: set() for module in known}
    for module, path in modules:
        for _, imported, names in _imports(module, path):
            targets = {f"{imported}.{name}" if f"{imported}.{name}" in known else imported for name in names}
            graph[module] |= (targets or {imported}) & known - {module}
    return graph


PRODUCT_MODULES = [(module, path) for module, path in MODULES
                   if _package(module) in PRODUCT_PACKAGES and not _within(module, LAB_IN_PRODUCT_PACKAGES)]


def test_no_import_circle_between_the_products_modules() -> None:
    try:
        TopologicalSorter(_module_graph(PRODUCT_MODULES)).prepare()
    except CycleError as error:
        pytest.fail(f"modules import each other: {' -> '.join(error.args[1])}")


def test_the_module_circle_check_sees_a_lazy_circle_through_a_package(tmp_path: Path) -> None:
    one, two = tmp_path / "one.py", tmp_path / "two.py"
    one.write_text("from kvoffload.offload.two import X\n")
    two.write_text("def f():\n    from kvoffload.offload import one\n    return one\n")
    graph = _module_graph([("kvoffload.offload.one", one), ("kvoffload.offload.two", two)])
    assert graph == {"kvoffload.offload.one": {"kvoffload.offload.two"},
                     "kvoffload.offload.two": {"kvoffload.offload.one"}}
    with pytest.raises(CycleError):
        TopologicalSorter(graph).prepare()


def _defined_here(tree: ast.AST) -> set[str]:
    """Underscore names this module defines: attributes it assigns, functions, classes, slots."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
    return names


def _is_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


# (module, attribute) read across a boundary on purpose, each with its reason.
PRIVATE_READS_ALLOWED = {
    # redis-py has no public handle on a pooled connection's socket; the Redis tier pipelines
    # its own RESP commands on it (kvoffload.tiers.resp) instead of one round trip per key.
    ("kvoffload.tiers.redis_tier", "_sock"),
    # vLLM's connector scheduler has no public view of its per-request state or jobs in flight;
    # the check reads them in this one module, one class per vLLM version range (issue: "keep
    # those reads in one place per version range").
    ("kvoffload.vllm.check.compat", "_req_status"),
    ("kvoffload.vllm.check.compat", "_jobs"),
    ("kvoffload.vllm.check.compat", "_current_batch_jobs_to_flush"),
    # SimpleCPUOffloadConnector's manager has no public view of the GPU pool it was bound to, of its
    # mode or of lazy mode's cursor; the simple connector's checks read them in this one module.
    ("kvoffload.vllm.simple.compat", "_gpu_block_pool"),
    ("kvoffload.vllm.simple.compat", "_lazy_mode"),
    ("kvoffload.vllm.simple.compat", "_cursor"),
    # Cloning vLLM's connector for the explorer: deepcopy must re-create its locks and share its
    # shared-memory region, and the copy module's dispatch table is the only hook for types it
    # cannot copy.
    ("kvoffload.vllm.check.explorer", "_deepcopy_dispatch"),
}


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[module for module, _ in MODULES])
def test_no_module_reads_another_modules_private_attributes(module: str, path: Path) -> None:
    # ``obj._name`` is allowed on self / cls / super() (a subclass, such as a bug-zoo mutant, uses
    # its own protected hooks) and for names this module defines itself (a class's clone()).
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _defined_here(tree)
    wrong = [
        f"{path}:{node.lineno}: reads {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not _is_self(node.value)
        and node.attr not in own
        and (module, node.attr) not in PRIVATE_READS_ALLOWED
    ]
    assert not wrong, "\n".join(wrong)


def test_the_rule_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from kvoffload.verify.bugzoo import MUTANTS\n    return MUTANTS\n")
    imported = [name for _, name, _ in _imports("kvoffload.offload.bad", bad)]
    assert imported == ["kvoffload.verify.bugzoo"]
    assert _package(imported[0]) not in ALLOWED["offload"]


# The TLA+ checker's distribution, and the kvoffload modules that may import it (a module, or a
# package and everything under it): the checkers' layers, never the framework or the product.
CHECKER = "tlacheck"
MAY_IMPORT_THE_CHECKER = ("kvoffload.verify", "kvoffload.vllm.check", "kvoffload.vllm.live", "kvoffload.benchmarks",
                          "kvoffload.commands")


def _may_import_the_checker(module: str) -> bool:
    return any(module == allowed or module.startswith(allowed + ".") for allowed in MAY_IMPORT_THE_CHECKER)


def _checker_imports(module: str, path: Path) -> list[str]:
    return [f"{path}:{line}: {module} imports {imported} (only {', '.join(MAY_IMPORT_THE_CHECKER)} may)"
            for line, imported, _ in _imports(module, path)
            if imported.split(".")[0] == CHECKER and not _may_import_the_checker(module)]


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[module for module, _ in MODULES])
def test_only_the_checkers_layers_import_the_tla_checker(module: str, path: Path) -> None:
    wrong = _checker_imports(module, path)
    assert not wrong, "\n".join(wrong)


def test_the_checker_rule_sees_the_framework_and_the_product_import_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import tlacheck\n\ndef f():\n    from tlacheck.result import CheckResult\n    return CheckResult\n")
    for module in ("kvoffload.statemachine.bad", "kvoffload.offload.bad", "kvoffload.vllm.connector_bad",
                   "kvoffload.verifyx"):
        assert len(_checker_imports(module, bad)) == 2, module
    assert _checker_imports("kvoffload.vllm.live.bad", bad) == []
    assert _checker_imports("kvoffload.commands.tla", bad) == []
