"""The cache of parsed module trees: a shortcut that never changes an answer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tlacheck import parse

MODULE = """---- MODULE Counter ----
EXTENDS Naturals
VARIABLE x
Init == x = 0
Next == x < 3 /\\ x' = x + 1
====
"""


def count_parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A list that grows by one item per run of the real parser."""
    calls: list[str] = []
    real = parse._parse

    def counted(src: str, path: str) -> object:
        calls.append(path)
        return real(src, path)

    monkeypatch.setattr(parse, "_parse", counted)
    return calls


def test_a_parsed_module_is_read_back_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TLACHECK_CACHE", str(tmp_path / "trees"))
    calls = count_parses(monkeypatch)
    first = parse.parse_module_text(MODULE, "Counter.tla")
    second = parse.parse_module_text(MODULE, "Counter.tla")
    assert first == second and first.name == "Counter"
    assert len(calls) == 1
    assert len(list((tmp_path / "trees").glob("*.pickle"))) == 1
    # Another text (one more space) is another entry.
    parse.parse_module_text(MODULE.replace("x < 3", "x <  3"), "Counter.tla")
    assert len(calls) == 2


def test_a_damaged_or_foreign_cache_file_is_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "trees"
    monkeypatch.setenv("TLACHECK_CACHE", str(folder))
    expected = parse.parse_module_text(MODULE, "Counter.tla")
    (entry,) = folder.glob("*.pickle")
    calls = count_parses(monkeypatch)
    entry.write_bytes(entry.read_bytes()[:100])  # truncated
    assert parse.parse_module_text(MODULE, "Counter.tla") == expected
    # The tree of another text stored under this text's name is not taken for it.
    other = folder / "other"
    monkeypatch.setenv("TLACHECK_CACHE", str(other))
    parse.parse_module_text(MODULE.replace("x < 3", "x < 4"), "Counter.tla")
    (foreign,) = other.glob("*.pickle")
    foreign.replace(entry)
    monkeypatch.setenv("TLACHECK_CACHE", str(folder))
    assert parse.parse_module_text(MODULE, "Counter.tla") == expected
    assert len(calls) == 3


def test_an_unwritable_or_disabled_cache_only_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TLACHECK_CACHE", str(blocker / "trees"))
    calls = count_parses(monkeypatch)
    assert parse.parse_module_text(MODULE, "Counter.tla").name == "Counter"
    monkeypatch.setenv("TLACHECK_CACHE", "off")
    assert parse.tree_cache_dir() is None
    assert parse.parse_module_text(MODULE, "Counter.tla").name == "Counter"
    assert len(calls) == 2


def test_parse_errors_are_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "trees"
    monkeypatch.setenv("TLACHECK_CACHE", str(folder))
    broken = MODULE.replace("x' = x + 1", "x' = (x + 1")
    for _ in range(2):
        with pytest.raises(parse.TlaError, match="parse error"):
            parse.parse_module_text(broken, "Counter.tla")
    assert not folder.exists() or not list(folder.glob("*.pickle"))


def test_the_cache_keeps_the_newest_trees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "trees"
    monkeypatch.setenv("TLACHECK_CACHE", str(folder))
    monkeypatch.setattr(parse, "CACHED_TREES", 2)
    for bound in range(4):
        parse.parse_module_text(MODULE.replace("x < 3", f"x < {bound}"), "Counter.tla")
        for k, entry in enumerate(sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime)):
            os.utime(entry, (k, k))  # distinct, ordered times whatever the file system's clock
    assert len(list(folder.glob("*.pickle"))) == 2
    calls = count_parses(monkeypatch)
    parse.parse_module_text(MODULE.replace("x < 3", "x < 3"), "Counter.tla")  # the newest: kept
    parse.parse_module_text(MODULE.replace("x < 3", "x < 0"), "Counter.tla")  # the oldest: pruned
    assert len(calls) == 1
