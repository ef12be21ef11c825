"""No function in src/, packages/kvoffload-lab/src/ or packages/tlacheck/src/ is longer than 80 lines, so
that each reads as a few named steps; one that must stay longer is listed in docs/design.md ("Functions
over 80 lines") with its reason."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kvoffload

REPO = Path(__file__).parents[1]
SRC = Path(kvoffload.__file__).parent.parent
# Each source tree and the prefix its functions are named by in design.md.
SOURCE_TREES = ((SRC, "src"), (REPO / "packages" / "kvoffload-lab" / "src", "packages/kvoffload-lab/src"),
                (REPO / "packages" / "tlacheck" / "src", "packages/tlacheck/src"))
DESIGN = REPO / "docs" / "design.md"
MAX_LINES = 80
SECTION = "## Functions over 80 lines"


def _long_functions(src: Path, label: str = "src") -> dict[str, int]:
    """``<label>/<path>:<Class.function>`` -> its length in lines (``def`` to its last line), for every
    function and method under ``src`` longer than :data:`MAX_LINES`; nested ones included."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, where: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + child.name
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if not isinstance(child, ast.ClassDef) and length > MAX_LINES:
                    found[f"{where}:{name}"] = length
                visit(child, where, name + ".")
            else:
                visit(child, where, prefix)

    for path in sorted(src.rglob("*.py")):
        visit(ast.parse(path.read_text(encoding="utf-8")), f"{label}/{path.relative_to(src).as_posix()}", "")
    return found


def _listed(design: str) -> set[str]:
    """The functions the design document's section lists, each as ``- `path:name`: reason``."""
    _, found, rest = design.partition(f"\n{SECTION}\n")
    assert found, f"docs/design.md has no section {SECTION!r}"
    body = rest.split("\n## ", 1)[0]
    return set(re.findall(r"^- `([^`]+)`: \S", body, flags=re.MULTILINE))


def test_no_function_is_over_80_lines_unless_design_md_says_why() -> None:
    long = {name: lines for tree, label in SOURCE_TREES for name, lines in _long_functions(tree, label).items()}
    listed = _listed(DESIGN.read_text(encoding="utf-8"))
    unexplained = [f"{name} ({lines} lines)" for name, lines in sorted(long.items()) if name not in listed]
    assert not unexplained, (f"functions over {MAX_LINES} lines: split them into named steps, or list each "
                             f"in docs/design.md under {SECTION!r} with its reason: {unexplained}")
    stale = sorted(listed - set(long))
    assert not stale, f"docs/design.md lists functions that are gone or no longer over {MAX_LINES} lines: {stale}"


def test_the_rule_measures_methods_and_nested_functions(tmp_path: Path) -> None:
    # A def line and MAX_LINES statements: one line too long; MAX_LINES - 1 statements: the limit.
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_LINES))
    short = "".join(f"        y{i} = {i}\n" for i in range(MAX_LINES - 1))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        f"class C:\n    def long(self):\n{body}\n    def short(self):\n{short}\n"
        f"def outer():\n    def inner():\n{body}"
    )
    assert _long_functions(tmp_path) == {"src/pkg/m.py:C.long": MAX_LINES + 1, "src/pkg/m.py:outer": MAX_LINES + 2,
                                         "src/pkg/m.py:outer.inner": MAX_LINES + 1}


def test_the_listing_is_read_from_its_section() -> None:
    design = (f"# d\n\n{SECTION}\n\nWhy.\n\n- `src/a.py:f`: a generated table\n- `src/b.py:g` no reason\n\n"
              "## Next\n\n- `src/c.py:h`: another section\n")
    assert _listed(design) == {"src/a.py:f"}
