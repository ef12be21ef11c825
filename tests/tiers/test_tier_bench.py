"""``kvoffload bench tiers`` prints its figures as JSON (small sizes; never a timed assertion)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvoffload_lab.cli import main


def test_bench_tiers_reports_every_size_verified(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "tiers", "--json", "--mib", "1", "--repeats", "1", "--skip-redis", "--dir", str(tmp_path)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert [row["chunk_kib"] for row in result["file"]] == [64, 256, 1024]
    assert all(row["verified"] and row["tier_write_mbps"] > 0 and row["tier_read_mbps"] > 0 for row in result["file"])
    assert result["promotion"]["promotion_steps_max"] == 1
    assert list(tmp_path.iterdir()) == []  # the bench files are removed


def test_bench_tiers_refuses_a_missing_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "tiers", "--dir", "/nonexistent/kvoffload"]) == 2
    assert "not a directory" in capsys.readouterr().err
