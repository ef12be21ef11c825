"""The result of a model-checking run, shared by the TLC runner and the embedded TLA+ checker.

Both engines return a :class:`CheckResult`, so ``tlacheck check`` prints the same JSON and
exits with the same status whichever engine ran (TLC's own exit codes, the ``EXIT_*`` constants).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Outcome = Literal["success", "safety failure", "liveness failure", "deadlock failure", "error"]

# TLC's documented exit codes (tlc2.output.EC.ExitStatus); the embedded checker uses the same ones.
EXIT_SUCCESS = 0
EXIT_VIOLATION_ASSUMPTION = 10
EXIT_VIOLATION_DEADLOCK = 11
EXIT_VIOLATION_SAFETY = 12
EXIT_VIOLATION_LIVENESS = 13
EXIT_VIOLATION_ASSERT = 14
EXIT_FAILURE_SPEC_EVAL = 75
EXIT_FAILURE_SAFETY_EVAL = 76
EXIT_FAILURE_LIVENESS_EVAL = 77
EXIT_ERROR_SPEC_PARSE = 150
EXIT_ERROR_CONFIG_PARSE = 151
EXIT_ERROR_STATESPACE_TOO_LARGE = 152
EXIT_ERROR_SYSTEM = 153
EXIT_ERROR = 255
# Not TLC's: the shell's status for a run stopped by Ctrl-C (128 + SIGINT), which the embedded
# checker and every kvoffload command exit with.
EXIT_INTERRUPTED = 130

@dataclass
class TraceStep:
    """One state of a counterexample: the action that led to it (``"Initial predicate"`` first)
    and the values of all variables, rendered as TLA+ expressions."""

    action: str
    state: dict[str, str]


@dataclass
class CheckResult:
    """What a model checker found for one spec and one model (.cfg)."""

    engine: Literal["tlc", "embedded"]
    result: Outcome
    distinct_states: int = 0
    states_generated: int = 0
    states_left_on_queue: int = 0
    depth: int = 0
    violated: str | None = None
    trace: list[TraceStep] = field(default_factory=list)
    # Index (0-based) of the state a liveness lasso loops back to; None for finite traces.
    loop_back_to: int | None = None
    message: str = ""
    exit_code: int = EXIT_SUCCESS
    seconds: float = 0.0
    spec: str = ""
    config: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
