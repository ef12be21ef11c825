"""What a checker reports: one verdict per manager x checker, with the violation and its step list,
and whose exception it was when the harness caught one: vLLM's (a ``Crash`` finding) or kvoffload's
own (:class:`UnsupportedVllmApi`: this vLLM's API is not one the harness knows)."""

from __future__ import annotations

import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kvoffload

CRASH = "Crash"
UNSUPPORTED = "unsupported vLLM API"
MAX_TRACE_LINES = 60
# kvoffload's package folders, the product's and the lab's (this file is kvoffload_lab/vllm/offloading/
# findings.py): a frame in either is our harness's, never vLLM's crash.
KVOFFLOAD_DIRS = (Path(kvoffload.__file__).resolve().parent, Path(__file__).resolve().parents[2])


@dataclass
class CheckerVerdict:
    """One manager x checker verdict; ``trace`` is the step list that shows the violation."""

    manager: str
    checker: str
    # "violation"; "loss" (the simple connector's dropped blocks); "unsupported": kvoffload's
    # harness could not drive this vLLM (UNSUPPORTED), which says nothing about vLLM's connector.
    result: str = "success"
    invariant: str | None = None
    error: str | None = None
    trace: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "manager": self.manager,
            "checker": self.checker,
            "result": self.result,
            "invariant": self.invariant,
            "error": self.error,
            "trace": list(self.trace),
            "seconds": round(self.seconds, 2),
            **({"details": self.details} if self.details else {}),
        }


class UnsupportedVllmApi(Exception):
    """kvoffload's harness failed driving this vLLM: an exception raised in kvoffload's own code (a
    call into vLLM's API whose signature changed, an attribute or module vLLM no longer has), or by
    vLLM on kvoffload's objects. Never a finding about vLLM's connector. ``invariant`` names it for
    the explorer, which reports an exception under its ``invariant`` attribute."""

    invariant = UNSUPPORTED


def vllm_dir() -> Path | None:
    """The folder of the imported ``vllm`` package (None before vLLM is imported)."""
    module = sys.modules.get("vllm")
    location = getattr(module, "__file__", None)
    return Path(location).resolve().parent if location else None


def _inside(filename: str, folder: Path | None) -> bool:
    return folder is not None and Path(filename).resolve().is_relative_to(folder)


def _ours(filename: str, ours: tuple[Path, ...]) -> Path | None:
    """The folder of ``ours`` that holds ``filename``, or None."""
    return next((folder for folder in ours if _inside(filename, folder)), None)


def _short(filename: str, folder: Path | None) -> str:
    """``filename`` from its package's folder on (``vllm/...``, ``kvoffload/...``)."""
    path = Path(filename).resolve()
    return str(path.relative_to(folder.parent)) if folder is not None and path.is_relative_to(folder) else filename


def _where(frame: traceback.FrameSummary, folder: Path | None) -> str:
    return f"{_short(frame.filename, folder)}:{frame.lineno} in {frame.name}"


# A call whose arguments do not fit the callee: ``Qual.name() missing 1 required ...``, ``got an
# unexpected keyword argument``, ``takes 2 positional arguments but 3 were given``.
_CALL_MISMATCH = re.compile(r"^([\w.<>]+)\(\) (?:missing|got|takes)")


def _defined_by(top_level_name: str, package: str) -> bool:
    """Whether an imported module of ``package`` defines ``top_level_name`` itself (read from the
    modules' dicts: a module's ``__getattr__`` may import)."""
    for name, module in list(sys.modules.items()):
        if name == package or name.startswith(package + "."):
            value = vars(module).get(top_level_name)
            if value is not None and getattr(value, "__module__", None) == name:
                return True
    return False


def _on_our_object(error: BaseException, ours: str, theirs: str) -> str | None:
    """What of package ``ours`` (kvoffload) the code of package ``theirs`` (vLLM) used and could
    not: an attribute one of its objects lacks, or a call of one of its functions whose signature
    does not fit; None when ``error`` is not of that kind."""
    if isinstance(error, AttributeError):
        owner = type(getattr(error, "obj", None))
        if owner.__module__.split(".")[0] == ours:
            return f"{ours}'s {owner.__qualname__}"
    match = _CALL_MISMATCH.match(str(error)) if isinstance(error, TypeError) else None
    if match:
        # A name both define is taken as vLLM's: a genuine crash must stay a finding.
        top = match.group(1).split(".")[0]
        if _defined_by(top, ours) and not _defined_by(top, theirs):
            return f"{ours}'s {match.group(1)}"
    return None


def harness_error(error: BaseException, ours: tuple[Path, ...] = KVOFFLOAD_DIRS,
                  theirs: Path | None = None) -> str | None:
    """Why ``error`` is kvoffload's harness failing rather than vLLM's code crashing, as one line,
    or None when it is vLLM's. The innermost frame of either package decides (frames of neither,
    such as the standard library or torch, belong to their caller): raised in kvoffload's code is
    kvoffload's (a mismatched call into vLLM raises in the calling frame); raised in vLLM's code is
    vLLM's, unless vLLM failed on one of kvoffload's objects (an attribute it lacks, a call whose
    signature does not fit). An ``ImportError`` is never vLLM's crash. ``ours`` are kvoffload's package
    folders, ``theirs`` is vLLM's (default: the imported vLLM)."""
    theirs = theirs if theirs is not None else vllm_dir()
    owned = [f for f in traceback.extract_tb(error.__traceback__)
             if _ours(f.filename, ours) or _inside(f.filename, theirs)]
    if not owned:
        return None
    frame = owned[-1]
    text = f"{type(error).__name__}: {error}"
    our_folder = _ours(frame.filename, ours)
    if isinstance(error, ImportError):  # a module or name this vLLM lacks, whoever imported it
        return f"{text} at {_where(frame, our_folder or theirs)}"
    if our_folder is not None:
        call = f": {frame.line.strip()}" if frame.line else ""
        return f"{text} at {_where(frame, our_folder)}{call}"
    if theirs is None:
        return None
    used = next(filter(None, (_on_our_object(error, folder.name, theirs.name) for folder in ours)), None)
    return None if used is None else f"{text} at {_where(frame, theirs)} (vLLM's code using {used})"


def crash_message(error: BaseException, theirs: Path | None = None) -> str:
    """``Type: message`` and the innermost vLLM frame that raised (file:line in function)."""
    theirs = theirs if theirs is not None else vllm_dir()
    frames = traceback.extract_tb(error.__traceback__)
    inside = [f for f in frames if _inside(f.filename, theirs)] or frames
    where = f" at {_where(inside[-1], theirs)}" if inside else ""
    return f"{type(error).__name__}: {error}{where}"


def vllm_crash(error: Exception) -> str:
    """The ``Crash`` message of an exception vLLM raised; raises :class:`UnsupportedVllmApi` (from
    ``error``) when it is kvoffload's harness failing instead."""
    ours = harness_error(error)
    if ours is not None:
        raise UnsupportedVllmApi(ours) from error
    return crash_message(error)


def unsupported_verdict(manager: str, checker: str, error: Exception) -> CheckerVerdict:
    """The verdict of a checker that could not drive this vLLM: ``error`` is the
    :class:`UnsupportedVllmApi` it raised, or any exception that escaped the checker (building
    vLLM's connector from kvoffload's hand-made configuration, for one), which no check saw."""
    message = str(error) if isinstance(error, UnsupportedVllmApi) else (
        harness_error(error) or f"vLLM raised while kvoffload set it up: {crash_message(error)}")
    return CheckerVerdict(manager, checker, "unsupported", UNSUPPORTED, message)


QUOTED = re.compile(r"'([^']+)'")
KEY_NAME = re.compile(r"k\d+")


def requests_named(message: str) -> set[str]:
    """The request ids a violation message quotes (key names such as ``k3`` are not requests)."""
    return {name for name in QUOTED.findall(message) if not KEY_NAME.fullmatch(name)}


def relevant_events(events: list[tuple[int, str]], request_ids: set[str]) -> list[str]:
    """The events that mention one of ``request_ids`` (all events when none is named), as
    ``step N: text`` lines, the last ``MAX_TRACE_LINES`` of them."""
    if request_ids:
        pattern = re.compile(r"\b(" + "|".join(re.escape(r) for r in sorted(request_ids)) + r")\b")
        chosen = [(step, text) for step, text in events if pattern.search(text) or text == "reset_cache"]
    else:
        chosen = list(events)
    lines = [f"step {step}: {text}" for step, text in chosen]
    if len(lines) > MAX_TRACE_LINES:
        lines = [f"... {len(lines) - MAX_TRACE_LINES} earlier event(s) left out", *lines[-MAX_TRACE_LINES:]]
    return lines
