"""The ``tlacheck`` command line on its own (``tlacheck check``, ``tlacheck check-all``), and the
package's independence: tlacheck imports nothing of kvoffload, the project it came from."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tlacheck
from tlacheck.cli import main
from tlacheck.result import EXIT_SUCCESS, EXIT_VIOLATION_SAFETY

PACKAGE = Path(tlacheck.__file__).parent
COUNTER = """---- MODULE Counter ----
EXTENDS Naturals
CONSTANT Bound
VARIABLE x
Init == x = 0
Next == x' = (x + 1) % 4
Small == x < Bound
====
"""


def _model(folder: Path, name: str, bound: int, expect: str) -> Path:
    spec = folder / "Counter.tla"
    spec.write_text(COUNTER)
    config = folder / f"Counter_{name}.cfg"
    config.write_text(f"\\* expect: {expect}\nCONSTANT Bound = {bound}\nINIT Init\nNEXT Next\nINVARIANT Small\n")
    return config


def test_check_reports_a_violation_with_tlcs_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _model(tmp_path, "Tight", 3, "safety failure Small")
    code = main(["check", str(tmp_path / "Counter.tla"), "--config", str(config), "--engine", "embedded", "--json",
                 "--quiet"])
    result = json.loads(capsys.readouterr().out)
    assert code == EXIT_VIOLATION_SAFETY
    assert (result["result"], result["violated"], len(result["trace"])) == ("safety failure", "Small", 4)


def test_check_all_meets_each_models_expectation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _model(tmp_path, "Loose", 4, "success")
    _model(tmp_path, "Tight", 3, "safety failure Small")
    code = main(["check-all", str(tmp_path), "--engine", "embedded", "--quiet"])
    out = capsys.readouterr().out
    assert code == EXIT_SUCCESS, out
    assert "2/2 models met their expectation (engine: embedded)." in out


def test_bad_input_is_one_line_naming_tlacheck(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", str(tmp_path / "Nope.tla"), "--engine", "embedded"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [f"tlacheck: error: {tmp_path / 'Nope.tla'}: no such spec file"]


@pytest.mark.parametrize("action", [[], ["check"], ["check-all"]])
def test_every_action_has_help(action: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([*action, "--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: tlacheck {' '.join(action)}".rstrip())


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in ``path``, those inside functions included."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_tlacheck_never_imports_kvoffload() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 20
    wrong = [f"{path}:{line}: imports {module}" for path in modules for line, module in _imported_modules(path)
             if module.split(".")[0] == "kvoffload"]
    assert not wrong, "\n".join(wrong)


def test_the_import_rule_sees_a_lazy_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from kvoffload.statemachine import explore\n    return explore\n")
    assert _imported_modules(bad) == [(2, "kvoffload.statemachine")]


def test_importing_every_module_loads_no_kvoffload() -> None:
    probe = ("import importlib, pkgutil, sys, tlacheck\n"
             "for info in pkgutil.iter_modules(tlacheck.__path__):\n"
             "    if info.name != '__main__':\n"
             "        importlib.import_module('tlacheck.' + info.name)\n"
             "print(sorted(name for name in sys.modules if name.split('.')[0] == 'kvoffload'))\n")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
