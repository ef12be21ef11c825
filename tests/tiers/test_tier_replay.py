"""Trace replay with secondary tiers: blocks the CPU tier evicted come back from the file tier."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvoffload_lab.cli import main
from kvoffload_lab.tracestudy.mooncake import TraceRequest
from kvoffload_lab.tracestudy.tiered_replay import replay_tiered


def _request(ids: list[int], full: int) -> TraceRequest:
    return TraceRequest(0, 0, full * 512 + 100, 20, tuple(ids))


def test_the_file_tier_serves_what_the_gpu_and_cpu_tiers_evicted() -> None:
    a = _request([1, 2, 3, 9], 3)
    x = _request([7, 8, 9, 10, 11], 4)  # evicts a from the GPU (5 blocks) and the CPU tier (4 blocks)
    data = replay_tiered([a, x, a], gpu_blocks=5, cpu_blocks=4, policy="lru", tier_blocks={"file": 16},
                         check_every=1)
    assert (data["violations"], data["leaks"]) == (0, 0), data["violation_messages"] + data["leak_messages"]
    assert data["blocks"] == 10 and data["gpu_hit_ratio"] == 0
    assert data["tiers"]["file"]["promoted_blocks"] == 3
    assert data["tiers"]["file"]["hit_ratio"] == 3 / 10
    assert data["cpu_hit_ratio"] == 3 / 10 and data["cpu_resident_hit_ratio"] == 0


def test_without_room_in_the_tier_nothing_comes_back() -> None:
    a = _request([1, 2, 3, 9], 3)
    x = _request([7, 8, 9, 10, 11], 4)
    data = replay_tiered([a, x, a], gpu_blocks=5, cpu_blocks=4, policy="lru", tier_blocks={"file": 2})
    assert data["tiers"]["file"]["promoted_blocks"] < 3
    assert (data["violations"], data["leaks"]) == (0, 0)


def test_the_command_reports_every_tier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.jsonl"
    lines = [{"timestamp": i, "input_length": 2000, "output_length": 5, "hash_ids": [0, i % 4, i % 6, i]}
             for i in range(30)]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    status = main(["replay", str(path), "--gpu-blocks", "8", "--cpu-blocks", "4", "--policy", "lru",
                   "--tier-blocks", "file=8,redis=32"])
    data = json.loads(capsys.readouterr().out)
    assert status == 0
    assert list(data["tiers"]) == ["file", "redis"]
    assert sum(t["promoted_blocks"] for t in data["tiers"].values()) > 0


@pytest.mark.parametrize("value", ["file", "cpu=4", "file=0", "file=2,file=3"])
def test_bad_tier_blocks_are_one_usage_line(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", str(tmp_path / "t.jsonl"), "--tier-blocks", value])
    assert exit_info.value.code == 2
    assert "--tier-blocks" in capsys.readouterr().err
