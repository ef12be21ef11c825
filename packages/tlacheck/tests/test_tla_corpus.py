"""The embedded checker against TLC on the public corpus (tests/corpus, 42 models of the
tlaplus/Examples repository with TLC's recorded verdict and distinct-state count).

``make test`` runs the models that finish in seconds here, against the recorded answers.
``make tla-corpus`` (TLA_CORPUS_ALL=1) runs every model, and where TLC can run here (a jar and
java) TLC's live answer is the oracle: the two engines must agree on the verdict, distinct
states, depth, the violated property and the trace's length; the recorded answers stay a second
check of both. Models the checker cannot support would be listed in UNSUPPORTED with the
construct (the test then asserts the located error naming it); none is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tlacheck import check_model, tlc
from tlacheck.expectation import result_differences
from tlacheck.result import EXIT_SUCCESS
from tlc_fakes import REAL_JAR, SHARED_TLC

CORPUS = Path(__file__).parent / "corpus"
MODELS: list[dict[str, Any]] = json.loads((CORPUS / "corpus.json").read_text())

# Too slow for `make test` on 2 shared cores (the distinct-state counts TLC took >= 5 s for, or
# pure-Python evaluation heavy); all run under `make tla-corpus`.
SLOW = frozenset({
    "specifications/Bakery-Boulangerie/MCBakery.cfg",
    "specifications/FiniteMonotonic/MCCRDT.cfg",
    "specifications/GameOfLife/GameOfLife.cfg",
    "specifications/LoopInvariance/MCBinarySearch.cfg",
    "specifications/MultiPaxos-SMR/MultiPaxos_MC_small.cfg",
    "specifications/SlushProtocol/SlushSmall.cfg",
    "specifications/TeachingConcurrency/SimpleRegular.cfg",
    "specifications/YoYo/YoYoAllGraphs.cfg",
    "specifications/allocator/AllocatorImplementation.cfg",
    "specifications/bcastByz/bcastByz.cfg",
    "specifications/braf/BufferedRandomAccessFile.cfg",
    "specifications/dag-consensus/TLCSailfish1.cfg",
    "specifications/lamport_mutex/MCLamportMutex.cfg",
})

# config -> (file:line of the located error, text naming the unsupported construct)
UNSUPPORTED: dict[str, tuple[str, str]] = {}

EVERY_MODEL = os.environ.get("TLA_CORPUS_ALL") == "1"
# TLA_CORPUS_LIVE=1: live TLC on the models selected (the fast ones without TLA_CORPUS_ALL).
LIVE_TLC = (EVERY_MODEL or os.environ.get("TLA_CORPUS_LIVE") == "1") and tlc.tlc_available(REAL_JAR)
# The JVM options the tlaplus/Examples manifest records for a model (their ASSUMEs check them).
JVM_OPTIONS = {
    "specifications/FiniteMonotonic/MCCRDT.cfg": ("-Dtlc2.tool.impl.Tool.cdot=true",),
    "specifications/FiniteMonotonic/MCReplicatedLog.cfg": ("-Dtlc2.tool.impl.Tool.cdot=true",),
}
# Proof and community modules for TLC: the shared snapshots, then the embedded checker's own
# bundle (it has FunctionTheorems, which bcastByz extends and the tlapm snapshot lacks).
LIBRARIES = (SHARED_TLC / "tlapm-library", SHARED_TLC / "community-modules",
             Path(tlc.__file__).parent / "library")


def _selected() -> list[dict[str, Any]]:
    return [m for m in MODELS if EVERY_MODEL or m["config"] not in SLOW]


def test_corpus_lists_tlc_answers() -> None:
    assert len(MODELS) == 42
    assert all(m["result"] in ("success", "safety failure", "liveness failure", "deadlock failure") for m in MODELS)
    assert SLOW | set(UNSUPPORTED) <= {m["config"] for m in MODELS}


@pytest.mark.parametrize("model", _selected(), ids=lambda m: m["config"].removeprefix("specifications/"))
def test_corpus_model_gives_tlcs_answer(model: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = CORPUS / model["config"]
    spec = CORPUS / model["spec"]
    # Like TLC, run from the folder of the .cfg: specs EXTEND modules that sit beside them.
    monkeypatch.chdir(cfg.parent)
    result = check_model(Path(os.path.relpath(spec, cfg.parent)), Path(cfg.name))
    if model["config"] in UNSUPPORTED:
        where, construct = UNSUPPORTED[model["config"]]
        assert result.result == "error" and result.exit_code != EXIT_SUCCESS
        assert where in result.message and construct in result.message, result.message
        return
    if LIVE_TLC:
        options = tlc.TlcOptions(JVM_OPTIONS.get(model["config"], ()), LIBRARIES,
                                 (SHARED_TLC / "CommunityModules.jar",))
        live = tlc.run_tlc(spec, cfg, jar=REAL_JAR, options=options, timeout=900)
        assert result_differences(live, result) == [], f"TLC: {live.message} / embedded: {result.message}"
        assert (live.result, live.distinct_states) == (model["result"], model["distinct_states"]), live.message
    assert (result.result, result.distinct_states) == (model["result"], model["distinct_states"]), result.message
    assert result.exit_code == EXIT_SUCCESS


def test_a_module_extends_one_written_later_in_its_file() -> None:
    spec = Path(__file__).parent / "specs" / "LaterModules.tla"
    result = check_model(spec, spec.with_suffix(".cfg"), max_memory_mb=None)
    assert (result.result, result.distinct_states) == ("deadlock failure", 4), result.message
