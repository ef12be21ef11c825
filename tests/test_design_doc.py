"""docs/design.md and the code agree: every path and module it names exists, and its layout tables
list exactly the modules of each package (the product's, kvoffload; the lab's, kvoffload_lab; and the
TLA+ checker's distribution, tlacheck), with the import rules of tests/test_layout.py."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from test_layout import CHECKER, LAB, MAY_IMPORT_THE_CHECKER, PRODUCT, RULES

REPO = Path(__file__).parents[1]
SRC = REPO / "src" / PRODUCT
LAB_SRC = REPO / "packages" / "kvoffload-lab" / "src" / LAB
CHECKER_SRC = REPO / "packages" / CHECKER / "src" / CHECKER
SOURCES = {PRODUCT: SRC, LAB: LAB_SRC, CHECKER: CHECKER_SRC}
# The lab's rows that are modules, not packages.
LAB_MODULES = (f"{LAB}.cli", f"{LAB}.redis_server")
DESIGN = REPO / "docs" / "design.md"
TEXT = DESIGN.read_text(encoding="utf-8")

# A path from the repository's root (src/..., tests/..., tla/KVOffload.tla), or a module path
# inside a package (check/adapter.py).
ROOTED_PATH = re.compile(r"(?<![\w./-])((?:src|tests|tla|scripts|docs|packages)/[\w./-]*\w)")
PACKAGE_PATH = re.compile(r"(?<![\w./-])((?:\w+/)+\w+\.py)\b")
DOTTED = re.compile(r"(?<![\w.])((?:kvoffload_lab|kvoffload|tlacheck)(?:\.\w+)+)")
# A module or subpackage named in the layout table: scheduler.py, library/, README.md.
TABLE_MODULE = re.compile(r"(?<![\w./-])(\w+\.(?:py|md)|\w+/)(?![\w/])")


def _defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            return True
    return False


def _resolves(dotted: str) -> bool:
    """``kvoffload.a.b`` (or ``kvoffload_lab.a.b``, ``tlacheck.a.b``) is a module or package, or a name a
    module of it defines at top level."""
    root = SOURCES[dotted.split(".")[0]]
    parts = dotted.split(".")[1:]
    for cut in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:cut])
        module = base.with_suffix(".py") if base.suffix != ".py" else base
        init = base / "__init__.py"
        found = module if module.is_file() else init if init.is_file() else None
        if found is not None:
            rest = parts[cut:]
            return not rest or (len(rest) == 1 and _defines(found, rest[0]))
    return root.joinpath("__init__.py").is_file() and not parts


def test_every_path_design_md_names_exists() -> None:
    missing = [path for path in sorted(set(ROOTED_PATH.findall(TEXT))) if not (REPO / path).exists()]
    everything = [str(path.relative_to(REPO)) for path in REPO.rglob("*.py") if ".venv" not in path.parts]
    missing += [path for path in sorted(set(PACKAGE_PATH.findall(TEXT)))
                if not (REPO / path).exists() and not any(found.endswith("/" + path) for found in everything)]
    assert not missing, f"docs/design.md names paths that do not exist: {missing}"


def test_every_module_design_md_names_exists() -> None:
    missing = [name for name in sorted(set(DOTTED.findall(TEXT))) if not _resolves(name)]
    assert not missing, f"docs/design.md names modules that do not exist: {missing}"


def _layout_rows() -> dict[str, tuple[str, str]]:
    """package (``kvoffload.offload``, ``kvoffload_lab.sim``, ``tlacheck``) -> (modules column, may-import
    column) of the layout tables."""
    rows = {}
    for line in TEXT.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"`[\w.]+`", cells[0]):
            rows[cells[0].strip("`")] = (cells[2], cells[3])
    return rows


ROWS = _layout_rows()


def _packages(root: str) -> set[str]:
    return {f"{root}.{path.name}" for path in SOURCES[root].iterdir() if (path / "__init__.py").is_file()}


def test_the_layout_tables_have_a_row_per_package() -> None:
    assert set(ROWS) == _packages(PRODUCT) | _packages(LAB) | set(LAB_MODULES) | {CHECKER}


@pytest.mark.parametrize("package", sorted(set(ROWS) - set(LAB_MODULES)))
def test_the_layout_table_lists_exactly_the_modules_of_each_package(package: str) -> None:
    root, _, name = package.partition(".")
    folder = SOURCES[root] / name
    named = {module.rstrip("/") for module in TABLE_MODULE.findall(ROWS[package][0])}
    present = {path.name for path in folder.iterdir() if path.name not in ("__init__.py", "__pycache__", "py.typed")}
    assert named - present == set(), f"{package}: the table names modules that do not exist"
    assert present - named == set(), f"{package}: modules missing from the table"


def _may_import_the_checker(package: str) -> bool:
    """Whether test_layout lets ``package``, or a subpackage of it, import the checker."""
    return any(module == package or module.startswith(f"{package}.") for module in MAY_IMPORT_THE_CHECKER)


def _allowed(package: str, column: str) -> set[str]:
    """The packages of its own root a row's may-import column names: ``nothing``; the lab's ``every lab
    package but `cli```; or the names in backticks (the checker aside). A lab row says that it may also
    import the product."""
    root, _, name = package.partition(".")
    if root == LAB:
        assert "the product" in column, f"{package}: its row must say that it may import the product"
    if column == "nothing" or column.startswith("the product"):
        return set()
    if column.startswith("every lab package but `cli`"):
        return set(RULES[LAB]) - {"", "cli", name}
    return set(re.findall(r"`(\w+)`", column)) - {CHECKER}


@pytest.mark.parametrize("package", sorted(set(ROWS) - {CHECKER}))
def test_the_layout_table_gives_the_import_rules_of_test_layout(package: str) -> None:
    root, _, name = package.partition(".")
    column = ROWS[package][1]
    assert _allowed(package, column) == set(RULES[root][name])
    assert (f"`{CHECKER}`" in column) == _may_import_the_checker(package)


def test_the_checker_imports_nothing_of_kvoffload_in_the_table() -> None:
    assert ROWS[CHECKER][1] == "nothing of kvoffload"


def test_the_checks_see_what_is_missing() -> None:
    assert not _resolves("kvoffload_lab.sim.no_such_module")
    assert not _resolves("kvoffload_lab.sim.runner.no_such_name")
    assert _resolves("kvoffload_lab.sim.runner.SimulationOptions")
    assert _resolves("kvoffload.offload.scheduler") and not _resolves("kvoffload.sim.runner")
    assert _allowed("kvoffload_lab.tracestudy", "`sim`; the product") == {"sim"}
    with pytest.raises(AssertionError):
        _allowed("kvoffload_lab.tracestudy", "`sim`")
    assert TABLE_MODULE.findall("engine.py (the loop), tiers/ (engines), `OffloadConfig`") == ["engine.py", "tiers/"]
