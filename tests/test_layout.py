"""The package layout is the architecture: who may import whom, and no reading of another's privates.

Two distributions share this repository, each with its own root: the product, ``kvoffload``
(src/kvoffload: what runs in a user's vLLM), and the lab, ``kvoffload_lab``
(packages/kvoffload-lab: the simulator, the explorer, the checkers, the benchmarks and the
``kvoffload`` command). **The product imports nothing of the lab**, nor what only the lab needs
(``tlacheck``, ``rich``, ``hypothesis``); the lab may import any package of the product.

Within each root every package has a rule, the packages of its root it may import (lazy imports
inside functions included; :data:`ALLOWED` for the product, :data:`LAB_ALLOWED` for the lab); the
rules form layers, so no two packages import each other:

- ``statemachine`` (the framework) imports nothing else of kvoffload;
- ``lifecycles`` (what must hold: the lifecycles as data and the invariants) does not depend on
  the code it judges;
- ``dataplane`` (the worker, the mover and what moves bytes) sits above ``offload`` (the control
  plane) and imports only its shared vocabulary, ``types`` and ``errors``: never the scheduler, the
  manager or the policies; the control plane does not import the data plane;
- the CPU tier knows nothing of the ``tiers`` below it; ``vllm`` (the integrations) builds on all;
- in the lab, the explorer (``statemachine``), ``redis_server`` and ``sim`` (the engine simulator)
  build on the product alone (the simulator starts its Redis through ``redis_server``); ``verify``
  (the explorer's models, the bug zoo, the spec links) builds on ``sim``: its engine model keeps
  its requests as the simulator's ``SimRequest`` and follows vLLM's rules as ``sim`` writes them,
  once (``sim.vllm_rules``); ``sim`` never imports ``verify``: a bug-zoo mutant's engine is
  assembled by the commands; ``tracestudy`` builds on the simulator's GPU block
  pool; ``vllm`` (vLLM's checks) builds on ``sim`` and ``verify``; ``benchmarks`` raise their own
  error and do not import the commands; ``commands`` import everything but the CLI, which imports
  only the commands;
- the TLA+ checker is its own distribution, ``tlacheck`` (packages/tlacheck), which never imports
  kvoffload (its own tests say so); only the lab's checking layers import it
  (:data:`MAY_IMPORT_THE_CHECKER`).

Within the product (:data:`PRODUCT_MODULES`) no two modules import each other either, through any
chain. Within the lab's ``vllm`` the folders follow one axis (:data:`VLLM_FOLDERS`): ``common`` imports
no connector's folder, and only ``live`` (the live check's registry) names every connector. No module
imports an underscore name from a module of another folder.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

import kvoffload
import kvoffload_lab
from check_install import LAB_ONLY, PRODUCT_ALONE_PROBE

PRODUCT, LAB = "kvoffload", "kvoffload_lab"
ROOT = Path(kvoffload.__file__).parent
LAB_ROOT = Path(kvoffload_lab.__file__).parent
ROOTS = {PRODUCT: ROOT, LAB: LAB_ROOT}

FRAMEWORK = ("statemachine",)
# The product's packages ("" is kvoffload/__init__.py) -> the product packages each may import besides
# itself.
ALLOWED: dict[str, tuple[str, ...]] = {
    "": (),
    "statemachine": (),
    "lifecycles": FRAMEWORK,
    "offload": ("lifecycles", *FRAMEWORK),
    "dataplane": ("offload",),
    "tiers": ("offload", "lifecycles", *FRAMEWORK),
    "vllm": ("tiers", "dataplane", "offload", "lifecycles", *FRAMEWORK),
}
# The lab's packages ("" is kvoffload_lab/__init__.py; cli and redis_server are modules) -> the lab
# packages each may import besides itself; every one may import any package of the product too.
LAB_ALLOWED: dict[str, tuple[str, ...]] = {
    "": (),
    "statemachine": (),
    "redis_server": (),
    "sim": ("redis_server",),
    "verify": ("sim", "statemachine"),
    "tracestudy": ("sim",),
    "benchmarks": ("sim", "redis_server"),
    "vllm": ("sim", "verify", "statemachine"),
    "commands": ("benchmarks", "vllm", "tracestudy", "sim", "verify", "statemachine", "redis_server"),
    "cli": ("commands",),
}
RULES = {PRODUCT: ALLOWED, LAB: LAB_ALLOWED}


def _modules() -> Iterator[tuple[str, Path]]:
    for root_name, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join((root_name, *parts)), path


def _root(module: str) -> str:
    return module.split(".")[0]


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
PACKAGES = {module for module, path in MODULES if path.name == "__init__.py"}


def test_every_package_has_a_rule() -> None:
    for root_name, rules in RULES.items():
        packages = {_package(module) for module, _ in MODULES if _root(module) == root_name}
        assert packages == set(rules), f"{root_name}: packages without a rule: {sorted(packages - set(rules))}"


def test_the_rules_are_layers() -> None:
    order = list(TopologicalSorter({package: set(allowed) for package, allowed in ALLOWED.items()}).static_order())
    assert order.index("statemachine") < order.index("offload") < order.index("dataplane") < order.index("vllm")
    lab = list(TopologicalSorter({package: set(allowed) for package, allowed in LAB_ALLOWED.items()}).static_order())
    assert lab.index("sim") < lab.index("tracestudy") < lab.index("commands") < lab.index("cli")


def _wrong_import(module: str, imported: str) -> str | None:
    """Why ``module`` may not import ``imported`` (a module of either root), or None when it may."""
    root, target_root = _root(module), _root(imported)
    package, target = _package(module), _package(imported)
    if root == PRODUCT and target_root == LAB:
        return "the product imports nothing of the lab"
    if root == target_root and target != package and target not in RULES[root][package]:
        return f"{root}.{package} must not"
    return None


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[module for module, _ in MODULES])
def test_imports_follow_the_layout(module: str, path: Path) -> None:
    wrong = []
    for line, imported, names in _imports(module, path):
        if _root(imported) not in ROOTS:
            continue
        why = _wrong_import(module, imported)
        if why is not None:
            wrong.append(f"{path}:{line}: {module} imports {imported} ({why})")
        private = _private_from_another_folder(module, path, imported, names)
        if private:
            wrong.append(f"{path}:{line}: imports private name(s) {private} of another folder")
    assert not wrong, "\n".join(wrong)


def _folder(module: str, path: Path) -> str:
    """The dotted folder a module lives in (a package's ``__init__`` lives in its own folder)."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _private_from_another_folder(module: str, path: Path, imported: str, names: tuple[str, ...]) -> list[str]:
    """The underscore names ``module`` imports from a module of another folder (``imported`` names a
    module, or a package whose names are its ``__init__``'s)."""
    private = [name for name in names if name.startswith("_") and not name.startswith("__")]
    folder = imported if imported in PACKAGES else imported.rpartition(".")[0]
    return private if folder != _folder(module, path) else []


def test_the_private_import_rule_sees_another_folder_of_the_same_package(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from kvoffload_lab.vllm.offloading.build import _kv_cache_tensor, LAYER\n"
                   "from kvoffload_lab.vllm.simple.compat import _private_here\n")
    found = [_private_from_another_folder("kvoffload_lab.vllm.simple.build", bad, imported, names)
             for _, imported, names in _imports("kvoffload_lab.vllm.simple.build", bad)]
    assert found == [["_kv_cache_tensor"], []]


# The lab's vLLM checks, one folder per vLLM connector on a common layer -> the folders of
# kvoffload_lab.vllm each may import besides itself. ``common`` names no connector; only ``live`` (the
# live check's registry and the driver's entry point) names them all. No connector's folder imports
# another's, but ``own``, which runs kvoffload's connector in the simple connector's engine, with its
# digest model.
VLLM = "kvoffload_lab.vllm"
VLLM_FOLDERS: dict[str, tuple[str, ...]] = {
    "": (),
    "common": (),
    "offloading": ("common",),
    "simple": ("common",),
    "own": ("common", "simple"),
    "live": ("common", "offloading", "simple"),
}


def _vllm_folder(module: str) -> str | None:
    """The folder of kvoffload_lab.vllm that ``module`` is in ("" for the package itself), or None."""
    if module != VLLM and not module.startswith(VLLM + "."):
        return None
    return module.removeprefix(VLLM).removeprefix(".").split(".")[0]


def _wrong_vllm_folder_import(module: str, imported: str) -> str | None:
    """Why ``module`` (of kvoffload_lab.vllm) may not import ``imported``, or None when it may."""
    folder, target = _vllm_folder(module), _vllm_folder(imported)
    if folder is None or target is None or target == folder or target in VLLM_FOLDERS[folder]:
        return None
    return f"{VLLM}.{folder or '__init__'} must not import {VLLM}.{target}"


VLLM_MODULES = [(module, path) for module, path in MODULES if _vllm_folder(module) is not None]


def test_every_vllm_folder_has_a_rule() -> None:
    assert {_vllm_folder(module) for module, _ in VLLM_MODULES} == set(VLLM_FOLDERS)


@pytest.mark.parametrize(("module", "path"), VLLM_MODULES, ids=[module for module, _ in VLLM_MODULES])
def test_the_vllm_folders_follow_the_axis(module: str, path: Path) -> None:
    wrong = [f"{path}:{line}: {why}" for line, imported, _ in _imports(module, path)
             if (why := _wrong_vllm_folder_import(module, imported)) is not None]
    assert not wrong, "\n".join(wrong)


def test_the_vllm_folder_rule_sees_common_import_a_connector(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from kvoffload_lab.vllm.common.findings import CRASH\n\ndef f():\n"
                   "    from kvoffload_lab.vllm.simple.live import judge\n"
                   "    from kvoffload_lab.vllm.live.registry import CONNECTORS\n    return judge, CONNECTORS\n")
    found = [_wrong_vllm_folder_import("kvoffload_lab.vllm.common.live.bad", imported)
             for _, imported, _ in _imports("kvoffload_lab.vllm.common.live.bad", bad)]
    assert found == [None, "kvoffload_lab.vllm.common must not import kvoffload_lab.vllm.simple",
                     "kvoffload_lab.vllm.common must not import kvoffload_lab.vllm.live"]
    assert _wrong_vllm_folder_import("kvoffload_lab.vllm.offloading.live.judge", "kvoffload_lab.vllm.live") == (
        "kvoffload_lab.vllm.offloading must not import kvoffload_lab.vllm.live")
    assert _wrong_vllm_folder_import("kvoffload_lab.vllm.live.registry", "kvoffload_lab.vllm.simple.live") is None
    assert _wrong_vllm_folder_import("kvoffload_lab.sim.engine", "kvoffload_lab.vllm.own") is None


def test_the_vllm_folder_rules_are_layers() -> None:
    order = list(TopologicalSorter({folder: set(allowed) for folder, allowed in VLLM_FOLDERS.items()}).static_order())
    assert order.index("common") < min(order.index(folder) for folder in ("offloading", "simple", "own", "live"))


def _lab_only_imports(module: str, path: Path) -> list[str]:
    return [f"{path}:{line}: {module} imports {imported} (only the lab may)"
            for line, imported, _ in _imports(module, path) if _root(imported) in LAB_ONLY]


PRODUCT_MODULES = [(module, path) for module, path in MODULES if _root(module) == PRODUCT]


@pytest.mark.parametrize(("module", "path"), PRODUCT_MODULES, ids=[module for module, _ in PRODUCT_MODULES])
def test_the_product_imports_nothing_of_the_lab(module: str, path: Path) -> None:
    wrong = _lab_only_imports(module, path)
    assert not wrong, "\n".join(wrong)


def test_the_lab_rule_sees_lazy_imports_of_the_lab_and_its_dependencies(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import rich\n\ndef f():\n    from kvoffload_lab.sim import engine\n    import hypothesis\n"
                   "    import tlacheck.check\n    import torch\n    return engine\n")
    assert [line.rsplit(" imports ", 1)[1] for line in _lab_only_imports("kvoffload.offload.bad", bad)] == [
        "rich (only the lab may)", "kvoffload_lab.sim (only the lab may)", "hypothesis (only the lab may)",
        "tlacheck.check (only the lab may)"]
    assert _wrong_import("kvoffload.offload.bad", "kvoffload_lab.sim") is not None
    assert _wrong_import("kvoffload_lab.sim.bad", "kvoffload.vllm.settings") is None


def test_importing_the_product_loads_nothing_of_the_lab() -> None:
    # Importlib-made imports (a module's __getattr__, f-string module names) are invisible to the
    # AST rule above; the interpreter sees them. The probe is check-install's, which runs it in an
    # install of the product alone; here the lab and its dependencies are installed, so nothing stops
    # a product module from loading them but the rule.
    import json

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PRODUCT_ALONE_PROBE % (LAB_ONLY,)], capture_output=True, text=True,
                          check=True, env=env)
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["loaded"] == [] and found["failed"] == [], found
    assert "kvoffload.offload.scheduler" not in found["skipped"]


@pytest.mark.parametrize("leaks", [False, True])
def test_the_import_probe_sees_a_lab_module_loaded_through_importlib(tmp_path: Path, leaks: bool) -> None:
    # A stand-in product whose one module imports a stand-in lab by name, as cli.py imports commands.
    for package in ("kvoffload", "fake_lab"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "kvoffload" / "leaky.py").write_text(
        "import importlib\n" + ("importlib.import_module('fake_' + 'lab')\n" if leaks else ""))
    done = subprocess.run([sys.executable, "-c", PRODUCT_ALONE_PROBE % (("fake_lab", "rich"),)], capture_output=True,
                          text=True, check=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert f'"loaded": {["fake_lab"] if leaks else []}'.replace("'", '"') in done.stdout


# The control plane's modules the data plane may import: the vocabulary both planes speak.
CONTROL_PLANE_SHARED = ("kvoffload.offload.types", "kvoffload.offload.errors")


def _control_plane_modules(imported: str, names: tuple[str, ...]) -> list[str]:
    """The modules of ``kvoffload.offload`` an import names (``from kvoffload.offload import x``: x)."""
    if imported == "kvoffload.offload":
        return [f"{imported}.{name}" for name in names]
    return [imported] if imported.startswith("kvoffload.offload.") else []


@pytest.mark.parametrize(
    ("module", "path"),
    [(module, path) for module, path in PRODUCT_MODULES if _package(module) == "dataplane"],
    ids=[module for module, _ in PRODUCT_MODULES if _package(module) == "dataplane"],
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


# The vLLM integrations' packages, each serving its one class lazily (the path users write in their
# vLLM config), and their modules that import no vLLM: the connector's two sides, the spec's pool.
VLLM_FACES = {"kvoffload.vllm.connector": "KVOffloadConnector", "kvoffload.vllm.spec": "KVOffloadSpec"}
NO_VLLM_SIDES = ("kvoffload.vllm.connector.scheduler_side", "kvoffload.vllm.connector.worker_side",
                 "kvoffload.vllm.spec.shared_pool")


def test_the_vllm_integrations_sides_load_no_vllm() -> None:
    # In .venv (no vLLM) an eager import of the class in a package's __init__ fails here; in
    # .venv-vllm it would load vLLM and the class's module.
    code = (f"import sys, {', '.join(NO_VLLM_SIDES)}\n"
            "print(' '.join(m for m in sys.modules\n"
            "               if m.split('.')[0] == 'vllm' or m.endswith(('.connector.connector', '.spec.spec'))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT.parent), os.environ.get("PYTHONPATH", "")])}
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=env).stdout.split()
    assert loaded == []


@pytest.mark.parametrize(("package", "name"), VLLM_FACES.items())
def test_a_vllm_integrations_package_serves_only_its_class(package: str, name: str) -> None:
    face = importlib.import_module(package)
    assert face.__all__ == [name]
    assert name in dir(face)
    with pytest.raises(AttributeError):
        face.NoSuchName  # noqa: B018


def _qualified_package(module: str) -> str:
    """``root.package`` (``kvoffload.offload``, ``kvoffload_lab.sim``)."""
    return f"{_root(module)}.{_package(module)}"


def _package_graph() -> dict[str, set[str]]:
    """package -> the other packages it imports, of both roots, lazy imports included."""
    graph: dict[str, set[str]] = {f"{root}.{package}": set() for root, rules in RULES.items() for package in rules}
    for module, path in MODULES:
        package = _qualified_package(module)
        for _, imported, _ in _imports(module, path):
            if _root(imported) in ROOTS and _qualified_package(imported) != package:
                graph.setdefault(package, set()).add(_qualified_package(imported))
    return graph


def test_no_import_cycle_between_packages() -> None:
    try:
        TopologicalSorter(_package_graph()).prepare()
    except CycleError as error:
        pytest.fail(f"packages import each other: {' -> '.join(error.args[1])}")


def test_the_cycle_check_sees_a_cycle() -> None:
    with pytest.raises(CycleError):
        TopologicalSorter({"sim": {"verify"}, "verify": {"sim"}}).prepare()


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


def test_no_import_circle_between_the_products_modules() -> None:
    # No two of the product's modules import each other through any chain, lazy imports included:
    # such a circle is a side channel between modules.
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
    ("kvoffload_lab.vllm.offloading.compat", "_req_status"),
    ("kvoffload_lab.vllm.offloading.compat", "_jobs"),
    ("kvoffload_lab.vllm.offloading.compat", "_current_batch_jobs_to_flush"),
    # SimpleCPUOffloadConnector's manager has no public view of the GPU pool it was bound to, of its
    # mode or of lazy mode's cursor; the simple connector's checks read them in this one module.
    ("kvoffload_lab.vllm.simple.compat", "_gpu_block_pool"),
    ("kvoffload_lab.vllm.simple.compat", "_lazy_mode"),
    ("kvoffload_lab.vllm.simple.compat", "_cursor"),
    # Cloning vLLM's connector for the explorer: deepcopy must re-create its locks and share its
    # shared-memory region, and the copy module's dispatch table is the only hook for types it
    # cannot copy.
    ("kvoffload_lab.vllm.offloading.explorer", "_deepcopy_dispatch"),
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
    bad.write_text("def f():\n    from kvoffload_lab.verify.bugzoo import MUTANTS\n    return MUTANTS\n")
    imported = [name for _, name, _ in _imports("kvoffload.offload.bad", bad)]
    assert imported == ["kvoffload_lab.verify.bugzoo"]
    assert _wrong_import("kvoffload.offload.bad", imported[0]) == "the product imports nothing of the lab"
    assert _wrong_import("kvoffload_lab.sim.bad", imported[0]) == "kvoffload_lab.sim must not"
    assert _wrong_import("kvoffload.dataplane.bad", "kvoffload.tiers.index") == "kvoffload.dataplane must not"


# The TLA+ checker's distribution, and the lab's modules that may import it (a module, or a package
# and everything under it): the checkers' layers, never the explorer or the simulator; never the product.
CHECKER = "tlacheck"
MAY_IMPORT_THE_CHECKER = ("kvoffload_lab.verify", "kvoffload_lab.vllm.common.live", "kvoffload_lab.benchmarks",
                          "kvoffload_lab.commands")


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
    for module in ("kvoffload.statemachine.bad", "kvoffload.offload.bad", "kvoffload.vllm.connector.bad",
                   "kvoffload_lab.verifyx", "kvoffload_lab.sim.bad", "kvoffload_lab.statemachine.explore"):
        assert len(_checker_imports(module, bad)) == 2, module
    assert _checker_imports("kvoffload_lab.vllm.common.live.bad", bad) == []
    assert _checker_imports("kvoffload_lab.commands.tla", bad) == []
