"""The files a live run writes from inside the engine: its trace and its findings.

Both are ndjson and appended line by line (flushed), so what was written before a crash of the
engine survives it. The trace is written by the scheduler side alone (one process); findings come
from the scheduler and the worker side, which may be two processes, so each line is one
``O_APPEND`` write. The drain report (``drain.json``) is rewritten, whole and atomically, each time
the connector is idle and at shutdown: with multiprocessing the engine core may be stopped before
its shutdown hooks run, and then the last idle moment is what is known.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

TRACE_FILE = "trace.ndjson"
FINDINGS_FILE = "findings.ndjson"
DRAIN_FILE = "drain.json"


class TraceLog:
    """A ``kvoffload trace`` file: one line per connector (``scheduler``) or manager call."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._seq = 0

    @property
    def seq(self) -> int:
        """The number of the last line written."""
        return self._seq

    def call(self, step: int, obj: str, call: str, request_id: str | None = None, **fields: Any) -> None:
        self._seq += 1
        line: dict[str, Any] = {"seq": self._seq, "step": step, "object": obj, "call": call}
        if request_id is not None:
            line["id"] = request_id
        line.update(fields)
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class FindingLog:
    """Violations found inside the engine: ``{"invariant", "message"}`` per line."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, invariant: str, message: str) -> None:
        line = json.dumps({"invariant": invariant, "message": message}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def read_ndjson(path: Path) -> list[dict[str, Any]]:
    """The lines of an ndjson file (none when it does not exist)."""
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_json(path: Path, data: dict[str, Any]) -> None:
    """``data`` as ``path``, replaced whole: a reader in another process never sees half a file."""
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(data))
    partial.replace(path)


def read_json(path: Path) -> dict[str, Any] | None:
    """A file :func:`write_json` wrote (the last drain report, a worker's counts), or None when there
    is none (the connector was never idle nor shut down)."""
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_drain(path: Path, seq: int, step: int, when: str, findings: list[dict[str, str]]) -> None:
    """The drain-time checks at trace line ``seq`` (``when``: "idle" or "shutdown")."""
    write_json(path, {"seq": seq, "step": step, "when": when, "findings": findings})
