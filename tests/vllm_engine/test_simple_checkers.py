"""kvoffload's checks of SimpleCPUOffloadConnector against the installed vLLM (``make
check-vllm-engine``): a clean run holds every check and loads from the CPU tier, and each check
catches the fault it is for when one is put in (wrong bytes in the CPU tier, a GPU block rewritten
under a store, the finish-time store of the final block taken out), and the reproductions give the
outcomes the installed release has."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed here: `make check-vllm-engine` installs it in .venv-vllm")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import repro_simple as repro
from kvoffload_lab.vllm.simple.build import SimpleShape
from kvoffload_lab.vllm.simple.compat import SimpleReads
from kvoffload_lab.vllm.simple.harness import LOSS, SimpleConfig, SimpleHarness

BLOCK = 4
FIRST = [1] * BLOCK + [2] * BLOCK + [3] * (BLOCK - 1)


def _harness(**shape: int | bool) -> SimpleHarness:
    sizes = {"block_size": BLOCK, "gpu_blocks": 8, "cpu_blocks": 32, "max_batched_tokens": 16, "max_seqs": 2}
    return SimpleHarness(SimpleConfig(shape=SimpleShape(**{**sizes, **shape}), delay=2), SimpleReads())


def _run(harness: SimpleHarness, request_id: str, prompt: list[int], max_tokens: int) -> None:
    harness.add_request(request_id, prompt, max_tokens)
    for _ in range(50):
        if request_id not in harness.live_requests() or harness.failed:
            break
        harness.step()


def _flood(harness: SimpleHarness) -> None:
    """Unrelated prompts that evict everything else from the GPU prefix cache."""
    for index in range(3):
        _run(harness, f"flood{index}", [50 + index] * (5 * BLOCK), 1)


def _second_turn(harness: SimpleHarness) -> list[int]:
    first = list(harness.requests["first"].request.all_token_ids)
    return first + [9] * BLOCK


def test_a_second_turn_loads_its_first_from_the_cpu_tier_and_every_check_holds() -> None:
    harness = _harness()
    _run(harness, "first", FIRST, 2)
    _flood(harness)
    _run(harness, "second", _second_turn(harness), 2)
    harness.drain()
    assert harness.findings == [] and harness.losses == []
    assert any("load#" in event for event in harness.events)


def test_wrong_bytes_in_the_cpu_tier_are_data_integrity() -> None:
    harness = _harness()
    _run(harness, "first", FIRST, 2)
    _flood(harness)
    harness.drain()
    for region in harness.worker.cpu_kv_caches.values():
        region[1:] = 0  # every CPU block but the null block loses its bytes
    _run(harness, "second", _second_turn(harness), 2)
    assert [f.invariant for f in harness.findings] == ["DataIntegrity"]
    assert "(the block was loaded from the CPU tier)" in harness.findings[0].message


def test_a_gpu_block_rewritten_under_its_store_breaks_the_fence() -> None:
    harness = _harness()
    _run(harness, "first", FIRST, 2)  # it finishes in the step that launches its stores
    stored = sorted(harness.manager._in_flight_store_gpu_blocks)
    assert stored and harness.worker.in_flight()
    harness.model.kv[stored[0]] = 12345  # what reusing the block would do while its store still reads it
    harness.drain()
    assert harness.findings and harness.findings[0].invariant == "GpuBlockFence"
    assert f"GPU block {stored[0]}" in harness.findings[0].message


def test_a_final_block_left_out_of_the_cpu_tier_is_a_loss() -> None:
    harness = _harness()
    harness.manager._queue_finished_eager_store = lambda *args, **kwargs: None  # undo vLLM's #41704 fix
    _run(harness, "first", [1] * BLOCK + [2] * (BLOCK - 1), 2)  # block 1 fills in the final step
    harness.drain()
    assert harness.findings == []
    assert len(harness.losses) == 1 and "block 1 (its final full block)" in harness.losses[0]
    assert LOSS == "FinalBlockStored"


def test_the_reproductions_give_the_installed_release_s_outcomes() -> None:
    assert repro.final_block() == "stored"
    assert repro.idle_store().startswith("steps until the store is reported")
    assert repro.lazy_never_idle().startswith("never idle")
