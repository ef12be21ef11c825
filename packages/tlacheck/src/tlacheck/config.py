"""Parser for TLC model configuration files (``.cfg``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import TlaError
from .parse import read_source
from .values import ModelValue, Value

_TOKEN = re.compile(
    r"""(?P<ws>[ \t\r]+)
      | (?P<nl>\n)
      | (?P<lcomment>\\\*[^\n]*)
      | (?P<bcomment>\(\*)
      | (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<num>-?\d+)
      | (?P<arrow><-)
      | (?P<punct><<|>>|[{}\[\],=])
      | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE,
)

_SECTIONS = {
    "CONSTANT": "CONSTANTS",
    "CONSTANTS": "CONSTANTS",
    "INIT": "INIT",
    "NEXT": "NEXT",
    "SPECIFICATION": "SPECIFICATION",
    "INVARIANT": "INVARIANTS",
    "INVARIANTS": "INVARIANTS",
    "PROPERTY": "PROPERTIES",
    "PROPERTIES": "PROPERTIES",
    "CONSTRAINT": "CONSTRAINTS",
    "CONSTRAINTS": "CONSTRAINTS",
    "ACTION_CONSTRAINT": "ACTION_CONSTRAINTS",
    "ACTION_CONSTRAINTS": "ACTION_CONSTRAINTS",
    "SYMMETRY": "SYMMETRY",
    "CHECK_DEADLOCK": "CHECK_DEADLOCK",
    "VIEW": "VIEW",
    "ALIAS": "ALIAS",
    "POSTCONDITION": "POSTCONDITION",
}
_UNSUPPORTED_SECTIONS = {"VIEW", "POSTCONDITION"}


@dataclass
class Named:
    """A name in the cfg with the line it was given on (for error messages)."""

    name: str
    line: int


@dataclass
class ModelConfig:
    """A parsed .cfg file."""

    path: str
    constants: dict[str, Value] = field(default_factory=dict)
    # CONST <- Op: replace the constant (or operator) by the definition Op of the spec.
    substitutions: dict[str, str] = field(default_factory=dict)
    # C <- [M] Op: replace the definition C of module M (in every instance of M) by Op of the spec.
    module_substitutions: list[tuple[str, str, str, int]] = field(default_factory=list)
    const_lines: dict[str, int] = field(default_factory=dict)
    init: Named | None = None
    next: Named | None = None
    specification: Named | None = None
    invariants: list[Named] = field(default_factory=list)
    properties: list[Named] = field(default_factory=list)
    constraints: list[Named] = field(default_factory=list)
    action_constraints: list[Named] = field(default_factory=list)
    symmetry: Named | None = None
    # ALIAS only changes how TLC prints trace states; the name must still be defined.
    alias: Named | None = None
    check_deadlock: bool = True
    # Model values in the order the config first names them (TLC's order of model values).
    model_values: list[str] = field(default_factory=list)


@dataclass
class _Tok:
    kind: str
    text: str
    line: int
    col: int


def _tokenize(text: str, path: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos, line, line_start = 0, 1, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise TlaError(
                f"unexpected character {text[pos]!r} in config", path, line, pos - line_start + 1,
                kind="config",
            )
        kind = m.lastgroup or ""
        if kind == "nl":
            line += 1
            line_start = m.end()
        elif kind == "bcomment":
            # Block comments nest in TLA+.
            depth, j = 1, m.end()
            while depth and j < len(text):
                if text.startswith("(*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*)", j):
                    depth, j = depth - 1, j + 2
                else:
                    if text[j] == "\n":
                        line += 1
                        line_start = j + 1
                    j += 1
            pos = j
            continue
        elif kind not in ("ws", "lcomment"):
            toks.append(_Tok(kind, m.group(), line, m.start() - line_start + 1))
        pos = m.end()
    return toks


class _CfgParser:
    def __init__(self, toks: list[_Tok], path: str) -> None:
        self.toks = toks
        self.i = 0
        self.path = path
        self.model_values: list[str] = []

    def err(self, msg: str, tok: _Tok | None = None) -> TlaError:
        tok = tok or (self.toks[self.i] if self.i < len(self.toks) else None)
        if tok is None:
            return TlaError(f"{msg} at end of config", self.path, 0, 0, kind="config")
        return TlaError(msg, self.path, tok.line, tok.col, kind="config")

    def peek(self) -> _Tok | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise self.err("unexpected end of config")
        self.i += 1
        return tok

    def expect(self, text: str) -> _Tok:
        tok = self.take()
        if tok.text != text:
            raise self.err(f"expected {text!r}, found {tok.text!r}", tok)
        return tok

    def at_section(self) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "ident" and tok.text in _SECTIONS

    def value(self) -> Value:
        tok = self.take()
        if tok.kind == "num":
            return int(tok.text)
        if tok.kind == "str":
            return tok.text[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if tok.text == "TRUE":
            return True
        if tok.text == "FALSE":
            return False
        if tok.kind == "ident":
            self.model_values.append(tok.text)
            return ModelValue(tok.text)
        if tok.text in ("{", "<<"):
            close = "}" if tok.text == "{" else ">>"
            items: list[Value] = []
            while self.peek() is not None and self.peek().text != close:  # type: ignore[union-attr]
                items.append(self.value())
                if self.peek() is not None and self.peek().text == ",":  # type: ignore[union-attr]
                    self.take()
            self.expect(close)
            return frozenset(items) if close == "}" else tuple(items)
        raise self.err(f"unexpected {tok.text!r} where a constant value was expected", tok)

    def names(self) -> list[Named]:
        out: list[Named] = []
        while (tok := self.peek()) is not None and not self.at_section():
            if tok.kind != "ident":
                raise self.err(f"expected a definition name, found {tok.text!r}", tok)
            self.take()
            out.append(Named(tok.text, tok.line))
        return out

    def parse(self) -> ModelConfig:
        cfg = ModelConfig(self.path)
        while (tok := self.peek()) is not None:
            if not self.at_section():
                raise self.err(f"unexpected {tok.text!r}: expected a section keyword (CONSTANTS, INIT, ...)")
            self.take()
            section = _SECTIONS[tok.text]
            if section in _UNSUPPORTED_SECTIONS:
                raise self.err(f"unsupported config section {tok.text}", tok)
            if section == "CONSTANTS":
                while (t := self.peek()) is not None and not self.at_section():
                    name = self.take()
                    if name.kind != "ident":
                        raise self.err(f"expected a constant name, found {name.text!r}", name)
                    op = self.take()
                    if op.text == "=":
                        cfg.constants[name.text] = self.value()
                    elif op.text == "<-":
                        target = self.take()
                        if target.text == "[":
                            module, close, target = self.take(), self.take(), self.take()
                            if module.kind != "ident" or close.text != "]" or target.kind != "ident":
                                raise self.err("expected 'C <- [Module] Op'", module)
                            cfg.module_substitutions.append((module.text, name.text, target.text, name.line))
                            continue
                        cfg.substitutions[name.text] = target.text
                    else:
                        raise self.err(f"expected '=' or '<-' after constant {name.text}", op)
                    cfg.const_lines[name.text] = name.line
                    del t
            elif section == "CHECK_DEADLOCK":
                val = self.take()
                if val.text not in ("TRUE", "FALSE"):
                    raise self.err("CHECK_DEADLOCK expects TRUE or FALSE", val)
                cfg.check_deadlock = val.text == "TRUE"
            elif section in ("INIT", "NEXT", "SPECIFICATION", "SYMMETRY", "ALIAS"):
                name = self.take()
                if name.kind != "ident" or name.text in _SECTIONS:
                    raise self.err(f"{tok.text} expects a definition name", name)
                setattr(cfg, section.lower(), Named(name.text, name.line))
            else:
                getattr(cfg, section.lower()).extend(self.names())
        cfg.model_values = self.model_values
        return cfg


def parse_config(path: Path) -> ModelConfig:
    """Parse a TLC .cfg file; raises :class:`TlaError` (kind "config") on malformed input."""
    text, undecodable = read_source(path, "config", "config")
    try:
        return _CfgParser(_tokenize(text, str(path)), str(path)).parse()
    except TlaError as exc:
        raise (undecodable or exc) from exc
