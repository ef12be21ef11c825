"""Differential fuzzing of the embedded TLA+ checker against TLC (``make tla-fuzz``).

Random specs from :mod:`specgen` run under both engines (TLC in one long-lived JVM,
:class:`tlacheck.tlc_batch.TlcSession`); any difference in the verdict, distinct states,
depth, the violated invariant or property, or the counterexample's length is a disagreement.
The embedded checker runs in a process of its own under the spec's drawn ``PYTHONHASHSEED``
(``GeneratedSpec.hash_seed``): an answer that depends on the hash seed (the order of sets and
dicts, reused object ids) shows up across specs, and each disagreement names the seed that
reproduces it (``PYTHONHASHSEED=N tlacheck check Fuzz.tla``). Prints one JSON object: specs run,
disagreements (with the spec and config text and the hash seed), specs TLC rejected (a generator
bug), verdicts, and how often each construct appeared::

    python packages/tlacheck/tests/tla_fuzz.py --specs 2000 --jar ../shared/tlc/tla2tools.jar

Exit status 0 when every spec agreed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from multiprocessing.pool import AsyncResult
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

sys.path.insert(0, str(Path(__file__).parent))

import tlacheck
from specgen import GeneratedSpec, specs
from tlacheck.expectation import result_differences
from tlacheck.result import EXIT_ERROR, CheckResult, TraceStep
from tlacheck.tlc_batch import TlcSession

# TLC statuses that mean the generator wrote something TLC cannot read (parse or semantic error,
# a crash): a bug of the generator, not of a checker. (A config error both engines report, such
# as a constant invariant that is FALSE, is an agreement.)
REJECTED = {150, 255, 1}


# Both engines found a liveness violation with lassos of different lengths: TLC's lasso is the
# first bad cycle its own search order meets, not the shortest, and the embedded checker does
# not reproduce that order. Counted apart (docs/tla.md), not as a disagreement.
LASSO = "liveness counterexample length"
# Several properties violated at once: TLC names the one its search meets first, the embedded
# checker the first in the config's order. Where the names differ, TLC checks the embedded
# checker's property alone; when it then gives the embedded checker's whole answer, both answers
# are true, and the case is counted apart (docs/tla.md), not as a disagreement.
RENAMED = "violated property named differently, the embedded one confirmed by TLC alone"


@dataclass
class Verdict:
    """Both engines' answers on one spec, and what they differ in."""

    tlc: CheckResult
    embedded: CheckResult
    differences: list[str]
    rejected: bool


EMBEDDED = ("import json, sys; from tlacheck import check_model; "
            "print(json.dumps(check_model(sys.argv[1], sys.argv[2], max_memory_mb=None).to_json()))")


def check_embedded(module: Path, config: Path, hash_seed: int) -> CheckResult:
    """The embedded checker's answer, from a process started with ``PYTHONHASHSEED=hash_seed``
    (the hash seed is fixed when an interpreter starts). A crash is an error result."""
    src = str(Path(tlacheck.__file__).parents[1])
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed),
           "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", EMBEDDED, str(module), str(config)], capture_output=True,
                          text=True, env=env, timeout=900)
    if done.returncode != 0 or not done.stdout.strip():
        return CheckResult(engine="embedded", result="error", exit_code=EXIT_ERROR,
                           message=f"the embedded checker crashed: {done.stderr[-2000:]}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])  # after anything the spec printed
    answer["trace"] = [TraceStep(**step) for step in answer["trace"]]
    return CheckResult(**answer)


def run_both(spec: GeneratedSpec, session: TlcSession, folder: Path) -> Verdict:
    """Write the spec into ``folder`` and check it under both engines."""
    module, config = folder / "Fuzz.tla", folder / "Fuzz.cfg"
    module.write_text(spec.module)
    config.write_text(spec.config)
    tlc = session.check(module, config)
    embedded = check_embedded(module, config, spec.hash_seed)
    rejected = tlc.exit_code in REJECTED
    differences = compare(tlc, embedded)
    if _names_another_property(spec, tlc, embedded, differences):
        alone = folder / "FuzzAlone.cfg"
        alone.write_text(one_property(spec.config, embedded.violated or ""))
        if set(compare(session.check(module, alone), embedded)) <= {LASSO}:
            differences = [RENAMED]
    return Verdict(tlc, embedded, differences, rejected)


def compare(tlc: CheckResult, embedded: CheckResult) -> list[str]:
    """What the two answers differ in; a liveness lasso's length as :data:`LASSO`."""
    if tlc.result == "error" and embedded.result == "error":
        return []
    differences = result_differences(tlc, embedded)
    if tlc.result == embedded.result == "liveness failure":
        differences = [LASSO if d.startswith("trace length") else d for d in differences]
    return differences


def _names_another_property(spec: GeneratedSpec, tlc: CheckResult, embedded: CheckResult,
                            differences: list[str]) -> bool:
    """Both engines found a property violated, and differ in which (and at most in the trace)."""
    return (tlc.result == embedded.result and embedded.violated is not None
            and f"PROPERTY {embedded.violated}" in spec.config.splitlines()
            and any(d.startswith("violated:") for d in differences)
            and all(d.startswith(("violated:", "trace length")) or d == LASSO for d in differences))


def one_property(config: str, name: str) -> str:
    """``config`` with ``name`` as its only PROPERTY."""
    kept = [line for line in config.splitlines() if not line.startswith("PROPERTY ")]
    return "\n".join([*kept, f"PROPERTY {name}"]) + "\n"


@dataclass
class Campaign:
    """Counts over a fuzzing run."""

    specs: int = 0
    constructs: Counter[str] = field(default_factory=Counter)
    verdicts: Counter[str] = field(default_factory=Counter)
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    tlc_seconds: float = 0.0
    embedded_seconds: float = 0.0
    distinct_states: list[int] = field(default_factory=list)
    unique: set[str] = field(default_factory=set)
    repeats: int = 0
    lasso_lengths: list[dict[str, Any]] = field(default_factory=list)
    renamed: list[dict[str, Any]] = field(default_factory=list)

    def record(self, spec: GeneratedSpec, verdict: Verdict) -> None:
        self.specs += 1
        self.constructs.update(spec.constructs)
        self.verdicts[verdict.tlc.result] += 1
        self.tlc_seconds += verdict.tlc.seconds
        self.embedded_seconds += verdict.embedded.seconds
        self.distinct_states.append(verdict.tlc.distinct_states)
        case = {"module": spec.module, "config": spec.config, "hash_seed": spec.hash_seed,
                "tlc": f"{verdict.tlc.result} ({verdict.tlc.exit_code}): {verdict.tlc.message[:300]}",
                "embedded": f"{verdict.embedded.result} ({verdict.embedded.exit_code}): "
                            f"{verdict.embedded.message[:300]}"}
        if verdict.rejected:
            self.rejected.append(case)
        elif verdict.differences == [LASSO]:
            self.lasso_lengths.append({**case, "differences": verdict.differences})
        elif verdict.differences == [RENAMED]:
            self.renamed.append(case)
        elif verdict.differences:
            self.disagreements.append({**case, "differences": verdict.differences})
        print(f"spec {self.specs}: PYTHONHASHSEED={spec.hash_seed} "
              f"{'; '.join(verdict.differences) or 'agree'}", file=sys.stderr, flush=True)

    def to_json(self) -> dict[str, Any]:
        states = sorted(self.distinct_states) or [0]
        return {
            "specs": self.specs,
            "repeats_skipped": self.repeats,
            "disagreements": len(self.disagreements),
            "rejected_by_tlc": len(self.rejected),
            "liveness_counterexample_lengths_differ": len(self.lasso_lengths),
            "violated_property_named_differently": len(self.renamed),
            "verdicts": dict(self.verdicts.most_common()),
            "constructs": dict(sorted(self.constructs.items())),
            "distinct_states": {"median": states[len(states) // 2], "max": states[-1]},
            "tlc_seconds": round(self.tlc_seconds, 1),
            "embedded_seconds": round(self.embedded_seconds, 1),
            "disagreement_cases": self.disagreements,
            "rejected_cases": self.rejected[:5],
            "lasso_length_cases": self.lasso_lengths[:5],
            "renamed_cases": self.renamed[:5],
        }


class _Done(BaseException):
    """Ends the campaign (enough specs, the time is up, or SIGTERM). A BaseException, so that
    hypothesis passes it on at once instead of replaying the example as a failure."""


def _stop(signum: int, frame: object) -> None:
    raise _Done


# One TLC session and folder per worker process (set by _start_worker).
_worker: tuple[TlcSession, Path] | None = None


def _start_worker(jar: str | None, folder: str) -> None:
    global _worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when the campaign ends
    own = Path(folder) / str(os.getpid())
    own.mkdir()
    # The JVM ends when this process exits and its pipe closes.
    _worker = (TlcSession(jar), own)


def _check_in_worker(spec: GeneratedSpec) -> Verdict:
    if _worker is None:
        raise RuntimeError("a fuzzing worker without a TLC session")
    session, folder = _worker
    return run_both(spec, session, folder)


def fuzz(count: int, seed: int, jar: str | None, seconds: float | None = None, jobs: int = 2) -> Campaign:
    """Check ``count`` distinct random specs under both engines (hypothesis draws some specs
    more than once: a repeat is skipped), or as many as ``seconds`` allow. ``jobs`` worker
    processes, each with its own TLC session, check specs side by side: TLC's time per spec is
    mostly loading its classes afresh, which one process cannot shorten."""
    campaign = Campaign()
    deadline = None if seconds is None else time.monotonic() + seconds
    pending: deque[tuple[GeneratedSpec, AsyncResult[Verdict]]] = deque()

    def collect(block_above: int) -> None:
        while pending and (pending[0][1].ready() or len(pending) > block_above):
            spec, answer = pending.popleft()
            campaign.record(spec, answer.get())
            if campaign.specs % 100 == 0:
                print(f"{campaign.specs} specs, {len(campaign.disagreements)} disagreements, "
                      f"{len(campaign.rejected)} rejected", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="tlacheck-fuzz-") as tmp, \
            multiprocessing.get_context("fork").Pool(jobs, _start_worker, (jar, tmp)) as pool:

        @hypothesis_seed(seed)
        @settings(max_examples=count * 4, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(specs())
        def one(spec: GeneratedSpec) -> None:
            if campaign.specs + len(pending) >= count or (deadline is not None and time.monotonic() > deadline):
                raise _Done
            if spec.module + spec.config in campaign.unique:
                campaign.repeats += 1
                return
            campaign.unique.add(spec.module + spec.config)
            pending.append((spec, pool.apply_async(_check_in_worker, (spec,))))
            collect(2 * jobs)

        previous = signal.signal(signal.SIGTERM, _stop)
        try:
            one()
            collect(0)
        except _Done:
            # Enough specs or out of time: the specs under way still count. (SIGTERM: only those done.)
            with contextlib.suppress(_Done):
                collect(0 if deadline is None or time.monotonic() <= deadline else len(pending))
        finally:
            signal.signal(signal.SIGTERM, previous)
    return campaign


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=int, default=2000, help="how many random specs (default 2000)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    parser.add_argument("--jar", help="tla2tools.jar (default: $TLA2TOOLS_JAR, else the cache)")
    parser.add_argument("--seconds", type=float, help="stop after this long, with fewer specs (default: no limit)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes, each with a TLC session (default 2)")
    args = parser.parse_args()
    started = time.perf_counter()
    campaign = fuzz(args.specs, args.seed, args.jar, args.seconds, args.jobs)
    print(json.dumps({**campaign.to_json(), "seconds": round(time.perf_counter() - started, 1)}, indent=2))
    return 0 if not campaign.disagreements and not campaign.rejected else 1


if __name__ == "__main__":
    sys.exit(main())
