"""scripts/measure/gpu_check.sh on a machine without a GPU: one clear line and exit 3, and a summary.json
that lists every step whatever fails (the GPU run itself is the script's job, not make test's)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "measure" / "gpu_check.sh"


def run_check(out: Path, python: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": python}
    return subprocess.run(
        ["bash", str(SCRIPT), str(out), *extra], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow  # imports torch in a fresh interpreter: ~10 s on a loaded 2-core box
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer of a machine without a CUDA device")
def test_no_gpu_is_one_line_exit_3_and_a_summary(tmp_path: Path) -> None:
    result = run_check(tmp_path / "out", sys.executable)
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no CUDA device: torch ")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["ok"] is False and summary["exit"] == 3
    assert list(summary["steps"]) == ["env"] and summary["steps"]["env"]["status"] == "failed"
    assert summary["env"]["cuda_available"] is False


def test_more_than_one_argument_is_a_usage_error(tmp_path: Path) -> None:
    result = run_check(tmp_path / "a", sys.executable, str(tmp_path / "b"))
    assert result.returncode == 2 and result.stderr.strip() == "usage: bash scripts/measure/gpu_check.sh [OUTDIR]"


def test_failing_steps_do_not_stop_the_run_and_all_land_in_the_summary(tmp_path: Path) -> None:
    """A stand-in python that passes the environment probe and fails every ``-m`` step."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        'if [[ "$1" == -m ]]; then echo "stand-in: $2 fails" >&2; exit 1; fi\n'
        'if [[ "$1" == -c && "$2" == *cuda_available* ]]; then echo \'{"torch": "stand-in"}\'; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    result = run_check(tmp_path / "out", str(fake))
    assert result.returncode == 1, result.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    steps = summary["steps"]
    assert summary["ok"] is False and summary["env"] == {"torch": "stand-in"}
    assert [steps[s]["status"] for s in ("env", "tests", "tests_none_skipped", "simulate", "bench")] == [
        "passed",
        "failed",
        "failed",
        "failed",
        "failed",
    ]
    assert steps["vllm"]["status"] == "skipped"
    assert "stand-in: kvoffload_lab.cli fails" in (tmp_path / "out" / "bench.log").read_text()
