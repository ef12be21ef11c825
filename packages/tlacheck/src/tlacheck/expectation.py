"""What a model announces and whether a run met it: a ``.cfg``'s ``\\* expect: ...`` and ``\\* spec:
X.tla`` comments, one model checked against them (``check-all``), and what TLC and the embedded
checker answered differently for one model (``check-all --both``, the differential tests)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlacheck.engine import UsageError, run_engine
from tlacheck.result import CheckResult

_EXPECT_RE = re.compile(r"^\s*\\\*\s*expect:\s*(.+?)\s*$", re.MULTILINE)
_SPEC_RE = re.compile(r"^\s*\\\*\s*spec:\s*(\S+)\s*$", re.MULTILINE)
_OUTCOMES = ("success", "safety failure", "liveness failure", "deadlock failure", "error")


@dataclass(frozen=True)
class Expectation:
    """What a model's ``\\* expect: ...`` comment announces: an outcome, and for violations
    optionally the name of the violated invariant/property."""

    result: str
    violated: str | None = None

    def __str__(self) -> str:
        return f"{self.result} {self.violated}" if self.violated else self.result

    def met_by(self, result: CheckResult) -> bool:
        """True when ``result`` is the announced outcome (and names the announced violation)."""
        if result.result != self.result:
            return False
        # TLC may name several properties ("P, Q"): the announced one must be among them.
        from tlacheck.tlc import violated_properties

        return self.violated is None or self.violated in violated_properties(result.violated or "")


def parse_expectation(text: str) -> Expectation:
    """Parse ``success``, ``safety failure NoManagerCallAfterSignal``, ``deadlock failure``, ..."""
    text = " ".join(text.split())
    for outcome in sorted(_OUTCOMES, key=len, reverse=True):
        if text == outcome:
            return Expectation(outcome)
        if text.startswith(outcome + " "):
            name = text[len(outcome) + 1 :].strip()
            if outcome == "success" or " " in name:
                break
            return Expectation(outcome, name)
    raise ValueError(f"unknown expectation {text!r} (expected one of: {', '.join(_OUTCOMES)} [NAME])")


def read_expectation(config: Path) -> Expectation | None:
    """The expectation of a ``.cfg``, or None if it has no ``\\* expect:`` line."""
    match = _EXPECT_RE.search(config.read_text())
    return parse_expectation(match.group(1)) if match else None


def spec_for_config(config: Path) -> Path:
    """The module a model checks: its ``\\* spec: X.tla`` comment, else the .tla named like the
    cfg up to its first ``_``, else the only .tla of the directory."""
    directory = config.parent
    match = _SPEC_RE.search(config.read_text())
    if match:
        named = directory / match.group(1)
        if not named.is_file():
            raise UsageError(f"{config}: names spec {match.group(1)}, which is not in {directory}")
        return named
    by_name = directory / (config.stem.split("_", 1)[0] + ".tla")
    if by_name.is_file():
        return by_name
    modules = sorted(directory.glob("*.tla"))
    if len(modules) == 1:
        return modules[0]
    raise UsageError(f"{config}: cannot tell which .tla it checks (add a line '\\* spec: X.tla')")


@dataclass
class ModelOutcome:
    """One line of ``check-all``."""

    model: str
    spec: str
    expected: str
    got: str
    ok: bool
    distinct_states: int
    seconds: float
    result: CheckResult | None

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "spec": self.spec,
            "expected": self.expected,
            "got": self.got,
            "ok": self.ok,
            "distinct_states": self.distinct_states,
            "seconds": self.seconds,
            "result": self.result.to_json() if self.result else None,
        }


def check_one_model(config: Path, engine: str, jar: Path | None, max_states: int | None,
                    tlc_options: Any = None) -> ModelOutcome:
    """Check one ``.cfg`` and compare with its expectation; input errors become ``got: error``."""
    started = time.perf_counter()
    spec_name = "?"
    expected = "?"
    try:
        expectation = read_expectation(config)
        if expectation is None:
            raise UsageError(f"{config}: no '\\* expect: ...' line")
        expected = str(expectation)
        spec = spec_for_config(config)
        spec_name = spec.name
        result = run_engine(engine, spec, config, jar=jar, max_states=max_states, tlc_options=tlc_options)
    except (UsageError, ValueError) as error:
        # A model expected to be rejected (e.g. a deliberately broken cfg) may say "expect: error".
        return ModelOutcome(
            model=config.name,
            spec=spec_name,
            expected=expected,
            got=f"error: {error}",
            ok=expected == "error",
            distinct_states=0,
            seconds=time.perf_counter() - started,
            result=None,
        )
    got = f"{result.result} {result.violated}" if result.violated else result.result
    return ModelOutcome(
        model=config.name,
        spec=spec_name,
        expected=expected,
        got=got,
        ok=expectation.met_by(result),
        distinct_states=result.distinct_states,
        seconds=result.seconds or (time.perf_counter() - started),
        result=result,
    )


def disagreements(tlc_outcome: ModelOutcome, embedded_outcome: ModelOutcome) -> list[str]:
    """What TLC and the embedded checker answered differently for one model (empty: they agree)."""
    a, b = tlc_outcome.result, embedded_outcome.result
    if a is None or b is None:
        both_errors = tlc_outcome.got.startswith("error") == embedded_outcome.got.startswith("error")
        same = (a is None) == (b is None) and both_errors
        return [] if same else [f"verdict: TLC {tlc_outcome.got} / embedded {embedded_outcome.got}"]
    return result_differences(a, b)


def result_differences(tlc_result: CheckResult, embedded_result: CheckResult) -> list[str]:
    """What two results of one model differ in, of the verdict, distinct states, depth, the
    violated invariant or property and the counterexample's length (empty: they agree).
    ``tlc_result`` gives the counts to compare, unless TLC printed none."""
    from tlacheck.tlc import violated_properties

    a, b = tlc_result, embedded_result
    fields = {"verdict": (a.result, b.result)}
    # TLC prints no statistics when an initial state breaks an invariant: nothing to compare.
    if a.states_generated or a.result in ("success", "error"):
        fields |= {"distinct states": (a.distinct_states, b.distinct_states), "depth": (a.depth, b.depth)}
    # TLC names every property the counterexample violates; the embedded checker the first.
    violated = b.violated if a.result in ("liveness failure", "safety failure") \
        and b.violated in violated_properties(a.violated or "") \
        else a.violated
    fields |= {
        "violated": (violated, b.violated),
        "trace length": (_states_in_trace(a), _states_in_trace(b)),
    }
    return [f"{name}: TLC {x} / embedded {y}" for name, (x, y) in fields.items() if x != y]


def _states_in_trace(result: CheckResult) -> int:
    """The states of a counterexample: TLC writes a stuttering ending as a step of its own, the
    embedded checker as a loop back to the last state."""
    from tlacheck.tlc import STUTTERING_ACTION

    return sum(step.action != STUTTERING_ACTION for step in result.trace)
