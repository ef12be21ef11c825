"""Prefixes several sliding windows long in a real vLLM engine with its hybrid KV cache manager on
(``make check-vllm-engine``): KVOffloadConnector stores the full-attention part of every chunk and
the sliding-window part only where vLLM still held it, offers a hit only where the last window
before its end is stored whole, and the outputs equal the run without offloading token for token.

The workload: a prompt with a 320-token prefix (five windows of 64 tokens) and, in the same batch,
an unrelated prompt that vLLM admits the step after the first one's prefill, when it has just freed
the first prompt's window blocks: it is given some of them before the first prompt's chunks are
stored. Then a flood of unrelated prompts evicts the prefix from the engine's prefix cache, and the
first prompt's second turn must be served from the offload tier. Before window-aware stores a chunk
naming a given-out window block was not stored at all, the first chunks were among them, and the
second turn got no token from the offload tier; now it gets the whole prefix.

The model: a tiny random-weight Gemma 3 (four layers, sliding window 64 and full attention
alternating).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")

from test_vllm_hybrid import GEMMA3
from window_workload import BLOCK_SIZE, CPU_CHUNKS, run, workload

from kvoffload_lab.vllm.common.engine import (
    EngineReport,
    connector_transfer_config,
    save_random_model,
    spec_transfer_config,
)

PREFIX_TOKENS = 320
# What the old rule (a chunk naming a given-out window block is not stored) served the second turn.
OLD_RULE_TOKENS = 0
WORKLOAD = workload(PREFIX_TOKENS)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    directory = tmp_path_factory.mktemp("tiny-gemma3-window")
    return save_random_model(Gemma3ForCausalLM, Gemma3TextConfig(**GEMMA3), directory)


@pytest.fixture(scope="module")
def baseline(model_dir: Path) -> EngineReport:
    report = run(model_dir, None, WORKLOAD)
    assert report.cached_tokens[2] == [0], "the flood must evict the first prompt from the GPU prefix cache"
    return report


@pytest.fixture(scope="module")
def connector(model_dir: Path) -> EngineReport:
    return run(model_dir, connector_transfer_config(CPU_CHUNKS), WORKLOAD)


def test_the_connector_serves_a_prefix_several_windows_long(connector: EngineReport, baseline: EngineReport) -> None:
    assert connector.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    served = connector.cached_tokens[2]
    assert all(tokens >= PREFIX_TOKENS for tokens in served), f"second turns served {served} tokens"
    assert min(served) > OLD_RULE_TOKENS
    assert connector.violations == [], "kvoffload recorded lifecycle violations"
    assert connector.leaks == [], "kvoffload state left behind after the engine drained"


def test_chunks_past_the_window_are_stored_without_their_window_part(connector: EngineReport) -> None:
    scheduler = connector.kvoffload["scheduler"]
    assert scheduler["windowless_chunks"] > 0, "every chunk kept its window blocks: the workload tests nothing"
    assert scheduler["loaded_chunks"] >= PREFIX_TOKENS // BLOCK_SIZE


def test_negative_control_marking_window_blocks_loaded_without_loading_them(
    model_dir: Path, baseline: EngineReport
) -> None:
    """A worker that skips the window group's blocks of every load (vLLM still counts them as
    computed) must change the second turns' outputs."""
    config = connector_transfer_config(
        CPU_CHUNKS, connector_module="vllm_group_mutants", connector_name="WindowSkippingLoadConnector"
    )
    report = run(model_dir, config, WORKLOAD)
    assert all(tokens >= PREFIX_TOKENS for tokens in report.cached_tokens[2])
    assert report.outputs[:-1] == baseline.outputs[:-1]
    assert report.outputs[-1:] != baseline.outputs[-1:], "window blocks marked loaded without loading went unnoticed"


def test_the_spec_through_vllms_offloading_connector(model_dir: Path, baseline: EngineReport) -> None:
    """vLLM's OffloadingConnector decides what KVOffloadSpec stores and loads; token for token."""
    report = run(model_dir, spec_transfer_config(CPU_CHUNKS), WORKLOAD)
    assert report.outputs == baseline.outputs, "greedy token ids differ from the run without offloading"
    # Its keys are per group and it looks a window group up over the last window only: the whole
    # prefix too.
    assert report.cached_tokens[2][0] >= PREFIX_TOKENS, f"the second turn served {report.cached_tokens[2]} tokens"
    assert report.violations == [], "kvoffload recorded lifecycle violations"
    assert report.leaks == [], "kvoffload state left behind after the engine drained"
