"""kvoffload_lab.vllm.simple without vLLM: the late-copy backend and its fence check, the digest model's
integrity check, the CPU stand-in for the worker module's CUDA calls, the report of losses, the
trace, and the command line's refusals."""

from __future__ import annotations

import pytest
import torch

from kvoffload_lab.cli import main
from kvoffload_lab.vllm.common.findings import CheckerVerdict
from kvoffload_lab.vllm.common.runner import format_table
from kvoffload_lab.vllm.simple.backend import LateCopyBackend, LateEvent
from kvoffload_lab.vllm.simple.harness import collapse_idle_steps
from kvoffload_lab.vllm.simple.model import DigestModel, digests, next_token
from kvoffload_lab.vllm.simple.worker import CpuTorch


def _backend(delay: int) -> tuple[LateCopyBackend, torch.Tensor, torch.Tensor]:
    gpu = torch.arange(4 * 8, dtype=torch.int8).reshape(4, 8)
    cpu = torch.zeros((3, 8), dtype=torch.int8)
    return LateCopyBackend({"kv": gpu}, {"kv": cpu}, delay), gpu, cpu


def test_a_store_copies_when_its_event_completes_not_at_launch() -> None:
    backend, gpu, cpu = _backend(delay=2)
    events: list[tuple[int, LateEvent]] = []
    backend.launch_copy([1, 2], [0, 2], True, 5, events)
    assert [idx for idx, _ in events] == [5] and not cpu.any()
    assert events[0][1].query() is False and not cpu.any()
    assert events[0][1].query() is True
    assert torch.equal(cpu[0], gpu[1]) and torch.equal(cpu[2], gpu[2]) and not cpu[1].any()
    assert backend.fence_breaks == []


def test_a_store_whose_gpu_block_changed_in_flight_breaks_the_fence() -> None:
    backend, gpu, cpu = _backend(delay=3)
    events: list[tuple[int, LateEvent]] = []
    backend.launch_copy([1, 2], [0, 1], True, 7, events)
    gpu[2] = 99  # block 2 reused and rewritten while its store still reads it
    events[0][1].synchronize()
    assert [(b.event_idx, b.gpu_block, b.cpu_block) for b in backend.fence_breaks] == [(7, 2, 1)]
    assert "GPU block 2" in str(backend.fence_breaks[0])
    assert torch.equal(cpu[1], gpu[2])  # the late copy read what the block holds now


def test_a_load_copies_cpu_rows_into_gpu_blocks() -> None:
    backend, gpu, cpu = _backend(delay=1)
    cpu[1] = 42
    events: list[tuple[int, LateEvent]] = []
    backend.launch_copy([1], [3], False, 0, events)
    assert events[0][1].query() is True
    assert bool((gpu[3] == 42).all()) and backend.fence_breaks == []


def test_an_empty_launch_adds_no_event() -> None:
    backend, _, _ = _backend(delay=1)
    events: list[tuple[int, LateEvent]] = []
    backend.launch_copy([], [], True, 0, events)
    assert events == [] and backend.launched == 0


def test_digests_depend_on_the_whole_prefix() -> None:
    a, b = digests([1, 2, 3]), digests([9, 2, 3])
    assert len(a) == 3 and (a != 0).all()
    assert (a != b).all()  # same tokens after the first: every later position still differs
    assert next_token([1, 2, 3]) == next_token([1, 2, 3]) != next_token([9, 2, 3])


def test_the_model_reads_its_prefix_and_names_a_wrong_slot() -> None:
    model = DigestModel(num_blocks=4, block_size=2)
    tokens = [5, 6, 7, 8]
    assert model.forward("r", tokens, [1, 2], 0, 3) is None
    assert model.forward("r", tokens, [1, 2], 3, 4) is None  # reads positions 0-2: all right
    other = DigestModel(num_blocks=4, block_size=2)
    other.kv[3] = model.kv[1]  # a block with this prefix's first two slots: reading them is right
    assert other.forward("s", tokens, [3, 2], 2, 3) is None
    other.kv[2] = 0
    wrong = other.forward("s", tokens, [3, 2], 3, 4)  # position 2, in block 2, was never written
    assert wrong is not None and (wrong.position, wrong.block, wrong.found) == (2, 2, 0)
    assert "never written" in str(wrong) and "CPU tier" not in str(wrong)
    other.kv[2] = 1
    other.loaded_blocks.add(2)
    loaded = other.forward("s", tokens, [3, 2], 3, 4)
    assert loaded is not None and loaded.loaded and "another prefix" in str(loaded) and "CPU tier" in str(loaded)


def test_cpu_torch_answers_cuda_calls_and_passes_the_rest_to_torch() -> None:
    shim = CpuTorch()
    event = shim.Event()
    event.record(shim.cuda.current_stream())
    assert event.query() is True
    assert torch.equal(shim.zeros(2), torch.zeros(2))


def test_idle_steps_are_collapsed_into_one_line() -> None:
    events = ["add_request('a', 4 tokens, max_tokens=1)", "step 1: a+4", "step 2: nothing scheduled",
              "step 3: nothing scheduled", "step 4: nothing scheduled", "abort('b')", "step 5: nothing scheduled"]
    assert collapse_idle_steps(events) == [
        "add_request('a', 4 tokens, max_tokens=1)", "step 1: a+4", "steps 2-4: nothing scheduled", "abort('b')",
        "step 5: nothing scheduled"]


def test_the_table_tells_losses_from_violations() -> None:
    lossy = CheckerVerdict("eager", "sim", "loss", "FinalBlockStored", "request 'r' lost block 1", ["step 1: r+4"])
    loss = {"invariant": "FinalBlockStored", "error": "block 1 lost", "trace": ["harness.add_request(request_id='r0')"]}
    both = CheckerVerdict("eager", "explore", "violation", "NoLeak", "idle, holding GPU blocks [3]",
                          ["harness.step()"], details={"loss": loss})
    clean = CheckerVerdict("lazy", "sim")
    table = format_table("0.27.0", [lossy, both, clean], "simple")
    assert "SimpleCPUOffloadConnector" in table and table.splitlines()[2].startswith("offload")
    assert "LOSS FinalBlockStored" in table and "VIOLATION NoLeak + LOSS" in table
    assert "eager x sim: loss (FinalBlockStored): request 'r' lost block 1" in table
    assert "eager x explore: NoLeak violated" in table and "eager x explore: loss (FinalBlockStored)" in table
    assert "  1. harness.step()" in table and "  1. harness.add_request(request_id='r0')" in table
    assert "lazy      ok" in table


def test_a_long_step_list_keeps_its_setting_and_its_end() -> None:
    long = CheckerVerdict("eager", "sim", "violation", "NoLeak", "x", ["seed 0"] + [f"step {n}" for n in range(100)])
    lines = format_table("0.30.0", [long], "simple").splitlines()
    assert "  1. seed 0" in lines and "  101. step 99" in lines and "  2. step 0" not in lines
    assert any("left out" in line for line in lines)


@pytest.mark.parametrize(("argv", "says"), [
    (["--connector", "fifo"], "--connector 'fifo' is unknown"),
    (["--connector", "simple", "--manager", "lru"], "--connector simple takes --offload-mode"),
    (["--offload-mode", "lazy"], "--offload-mode is for --connector simple"),
    (["--connector", "simple", "--offload-mode", "sometimes"], "--offload-mode 'sometimes'"),
])
def test_bad_connector_arguments_are_one_line_and_exit_2(argv: list[str], says: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm", "check", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_block_regions_follow_a_layer_placement_and_an_old_config_without_one() -> None:
    from types import SimpleNamespace

    from kvoffload_lab.vllm.simple.worker import block_regions

    cache = torch.arange(2 * 5 * 6, dtype=torch.float32).reshape(2, 5, 6)  # (K/V, blocks, slots)
    placed = SimpleNamespace(num_blocks=5, kv_cache_tensors=[SimpleNamespace(
        layers=["l"], offset=0, layer_stride=2 * 5 * 6 * 4, block_stride=6 * 4)])
    old = SimpleNamespace(num_blocks=5, kv_cache_tensors=[SimpleNamespace(shared_by=["l"], size=2 * 5 * 6 * 4)])
    for config in (placed, old):
        regions = block_regions({"l": cache}, config)
        assert sorted(r.shape for r in regions.values()) == [torch.Size([5, 24])] * 2
        v_half = regions[sorted(regions)[1]]
        v_half[3] = 0  # a row is one block of the V half: writing it writes that block only
        assert not cache[1, 3].any() and cache[1, 2].all() and cache[0, 3].all()
        cache = torch.arange(1, 2 * 5 * 6 + 1, dtype=torch.float32).reshape(2, 5, 6)
