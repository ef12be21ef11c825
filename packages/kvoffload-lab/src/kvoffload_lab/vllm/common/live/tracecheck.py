"""Every live trace against the spec: the Python mirror, the embedded TLA+ checker and TLC.

The trace a live run writes (:mod:`.logs`) has the calls of vLLM's connector and of its manager
(no lifecycle lines: vLLM's connector declares none), so the spec's rules about manager calls are
what it is held to. Each verdict is ``ok`` or the first trace line the checker rejects, with why.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TraceVerdict:
    """One checker's answer on one trace: ``ok``, or the rejected ``line`` and ``reason``."""

    engine: str  # "mirror", "embedded" or "tlc"
    ok: bool
    line: int | None = None
    reason: str | None = None

    def __str__(self) -> str:
        return f"{self.engine}: ok" if self.ok else f"{self.engine}: line {self.line}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_live_trace(path: Path, tlc_jar: str | None) -> list[TraceVerdict]:
    """The mirror's, the embedded checker's and (with ``tlc_jar``) TLC's verdict on ``path``."""
    from kvoffload_lab.verify.mirror import PRODUCT_LIFECYCLES, check_trace_lines, read_lifecycle_trace
    from kvoffload_lab.verify.trace_tla_rules import check_trace_module, write_product_trace_module

    lines = path.read_text(encoding="utf-8").splitlines()
    mirror = check_trace_lines(lines, PRODUCT_LIFECYCLES)
    verdicts = [
        TraceVerdict("mirror", True) if mirror.error is None
        else TraceVerdict("mirror", False, mirror.error.line, mirror.error.reason)
    ]
    numbered = read_lifecycle_trace(lines)
    with tempfile.TemporaryDirectory(prefix="kvoffload-live-tla-") as folder:
        tla_path, _ = write_product_trace_module(numbered, PRODUCT_LIFECYCLES, Path(folder))
        embedded = check_trace_module(tla_path)
        verdicts.append(TraceVerdict("embedded", embedded.ok, embedded.line, embedded.reason))
        if tlc_jar is not None:
            verdicts.append(_tlc(tla_path, tlc_jar))
    return verdicts


def _tlc(tla_path: Path, jar: str) -> TraceVerdict:
    from tlacheck.tlc import run_tlc

    result = run_tlc(tla_path, jar=jar, check_deadlock=False, timeout=300)
    if result.result == "success":
        return TraceVerdict("tlc", True)
    line = None
    if result.trace and "line" in result.trace[-1].state:
        line = int(str(result.trace[-1].state["line"]))
    what = f"TLA+ invariant {result.violated} is violated" if result.violated else (result.message or result.result)
    return TraceVerdict("tlc", False, line, what)
