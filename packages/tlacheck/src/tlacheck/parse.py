"""Wrapper around the PyPI ``tla`` parser: text -> syntax tree, with located errors.

The parser builds its LR tables each time a process first parses (about 0.1 s), then needs about
0.04 s per 400-line module; unpickling the tree takes 2 ms. So the trees of modules that parsed
are kept in a cache folder (``$TLACHECK_CACHE``, else ``~/.cache/tlacheck/tla-trees``; ``off``
disables it), one file per module text, named by a hash of the text and of the ``tla`` package's
version. The cache is only a shortcut: a file that is missing, unreadable or does not hold the
tree of that exact text is ignored (and rewritten), and a folder that cannot be written is skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import re
import tempfile
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


# What this module does to the parser's trees (``sany_precedence``), in the cache key: a tree
# cached before a change of it is not the tree of its text any more.
TREE_FORMAT = "set-prefix-operators-bind-first"

# How many module trees the cache keeps (about 10-70 KB each).
CACHED_TREES = 256


def tree_cache_dir() -> Path | None:
    """The folder of cached syntax trees, or None when ``$TLACHECK_CACHE`` is ``off``."""
    configured = os.environ.get("TLACHECK_CACHE")
    if configured == "off":
        return None
    if configured:
        return Path(configured)
    try:
        return Path.home() / ".cache" / "tlacheck" / "tla-trees"
    except RuntimeError:  # no home folder: no cache
        return None


def _cache_key(src: str) -> str:
    import tla

    return hashlib.sha256(f"{tla.__version__}\0{TREE_FORMAT}\0{src}".encode("utf-8", "surrogatepass")).hexdigest()


def _cached_tree(folder: Path, key: str) -> Any:
    """The tree stored under ``key``, or None (no such file, or not a tree stored under that key)."""
    try:
        data = (folder / f"{key}.pickle").read_bytes()
        stored_key, tree = pickle.loads(data)
    except Exception:  # a missing, truncated or foreign file is a cache miss
        return None
    return tree if stored_key == key else None


def _store_tree(folder: Path, key: str, tree: Any) -> None:
    """Write the tree atomically (a reader sees the whole file or none); skip an unwritable folder."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tree-")
        try:
            with os.fdopen(fd, "wb") as out:
                pickle.dump((key, tree), out, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, folder / f"{key}.pickle")
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(folder)
    except (OSError, pickle.PicklingError, RecursionError):
        return


def _prune(folder: Path) -> None:
    """Keep the newest :data:`CACHED_TREES` trees (every edit of a module adds one)."""
    trees = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime)
    for old in trees[:-CACHED_TREES]:
        old.unlink(missing_ok=True)


def parse_module_text(text: str, path: str) -> Any:
    """Parse one module (or take its tree from the cache, see the module docstring)."""
    return _parse_isolated(_isolate_module(text, path), path)


def parse_later_modules(path: Path) -> list[Any]:
    """The trees of the modules that follow the first one in a file (SANY reads them all: a
    module may EXTEND one written after it in its own file), line numbers kept."""
    text, _ = read_source(path, "module", "parse")
    first = _MODULE_START.search(text)
    end = _MODULE_END.search(text, first.end()) if first is not None else None
    trees = []
    while end is not None:
        start = _MODULE_START.search(text, end.end())
        if start is None:
            break
        end = _MODULE_END.search(text, start.end())
        stop = end.end() if end is not None else len(text)
        lines_before = text.count("\n", 0, start.start())
        trees.append(_parse_isolated("\n" * lines_before + text[start.start():stop], str(path)))
    return trees


def _parse_isolated(src: str, path: str) -> Any:
    folder = tree_cache_dir()
    key = _cache_key(src) if folder is not None else ""
    if folder is not None:
        tree = _cached_tree(folder, key)
        if tree is not None:
            return tree
    tree = _parse(src, path)
    if folder is not None:
        _store_tree(folder, key, tree)
    return tree


def _parse(src: str, path: str) -> Any:
    """Parse a module's text; the ``tla`` parser prints its diagnostics to stdout, which we
    capture so that ``--json`` output stays clean and the position can be reported."""
    import tla

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
    return sany_precedence(tree)


# SUBSET and UNION (precedence 8-8) and the infix set operators of precedence 8-8. SANY applies the
# prefix operator first (`UNION a \cup b` is `(UNION a) \cup b`, AllocatorImplementation's
# Invariant); the `tla` parser shifts, giving `UNION (a \cup b)`.
_SET_PREFIX = frozenset({"SUBSET", "UNION"})
_SET_INFIX = frozenset({"\\", "\\setminus", "\\cap", "\\intersect", "\\cup", "\\union"})


def _set_infix(node: Any) -> bool:
    return (type(node).__name__ == "OperatorApplication" and node.operator in _SET_INFIX
            and node.arguments is not None and len(node.arguments) == 2)


def sany_precedence(node: Any) -> Any:
    """``node`` with SUBSET and UNION applied before the set operators that follow them, as SANY
    reads them; unchanged subtrees keep their identity."""
    if isinstance(node, list):
        items = [sany_precedence(x) for x in node]
        return node if all(a is b for a, b in zip(items, node, strict=True)) else items
    fields = getattr(node, "_fields", None)
    if not fields:
        return node
    changed = {f: new for f in fields if (new := sany_precedence(old := getattr(node, f))) is not old}
    if changed:
        node = node._replace(**changed)
    if type(node).__name__ != "OperatorApplication" or not node.arguments:
        return node
    if node.operator in _SET_PREFIX and len(node.arguments) == 1 and _set_infix(node.arguments[0]):
        return _apply_first(node, node.arguments[0])
    if _set_infix(node) and _set_infix(node.arguments[1]):
        return _left_nested(node)
    return node


def _apply_first(prefix: Any, infix: Any) -> Any:
    """``prefix`` applied to the leftmost operand of the left-nested chain ``infix``."""
    left, right = infix.arguments
    inner = _apply_first(prefix, left) if _set_infix(left) else prefix._replace(arguments=[left], end=left.end)
    return infix._replace(arguments=[inner, right], start=prefix.start)


def _left_nested(node: Any) -> Any:
    """``a op1 (b op2 c)`` as ``(a op1 b) op2 c``: the parser nests set operators to the right
    only where a prefix operator took the rest of the chain (the operators associate left)."""
    left, right = node.arguments
    inner = node._replace(arguments=[left, right.arguments[0]], end=right.arguments[0].end)
    if _set_infix(right.arguments[0]):
        inner = _left_nested(inner)
    return right._replace(arguments=[inner, right.arguments[1]], start=node.start)


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
