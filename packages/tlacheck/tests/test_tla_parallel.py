"""Successor generation in worker processes gives exactly the single-process search's answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tlacheck import check, check_model, parallel

GRID = """---- MODULE Grid ----
EXTENDS Naturals
CONSTANTS N, LIMIT
VARIABLES a, b, c
Init == a = 0 /\\ b = 0 /\\ c \\in 0..N
Next == \\/ a < N /\\ a' = a + 1 /\\ UNCHANGED <<b, c>>
        \\/ b < N /\\ b' = b + 1 /\\ UNCHANGED <<a, c>>
        \\/ c > 0 /\\ c' = c - 1 /\\ UNCHANGED <<a, b>>
        \\/ a = N /\\ b = N /\\ c = N /\\ UNCHANGED <<a, b, c>>
NextErr == Next \\/ (a = N - 1 /\\ b = N - 1 /\\ a' = 1 \\div (c - c) /\\ UNCHANGED <<b, c>>)
NextUnset == Next \\/ (a = N - 1 /\\ b = N - 2 /\\ a' = 0 /\\ b' = 0)
Inv == a + b + c # LIMIT
Bound == a + b <= 30
Grows == [][a' >= a]_<<a, b, c>>
Frozen == [][b' = b \\/ a + b + c < 45]_<<a, b, c>>
Spec == Init /\\ [][Next]_<<a, b, c>> /\\ WF_<<a, b, c>>(Next)
SpecErr == Init /\\ [][Next]_<<a, b, c>> /\\ WF_<<a, b, c>>(NextErr)
Ends == <>(a = N)
NeverEnds == <>(c = N + 1)
====
"""


def count_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one item per run of states handed to a worker."""
    calls: list[int] = []
    real = parallel.Pool.submit

    def counted(self: parallel.Pool, *args: object) -> parallel.Batch:
        calls.append(1)
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(parallel.Pool, "submit", counted)
    return calls


def run(tmp_path: Path, cfg: str, workers: int) -> dict[str, object]:
    (tmp_path / "Grid.tla").write_text(GRID)
    (tmp_path / "Grid.cfg").write_text(cfg)
    result = check_model(tmp_path / "Grid.tla", tmp_path / "Grid.cfg", workers=workers)
    out = asdict(result)
    out.pop("seconds")
    return out


@pytest.mark.parametrize("cfg", [
    "CONSTANT N = 20\nLIMIT = 100\nINIT Init\nNEXT Next\nINVARIANT Inv\n",  # success, wide levels
    "CONSTANT N = 20\nLIMIT = 45\nINIT Init\nNEXT Next\nINVARIANT Inv\n",  # violation deep in the search
    "CONSTANT N = 20\nLIMIT = 100\nINIT Init\nNEXT NextErr\n",  # evaluation error (\\div 0) in Next
    "CONSTANT N = 20\nLIMIT = 100\nINIT Init\nNEXT NextUnset\n",  # c' left unassigned
    # A CONSTRAINT cuts the search (out-of-model successors are counted, not stored).
    "CONSTANT N = 20\nLIMIT = 100\nINIT Init\nNEXT Next\nINVARIANT Inv\nCONSTRAINT Bound\nCHECK_DEADLOCK FALSE\n",
    # Action properties: one holds on every step, one fails on a step deep in the search.
    "CONSTANT N = 20\nLIMIT = 100\nINIT Init\nNEXT Next\nPROPERTY Grows\nCHECK_DEADLOCK FALSE\n",
    "CONSTANT N = 20\nLIMIT = 100\nINIT Init\nNEXT Next\nPROPERTY Frozen\nCHECK_DEADLOCK FALSE\n",
    # Liveness under weak fairness: satisfied, and violated with a lasso trace.
    "CONSTANT N = 20\nLIMIT = 100\nSPECIFICATION Spec\nPROPERTY Ends\nCHECK_DEADLOCK FALSE\n",
    "CONSTANT N = 20\nLIMIT = 100\nSPECIFICATION Spec\nPROPERTY NeverEnds\nCHECK_DEADLOCK FALSE\n",
    # An evaluation error in a fairness action (not in Next): found by the liveness check.
    "CONSTANT N = 20\nLIMIT = 100\nSPECIFICATION SpecErr\nPROPERTY Ends\nCHECK_DEADLOCK FALSE\n",
], ids=["deadlock", "violation", "eval-error", "unassigned", "constraint", "action-property", "action-violation",
        "liveness", "liveness-violation", "fairness-eval-error"])
def test_two_workers_give_the_sequential_answer(cfg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = run(tmp_path, cfg, 1)
    # Small batches, so that the worker processes take part at every level of this model.
    monkeypatch.setattr(check, "_PARALLEL_BATCH", 64)
    calls = count_runs(monkeypatch)
    two = run(tmp_path, cfg, 2)
    assert one == two
    assert len(calls) > 10 and one["distinct_states"] > 2000, one


def test_a_worker_that_dies_stops_the_check_with_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check, "_PARALLEL_BATCH", 64)

    def die(self: parallel.Expansion, ids: object) -> list[parallel.Successors]:
        os._exit(1)  # runs in the forked worker only: the checker itself expands no run

    monkeypatch.setattr(parallel.Expansion, "expand", die)
    out = run(tmp_path, "CONSTANT N = 20\nLIMIT = 100\nINIT Init\nNEXT Next\nINVARIANT Inv\n", 2)
    assert out["result"] == "error" and out["exit_code"] == 153, out
    assert "worker process" in out["message"] and "--workers 1" in out["message"]
    assert 0 < out["distinct_states"] < 21 * 21 * 21


SYM = """---- MODULE Sym ----
EXTENDS FiniteSets, TLC
CONSTANT Procs
VARIABLE st
Init == st = [p \\in Procs |-> 0]
Next == \\E p \\in Procs : st[p] < 6 /\\ st' = [st EXCEPT ![p] = @ + 1]
Inv == Cardinality({p \\in Procs : st[p] = 6}) < 5
Perms == Permutations(Procs)
====
"""


def test_two_workers_give_the_sequential_answer_under_symmetry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "Sym.tla").write_text(SYM)
    (tmp_path / "Sym.cfg").write_text("CONSTANT Procs = {p1, p2, p3, p4, p5}\nINIT Init\nNEXT Next\n"
                                      "INVARIANT Inv\nSYMMETRY Perms\n")
    monkeypatch.setattr(check, "_PARALLEL_BATCH", 64)
    calls = count_runs(monkeypatch)
    answers = []
    for workers in (1, 2):
        out = asdict(check_model(tmp_path / "Sym.tla", tmp_path / "Sym.cfg", workers=workers))
        out.pop("seconds")
        answers.append(out)
    one, two = answers
    assert one == two and len(calls) > 3
    # Multisets of 5 counters in 0..6, the last one (all 6) violating Inv at the end of its trace.
    assert one["result"] == "safety failure" and one["distinct_states"] == 462 and len(one["trace"]) == 31


WIDE = """---- MODULE Wide ----
EXTENDS Naturals, Sequences
VARIABLES a, k, s
Init == a \\in 0..2999 /\\ k = 0 /\\ s = <<>>
Next == k < 4 /\\ k' = k + 1 /\\ s' = [i \\in 1..60 |-> a * 7 + k + i] /\\ UNCHANGED a
Inv == ~(k = 3 /\\ a = 2900)
====
"""


def test_a_violation_with_large_jobs_in_flight_stops_the_workers(tmp_path: Path) -> None:
    # Wide levels of large states: when the violation stops the search, a worker is writing
    # results that nobody reads and the checker's writer thread a job that nobody reads (both
    # beyond a pipe's buffer). Run in a child process, so that a hang fails instead of blocking.
    (tmp_path / "Wide.tla").write_text(WIDE)
    (tmp_path / "Wide.cfg").write_text("INIT Init\nNEXT Next\nINVARIANT Inv\nCHECK_DEADLOCK FALSE\n")
    code = ("import json, sys; from dataclasses import asdict; from tlacheck import check_model; "
            "r = asdict(check_model(sys.argv[1], sys.argv[2], workers=int(sys.argv[3]))); r.pop('seconds'); "
            "print(json.dumps(r))")
    answers = [subprocess.run([sys.executable, "-c", code, str(tmp_path / "Wide.tla"), str(tmp_path / "Wide.cfg"),
                               str(workers)], capture_output=True, text=True, timeout=120, check=True).stdout
               for workers in (1, 2)]
    assert answers[0] == answers[1]
    one = json.loads(answers[0])
    assert one["result"] == "safety failure" and one["violated"] == "Inv" and len(one["trace"]) == 4
