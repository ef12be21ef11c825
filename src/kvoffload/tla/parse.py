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


def read_source(path: Path, what: str, kind: str) -> tuple[str, TlaError | None]:
    """The text of a module or config, decoded as UTF-8 like TLC. Undecodable bytes become
    U+FFFD, and the second value is the located error to raise if the text then does not parse
    (a stray Latin-1 byte in a comment is harmless, a binary file is not)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TlaError(f"cannot read {what}: {exc}", str(path), 0, 0, kind=kind) from exc
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        bad = TlaError(f"not UTF-8 text (byte 0x{data[exc.start]:02X}); save the {what} as UTF-8",
                       str(path), line, col, kind="input")
        return data.decode("utf-8", errors="replace"), bad


def parse_module_file(path: Path) -> Any:
    """Parse a module file; its header must name the file, as SANY requires."""
    text, undecodable = read_source(path, "module", "parse")
    try:
        tree = parse_module_text(text, str(path))
    except TlaError as exc:
        raise (undecodable or exc) from exc
    if tree.name != path.stem:
        m = _MODULE_START.search(text)
        line = text.count("\n", 0, m.start()) + 1 if m is not None else 1
        raise TlaError(f"file name {path.name} does not match the name {tree.name} of the module it contains",
                       str(path), line, 1, kind="parse")
    return tree
