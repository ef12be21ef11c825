"""Wrapper around the PyPI ``tla`` parser: text -> syntax tree, with located errors."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

from .errors import TlaError

_MODULE_START = re.compile(r"^\s*-{4,}\s*MODULE\s+(\w+)\s*-{4,}\s*$", re.MULTILINE)
_MODULE_END = re.compile(r"^\s*={4,}\s*$", re.MULTILINE)
_NEXT_SYMBOL = re.compile(r"Next symbol in input:\s*\n\s*Result\(symbol='(\w+)', value=(.*?), line=(\d+), column=(\d+)")
_OFFSET = re.compile(r"position:? (\d+)")
_TOP = re.compile(r"Top of stack `results` has end line: (\d+), and column: (\d+)")


def _isolate_module(text: str, path: str) -> str:
    """Blank out text before the MODULE header and after the closing ``====`` line (TLC ignores
    it), keeping line numbers intact."""
    m = _MODULE_START.search(text)
    if m is None:
        raise TlaError("no '---- MODULE Name ----' header found", path, 1, 1, kind="parse")
    head = text[: m.start()]
    body = text[m.start():]
    end = _MODULE_END.search(body)
    tail = ""
    if end is not None:
        tail = body[end.end():]
        body = body[: end.end()]
    return "\n" * head.count("\n") + body + "\n" * tail.count("\n")


def parse_module_text(text: str, path: str) -> Any:
    """Parse one module; the ``tla`` parser prints its diagnostics to stdout, which we capture so
    that ``--json`` output stays clean and the position can be reported."""
    import tla

    src = _isolate_module(text, path)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            tree = tla.parse(src)
    except Exception as exc:
        diag = buf.getvalue()
        line, col, what = 0, 0, ""
        m = _NEXT_SYMBOL.search(diag)
        if m is not None:
            line, col = int(m.group(3)) + 1, int(m.group(4)) + 1
            what = f" at {m.group(2)}"
        else:
            t = _TOP.search(diag)
            p = _OFFSET.search(str(exc))
            if t is not None:
                line, col = int(t.group(1)) + 1, int(t.group(2)) + 1
                what = " at end of input"
            elif p is not None:
                # Lexer errors report a character offset.
                offset = int(p.group(1))
                line = src.count("\n", 0, offset) + 1
                col = offset - (src.rfind("\n", 0, offset) + 1) + 1
        raise TlaError(f"parse error{what}: {exc}", path, line, col, kind="parse") from exc
    if tree is None:
        raise TlaError("parse error", path, 1, 1, kind="parse")
    return tree


def parse_module_file(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TlaError(f"cannot read module: {exc}", str(path), 0, 0, kind="parse") from exc
    return parse_module_text(text, str(path))
