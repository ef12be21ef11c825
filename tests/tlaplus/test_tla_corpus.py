"""The embedded checker against TLC's recorded answers on the public corpus (tests/tlaplus/corpus,
36 models of the tlaplus/Examples repository with TLC's verdict and distinct-state count).

``make test`` runs the models that finish in seconds here; ``make tla-corpus`` (TLA_CORPUS_ALL=1)
runs every model. Models the checker cannot support are listed in UNSUPPORTED (and in the
docs/checkers.md) with the construct: for those the test asserts the located error naming it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kvoffload.statemachine.checkresult import EXIT_SUCCESS
from kvoffload.tla import check_model

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
    "specifications/bcastByz/bcastByz.cfg",
    "specifications/dag-consensus/TLCSailfish1.cfg",
    "specifications/lamport_mutex/MCLamportMutex.cfg",
})

# config -> (file:line of the located error, text naming the unsupported construct)
UNSUPPORTED: dict[str, tuple[str, str]] = {
    "specifications/braf/BufferedRandomAccessFile.cfg": (
        "BufferedRandomAccessFile.tla:17:", "module Common not found"),
}


def _selected() -> list[dict[str, Any]]:
    every = os.environ.get("TLA_CORPUS_ALL") == "1"
    return [m for m in MODELS if every or m["config"] not in SLOW]


def test_corpus_lists_tlc_answers() -> None:
    assert len(MODELS) == 36
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
    assert (result.result, result.distinct_states) == (model["result"], model["distinct_states"]), result.message
    assert result.exit_code == EXIT_SUCCESS
