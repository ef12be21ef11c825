"""scripts/measure/vllm_own_offloading_spec.py in a real vLLM engine: vLLM's own CPU manager (LRU, ARC) behind
vLLM's OffloadingConnector with kvoffload's mover as its worker gives the tokens of the run without
offloading and serves the re-run prompt from the CPU tier (vLLM's own counters)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from kvoffload_lab.vllm.common.engine import InProcessEngine, build_tiny_model

MEASURE = Path(__file__).resolve().parents[2] / "scripts" / "measure"
BLOCK_SIZE = 32
GPU_BLOCKS = 48
# Room for every block the workload writes, so plain LRU still holds the first prompt at the end.
CPU_CHUNKS = 192
MAX_TOKENS = 8


def _workload() -> list[list[int]]:
    import random

    rng = random.Random(7)
    prompts = [[rng.randrange(1000) for _ in range(320)] for _ in range(13)]
    # The first prompt again, after twelve unrelated ones evicted it from the 48-block GPU cache.
    return [*prompts, prompts[0]]


WORKLOAD = _workload()


def _run(model_dir: Path, config: dict[str, Any] | None) -> tuple[list[list[int]], list[int], int]:
    engine = InProcessEngine(model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS)
    try:
        outputs: list[list[int]] = []
        cached: list[int] = []
        for prompt in WORKLOAD:
            out, hit = engine.generate([prompt], MAX_TOKENS)
            engine.drain()
            outputs.extend(out)
            cached.extend(hit)
        return outputs, cached, engine.counters()[1]
    finally:
        engine.shutdown()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> tuple[list[list[int]], list[int], int]:
    result = _run(model_dir, None)
    assert result[1][-1] == 0, "the workload must evict the first prompt from the GPU prefix cache"
    return result


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lru", "arc"])
def test_vllm_own_manager_with_kvoffload_mover_matches_the_run_without_offloading(
    model_dir: Path, baseline: tuple[list[list[int]], list[int], int], policy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(MEASURE))
    from vllm_own_offloading_spec import vllm_own_transfer_config

    outputs, cached, external = _run(model_dir, vllm_own_transfer_config(CPU_CHUNKS, policy))
    assert outputs == baseline[0], "greedy token ids differ from the run without offloading"
    assert cached[-1] == len(WORKLOAD[-1]) // BLOCK_SIZE * BLOCK_SIZE, "the re-run prompt was not served from cache"
    assert external >= cached[-1], "vLLM counted no offload-tier hit for the re-run"
