"""Reading and validating Mooncake-format request traces (kvcache-ai/Mooncake, FAST25-release/traces).

One JSON object per line: ``timestamp`` (ms since the trace start), ``input_length`` and
``output_length`` (tokens), ``hash_ids`` (one remapped prefix block hash per ``block_tokens``-token
block of the input; the last one may cover a partial block). Blank lines are ignored.

A malformed line is reported with its 1-based line number. ``strict`` raises at the first one;
otherwise it is skipped and counted, so one bad line does not throw away an hour of trace.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

MOONCAKE_BLOCK_TOKENS = 512
_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceError(ValueError):
    """A trace that cannot be used: a malformed line (strict mode), a missing file, or no usable request."""


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of the trace, in file order (``line``: 1-based line number)."""

    line: int
    timestamp: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]

    def full_blocks(self, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> int:
        """Number of full ``block_tokens`` blocks of the prompt: only those can be cached."""
        return self.input_length // block_tokens


@dataclass
class Trace:
    """The usable requests (sorted by timestamp, stable) and what was skipped."""

    path: str
    requests: list[TraceRequest]
    skipped: list[str] = field(default_factory=list)

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_line(text: str, line: int, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> TraceRequest:
    """One trace line as a request; raises ValueError saying what is wrong (without the location)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    missing = [name for name in _FIELDS if name not in obj]
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    timestamp = obj["timestamp"]
    if isinstance(timestamp, bool) or not isinstance(timestamp, int | float) or not math.isfinite(timestamp):
        raise ValueError(f"timestamp must be a finite number, got {timestamp!r}")
    if timestamp < 0:
        raise ValueError(f"negative timestamp {timestamp!r}")
    for name in ("input_length", "output_length"):
        value = obj[name]
        if not _is_int(value):
            raise ValueError(f"{name} must be an integer, got {value!r}")
        if value < 0:
            raise ValueError(f"negative {name} {value}")
    hash_ids = obj["hash_ids"]
    if not isinstance(hash_ids, list) or not all(_is_int(h) for h in hash_ids):
        raise ValueError("hash_ids must be a list of integers")
    needed = -(-obj["input_length"] // block_tokens)
    if len(hash_ids) < needed:
        raise ValueError(
            f"hash_ids has {len(hash_ids)} id(s) but input_length {obj['input_length']} needs "
            f"ceil({obj['input_length']}/{block_tokens}) = {needed}"
        )
    return TraceRequest(line, float(timestamp), obj["input_length"], obj["output_length"], tuple(hash_ids))


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every non-blank line."""
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if text.strip():
                yield number, text


def read_trace(
    path: str | Path,
    *,
    strict: bool = False,
    limit: int | None = None,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
) -> Trace:
    """Read a Mooncake trace; requests come back sorted by timestamp (stable, so ties keep file order).

    ``limit`` keeps the first ``limit`` usable requests in file order. Raises TraceError for a
    missing or unreadable file, the first bad line when ``strict``, or a trace with no usable request.
    """
    if limit is not None and limit < 1:
        raise TraceError(f"limit must be positive, got {limit}")
    requests: list[TraceRequest] = []
    skipped: list[str] = []
    try:
        for number, text in iter_lines(path):
            if limit is not None and len(requests) >= limit:
                break
            try:
                requests.append(parse_line(text, number, block_tokens))
            except ValueError as error:
                message = f"{path}:{number}: {error}"
                if strict:
                    raise TraceError(message) from None
                skipped.append(message)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, expected a .jsonl trace file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise TraceError(f"{path}: cannot read: {error}") from None
    if not requests:
        why = f"all {len(skipped)} line(s) were malformed" if skipped else "it has no request"
        raise TraceError(f"{path}: no usable request: {why}")
    requests.sort(key=lambda r: r.timestamp)
    return Trace(str(path), requests, skipped)


class ChainKeys:
    """Chained block keys: key(i) identifies (key(i-1), hash_id(i)), so equal ids at the same
    position under the same prefix give equal keys.

    The "hash" is an interning table handing out 1, 2, 3, ... in first-seen order: injective (no
    collisions to reason about), deterministic, and small integers print readably.
    """

    def __init__(self) -> None:
        self._table: dict[tuple[int, int], int] = {}

    def __len__(self) -> int:
        return len(self._table)

    def chain(self, hash_ids: Sequence[int], count: int) -> list[int]:
        """Keys of the first ``count`` blocks of a prefix made of ``hash_ids``."""
        table = self._table
        keys: list[int] = []
        parent = 0
        for hash_id in hash_ids[:count]:
            pair = (parent, hash_id)
            key = table.get(pair)
            if key is None:
                key = len(table) + 1
                table[pair] = key
            keys.append(key)
            parent = key
        return keys


def block_chains(requests: Sequence[TraceRequest], block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> list[list[int]]:
    """Per request (in the given order), the chained keys of its full prompt blocks."""
    keys = ChainKeys()
    return [keys.chain(r.hash_ids, r.full_blocks(block_tokens)) for r in requests]
