"""One set of stand-ins for TLC, shared by the runner's and the command's tests.

``no_tlc``: a HOME without a cached jar and no TLA2TOOLS_JAR (auto picks the embedded engine);
``fake_jar``: the same HOME with a jar in the cache; ``fake_tlc``: a cached jar, java "found",
and ``subprocess.run`` answered by a :class:`FakeTlc` whose output and exit code a test sets.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tlacheck import tlc

FIXTURES = Path(__file__).parent / "fixtures" / "tlc"
# The jar TLA2TOOLS_JAR names, else the one this project's CI machines share beside the checkout.
SHARED_TLC = Path(__file__).resolve().parents[4] / "shared" / "tlc"
REAL_JAR = os.environ.get(tlc.JAR_ENV) or str(SHARED_TLC / "tla2tools.jar")
requires_tlc = pytest.mark.skipif(not tlc.tlc_available(REAL_JAR), reason="tla2tools.jar not found: set TLA2TOOLS_JAR")


def fixture(name: str) -> str:
    """The text of a recorded TLC output in tests/fixtures/tlc."""
    return (FIXTURES / name).read_text()


def touch_jar(home: Path) -> Path:
    """A (fake) tla2tools.jar in ``home``'s tlacheck cache."""
    path = home / ".cache" / "tlacheck" / "tla2tools.jar"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PK")
    return path


class FakeTlc:
    """Stands in for subprocess.run: records the call, writes the JSON trace TLC would write."""

    def __init__(self, output: str = "", exit_code: int = 0, trace_json: str | None = None) -> None:
        self.output = output
        self.exit_code = exit_code
        self.trace_json = trace_json
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((command, kwargs))
        if self.trace_json is not None:
            Path(command[command.index("-dumpTrace") + 2]).write_text(self.trace_json)
        return subprocess.CompletedProcess(command, self.exit_code, stdout=self.output, stderr="")


@pytest.fixture
def no_tlc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME without a cached jar and no TLA2TOOLS_JAR; returns the HOME."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv(tlc.JAR_ENV, raising=False)
    return home


@pytest.fixture
def fake_jar(no_tlc: Path) -> Path:
    return touch_jar(no_tlc)


@pytest.fixture
def fake_tlc(fake_jar: Path, monkeypatch: pytest.MonkeyPatch) -> FakeTlc:
    monkeypatch.setattr(tlc, "find_java", lambda: "java")
    fake = FakeTlc()
    monkeypatch.setattr(tlc.subprocess, "run", fake)
    return fake
