"""The ``kvoffload bench tla`` module: shape of its JSON, and skipping a missing model."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from kvoffload_lab.benchmarks import tla as bench
from tlc_fakes import REAL_JAR, requires_tlc


def test_bench_reports_rates_and_skips_missing_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TLACHECK_CACHE", "off")
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--tla-dir", str(tmp_path), "--corpus-models", "0", "--tlc", "off"])
    out = bench.run(args)
    assert out["tree_cache"] == "off"
    kv, kv_workers, conformance = out["results"]
    assert kv["model"] == kv_workers["model"] == "tla/KVOffload.cfg" and "skipped" in kv and "skipped" in kv_workers
    assert conformance["result"] == "success" and conformance["distinct_states"] == 1568
    assert conformance["seconds"] > 0 and conformance["distinct_states_per_s"] > 0
    assert conformance["workers"] == 1 and conformance["worker_cpu_seconds"] == 0


def _counting_model(folder: Path, states: int, *options: str) -> list[dict[str, Any]]:
    """Bench a KVOffload.tla in ``folder`` with ``states`` states (x counts up in steps of a quarter)
    and no other model; returns the two KVOffload rows (one process, two)."""
    (folder / "KVOffload.tla").write_text(
        f"---- MODULE KVOffload ----\nEXTENDS Naturals\nVARIABLE x\nInit == x \\in 0..{states // 4 - 1}\n"
        f"Next == x' = (x + {states // 4}) % {states}\n====\n")
    (folder / "KVOffload.cfg").write_text("INIT Init\nNEXT Next\n")
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--tla-dir", str(folder), "--specs-dir", str(folder / "none"), "--corpus-models", "0",
                              "--workers", "2", *options])
    return list(bench.run(args)["results"][:2])


def test_bench_checks_with_worker_processes(tmp_path: Path) -> None:
    one, two = _counting_model(tmp_path, 4000, "--tlc", "off")
    assert (one["workers"], two["workers"]) == (1, 2)
    assert one["distinct_states"] == two["distinct_states"] == 4000 and one["result"] == two["result"] == "success"


def test_bench_reports_corpus_models_next_to_tlc(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--tla-dir", str(tmp_path), "--corpus-models", "1", "--max-states", "2000"])
    row = bench.run(args)["results"][-1]
    assert row["model"] == "specifications/lamport_mutex/MCLamportMutex.cfg"
    assert row["tlc_distinct_states"] == 724274 and row["tlc_seconds"] == 10
    # Cut short by --max-states: reported, and not claimed to match TLC.
    assert row["distinct_states"] == 2000 and row["matches_tlc"] is False


@requires_tlc
def test_bench_runs_tlc_beside_the_embedded_checker(tmp_path: Path) -> None:
    one, two = _counting_model(tmp_path, 400, "--jar", REAL_JAR)
    for row, workers in ((one, 1), (two, 2)):
        assert row["tlc"]["workers"] == workers
        assert row["tlc"]["distinct_states"] == row["distinct_states"] == 400
        assert row["tlc"]["embedded_over_tlc"] == round(row["seconds"] / row["tlc"]["seconds"], 2)


def _corpus_of_one(folder: Path) -> Path:
    """A corpus folder holding one model of 400 states with its recorded TLC answer."""
    model = folder / "specifications" / "Count"
    model.mkdir(parents=True)
    (model / "Count.tla").write_text("---- MODULE Count ----\nEXTENDS Naturals\nVARIABLE x\nInit == x \\in 0..99\n"
                                     "Next == x' = (x + 100) % 400\n====\n")
    (model / "Count.cfg").write_text("INIT Init\nNEXT Next\n")
    (folder / "corpus.json").write_text(json.dumps([{
        "spec": "specifications/Count/Count.tla", "config": "specifications/Count/Count.cfg",
        "result": "success", "distinct_states": 400, "runtime": "00:00:01", "size": None}]))
    return folder


def _bench_corpus(folder: Path, *options: str) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--tla-dir", str(folder / "none"), "--specs-dir", str(folder / "none"),
                              "--corpus-dir", str(_corpus_of_one(folder / "corpus")), "--corpus-models", "all",
                              "--jar", REAL_JAR, *options])
    return [row for row in bench.run(args)["results"] if row["model"].startswith("specifications/")]


@requires_tlc
def test_bench_runs_corpus_models_with_both_engines_and_worker_counts(tmp_path: Path) -> None:
    one, two = _bench_corpus(tmp_path, "--workers", "2")
    for row, workers in ((one, 1), (two, 2)):
        assert row["workers"] == row["tlc"]["workers"] == workers
        assert row["distinct_states"] == row["tlc"]["distinct_states"] == 400 and row["matches_tlc"] is True
        assert row["tlc"]["embedded_over_tlc"] == round(row["seconds"] / row["tlc"]["seconds"], 2)


@requires_tlc
def test_bench_leaves_out_corpus_models_tlc_does_not_check_in_time(tmp_path: Path) -> None:
    # The JVM alone takes longer than a tenth of a second to start.
    rows = _bench_corpus(tmp_path, "--workers", "2", "--tlc-seconds", "0.1")
    assert len(rows) == 1 and rows[0]["skipped"] == "TLC -workers 1 took over 0.1 s"
    assert "distinct_states" not in rows[0] and "matches_tlc" not in rows[0]


def test_bench_refuses_a_corpus_model_count_that_is_no_number(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--corpus-models", "most"])
    assert exit_info.value.code == 2
    assert "expected a number of models or 'all', got 'most'" in capsys.readouterr().err


def test_bench_runs_only_the_corpus_models_named(tmp_path: Path) -> None:
    corpus = _corpus_of_one(tmp_path / "corpus")
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    common = ["--tla-dir", str(tmp_path / "none"), "--specs-dir", str(tmp_path / "none"), "--corpus-dir", str(corpus),
              "--corpus-models", "all", "--tlc", "off", "--corpus-model"]
    named = bench.run(parser.parse_args([*common, "specifications/Count/Count.cfg"]))["results"]
    other = bench.run(parser.parse_args([*common, "specifications/Other/Other.cfg"]))["results"]
    assert [row["distinct_states"] for row in named if row["model"].startswith("specifications/")] == [400]
    assert not [row for row in other if row["model"].startswith("specifications/")]
