"""The half-clairvoyant bounds: their rules on the policy API, and hand-computed replays."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvoffload_lab.cli import main
from kvoffload_lab.tracestudy.mooncake import TraceRequest, block_chains
from kvoffload_lab.tracestudy.oracle_breakdown import (
    DEFAULT_HORIZONS,
    ReuseKnowingLRU,
    SecondSightingBelady,
    oracle_breakdown,
)


def _request(ids: list[int], at: float) -> TraceRequest:
    # Three full 512-token blocks plus a partial one (never cached): four GPU blocks.
    return TraceRequest(0, at, 3 * 512 + 100, 20, (*ids, 1000 + len(ids)))


# GPU 4 blocks, CPU 3: every request takes the whole GPU, so hits come from CPU only. f fills the
# CPU tier (free room: stored by everyone) and is never used again; a is used again after x.
F, A, X = [7, 8, 9], [1, 2, 3], [11, 12, 13]
SCENARIO = [F, A, X, A]


def _rows(horizons: tuple[int, ...]) -> dict[tuple[str, int | None], float]:
    rows = oracle_breakdown(block_chains([_request(ids, at) for at, ids in enumerate(SCENARIO)]), 4, 3, horizons)
    assert all(row["violations"] == row["leaks"] == 0 for row in rows)
    return {(row["policy"], row["horizon"]): row["hit_ratio"] for row in rows}


def test_second_sighting_misses_a_first_reuse_that_reuse_knowledge_serves() -> None:
    rows = _rows(horizons=(1, 2))
    # a is offered once before its reuse: the doorkeeper's admission refuses it (tier full of f).
    assert rows[("second_sighting_belady", None)] == 0
    # Knowing that a comes back (and f does not) stores a: its three blocks are hits (3 of 12).
    assert rows[("reuse_knowing_lru", None)] == 3 / 12
    # a comes back two requests later: a horizon of 1 refuses it, one of 2 stores it.
    assert rows[("reuse_knowing_lru", 1)] == 0
    assert rows[("reuse_knowing_lru", 2)] == 3 / 12
    # The best horizon row repeats the first horizon that reached the best ratio ("ever" here).
    assert rows[("reuse_knowing_lru_best_horizon", None)] == 3 / 12


def test_second_sighting_admits_the_second_offer_and_evicts_the_furthest_next_use() -> None:
    policy = SecondSightingBelady([[1], [2], [3], [2], [1]], capacity=1)
    policy.advance(0, [1])
    assert policy.admit(1)  # free room
    policy.on_insert(1, None)
    policy.advance(1, [2])
    assert not policy.admit(2)  # first sighting, tier full
    assert policy.admit(2)  # second sighting
    assert policy.victims(1, lambda key: True, [2]) == [1]
    policy.on_remove(1)
    policy.on_insert(2, None)
    policy.advance(2, [3])
    assert policy.admit(1)  # evicted keys are remembered: offered again, admitted at once
    assert policy.victims(1, lambda key: key != 2, [1]) is None  # only 2 is resident, and it is busy


def test_reuse_knowing_lru_admits_by_next_use_and_evicts_least_recent() -> None:
    policy = ReuseKnowingLRU([[1, 2, 3], [4], [1], [2], [3]], horizon=3)
    policy.advance(0, [1, 2, 3])
    assert policy.admit(1) and policy.admit(2)  # used again at 2 and 3
    assert not policy.admit(3)  # used again at 4: 4 requests later, past the horizon
    assert policy.admit(4) and not policy.admit(5)  # 4 is used next request; 5 never
    for key in (1, 2):
        policy.on_insert(key, None)
    policy.on_hit(1)
    assert policy.victims(1, lambda key: True, []) == [2]
    assert policy.victims(3, lambda key: True, []) is None
    with pytest.raises(ValueError, match="horizon"):
        ReuseKnowingLRU([], horizon=0)


def _scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": at, "input_length": 3 * 512 + 100, "output_length": 5, "hash_ids": [*ids, 99]})
            + "\n"
            for at, ids in enumerate(SCENARIO)
        )
    )
    return path


def test_command_reports_the_breakdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _scenario_file(tmp_path)
    args = ["replay", str(path), "--gpu-blocks", "4", "--cpu-blocks", "3", "--oracle-breakdown"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(row["policy"], row["horizon"]): row for row in data["oracle_breakdown"]}
    assert set(rows) == {
        ("second_sighting_belady", None), ("reuse_knowing_lru", None), ("reuse_knowing_lru_best_horizon", None),
        *(("reuse_knowing_lru", horizon) for horizon in DEFAULT_HORIZONS),
    }
    assert data["cpu_oracle_hit_ratio"] == rows[("reuse_knowing_lru", None)]["hit_ratio"] == 3 / 12
    assert all(row["ratio_to_cpu_oracle"] == row["hit_ratio"] / (3 / 12) for row in rows.values())
    assert main(args) == 0
    assert "second_sighting_belady" in capsys.readouterr().out
    assert main([*args, "--tier-blocks", "file=8"]) == 2
    assert "--oracle-breakdown does not combine with --tier-blocks" in capsys.readouterr().err


def test_sweep_reports_the_breakdown_per_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _scenario_file(tmp_path)
    plot = tmp_path / "sweep.png"
    args = ["replay", str(path), "--sweep", "--json", "--cpu-sizes", "3,12", "--gpu-blocks", "4", "--plot", str(plot)]
    assert main([*args, "--policies", "doorkeeper", "--oracle-breakdown"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["oracle_breakdown"]) == {"3", "12"}
    small = {row["policy"]: row["hit_ratio"] for row in data["oracle_breakdown"]["3"] if row["horizon"] is None}
    assert small == {"second_sighting_belady": 0, "reuse_knowing_lru": 3 / 12, "reuse_knowing_lru_best_horizon": 3 / 12}
    # With room for every block, admitting on second sighting no longer costs the first reuse.
    assert all(row["hit_ratio"] == 3 / 12 for row in data["oracle_breakdown"]["12"] if row["horizon"] is None)
    assert main([*args, "--policies", "doorkeeper"]) == 0
    assert "oracle_breakdown" not in json.loads(capsys.readouterr().out)
