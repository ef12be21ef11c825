"""End to end in a real vLLM engine (``make check-vllm-engine``): the same greedy workload without
offloading, with KVOffloadSpec inside vLLM's OffloadingConnector, and with kvoffload's own
connector. Every phase must give identical token ids, serve the re-run prompt from the offload
tier (vLLM's own counters), record no lifecycle violation and leave nothing behind.

The workload: prompt A; four prompts sharing a 256-token prefix; twelve unrelated prompts that
evict A from the engine's 48-block prefix cache; A again.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from kvoffload_lab.vllm.common.engine import (
    EngineReport,
    InProcessEngine,
    build_tiny_model,
    connector_transfer_config,
    run_batches,
    spec_transfer_config,
)

BLOCK_SIZE = 32
GPU_BLOCKS = 48
CPU_CHUNKS = 64
MAX_TOKENS = 16
PROMPT_A_TOKENS = 320
# The dtype of the model and KV cache; the GPU check runs bfloat16 too.
DTYPE = os.environ.get("KVOFFLOAD_E2E_DTYPE", "float32")


def _workload(seed: int = 1) -> list[list[list[int]]]:
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(1000) for _ in range(n)]

    prompt_a = tokens(PROMPT_A_TOKENS)
    shared = tokens(256)
    return [[prompt_a], [shared + tokens(64) for _ in range(4)], [tokens(320) for _ in range(12)], [prompt_a]]


WORKLOAD = _workload()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


def _run(model_dir: Path, config: dict | None) -> EngineReport:
    engine = InProcessEngine(model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS, dtype=DTYPE)
    try:
        return run_batches(engine, WORKLOAD, MAX_TOKENS)
    finally:
        engine.shutdown()


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> EngineReport:
    report = _run(model_dir, None)
    assert report.external_hit_tokens == 0
    # The engine's own cache served the shared prefix to three of the four prompts, and not A.
    assert report.cached_tokens[1] == [0, 256, 256, 256]
    assert report.cached_tokens[3] == [0], "A must be evicted from the GPU prefix cache by the workload"
    return report


# vLLM's OffloadingConnector loads every full block of A (vLLM then recomputes its last token);
# kvoffload's scheduler loads only the whole chunks before the last token, which it leaves to
# the engine so there are logits to sample from.
SPEC_SERVED = PROMPT_A_TOKENS
CONNECTOR_SERVED = (PROMPT_A_TOKENS - 1) // BLOCK_SIZE * BLOCK_SIZE


def check_phase(baseline: EngineReport, report: EngineReport, served: int = SPEC_SERVED) -> None:
    """Everything an offloading phase must show next to the baseline run; ``served``: tokens of
    the re-run prompt that must come from the offload tier."""
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    assert report.cached_tokens[3] == [served], "the re-run prompt was not served from cache"
    assert report.external_hit_tokens >= served, "vLLM counted no offload-tier hit for the re-run"
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"


# The workload writes 170 blocks: plain LRU keeps A only with room for all of them, the doorkeeper
# keeps it in 64 chunks by not admitting the unrelated prompts' blocks once full.
@pytest.mark.parametrize(
    ("policy", "chunk_tokens", "cpu_chunks"),
    [("doorkeeper", None, CPU_CHUNKS), ("lru", 2 * BLOCK_SIZE, 96)],
    ids=["doorkeeper-1-block-chunks", "lru-2-block-chunks"],
)
def test_kvoffload_spec_in_vllm_offloading_connector(
    model_dir: Path, baseline: EngineReport, policy: str, chunk_tokens: int | None, cpu_chunks: int
) -> None:
    report = _run(model_dir, spec_transfer_config(cpu_chunks, policy, chunk_tokens))
    check_phase(baseline, report)
    assert report.kvoffload["manager"]["loaded_keys"] >= 1


@pytest.mark.skipif(os.environ.get("KVOFFLOAD_E2E_SPEC_ONLY") == "1", reason="KVOFFLOAD_E2E_SPEC_ONLY=1 (GPU check)")
def test_kvoffload_connector(model_dir: Path, baseline: EngineReport) -> None:
    report = _run(model_dir, connector_transfer_config(CPU_CHUNKS))
    check_phase(baseline, report, CONNECTOR_SERVED)
    assert report.kvoffload["scheduler"]["loaded_chunks"] >= CONNECTOR_SERVED // BLOCK_SIZE


def test_negative_control_wrong_block_mover_fails_the_check(model_dir: Path, baseline: EngineReport) -> None:
    """The same check with a mover that loads wrong blocks must fail on the outputs."""
    config = spec_transfer_config(CPU_CHUNKS, spec_module="vllm_wrong_mover", spec_name="WrongBlockSpec")
    report = _run(model_dir, config)
    # The load did happen (so the failure below is about the bytes, not a missed hit) ...
    assert report.cached_tokens[3] == [PROMPT_A_TOKENS]
    # ... and the comparison catches it.
    with pytest.raises(AssertionError, match="greedy token ids differ"):
        check_phase(baseline, report)
    assert report.outputs[-1] != baseline.outputs[-1]


@pytest.mark.parametrize(
    "config",
    [
        spec_transfer_config(CPU_CHUNKS, spec_module="vllm_wrong_mover", spec_name="WrongBlockSpec", verify_loads=True),
        connector_transfer_config(
            CPU_CHUNKS, connector_module="vllm_wrong_mover", connector_name="WrongBlockConnector", verify_loads=True
        ),
    ],
    ids=["spec", "connector"],
)
def test_verify_loads_stops_the_engine_on_a_wrong_load(model_dir: Path, config: dict) -> None:
    """With ``verify_loads`` the same wrong mover raises DataIntegrity inside the engine instead of
    changing the outputs."""
    engine = InProcessEngine(model_dir, config, block_size=BLOCK_SIZE, num_gpu_blocks=GPU_BLOCKS, dtype=DTYPE)
    try:
        with pytest.raises(Exception, match="DataIntegrity: load job") as caught:
            run_batches(engine, WORKLOAD, MAX_TOKENS)
    finally:
        engine.shutdown()
    assert "loaded bytes differ from the stored ones" in "".join(str(e) for e in _chain(caught.value))


def test_verify_loads_passes_a_right_run(model_dir: Path, baseline: EngineReport) -> None:
    report = _run(model_dir, connector_transfer_config(CPU_CHUNKS, verify_loads=True))
    check_phase(baseline, report, CONNECTOR_SERVED)


def _chain(error: BaseException | None) -> list[BaseException]:
    found = []
    while error is not None:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found
