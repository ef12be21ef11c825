"""Every CUDA copy path on a GPU: stream ordering against a deliberately slow producer, failures
reported and never counted as done, and the choice by table and by calibration. Byte-exact round
trips of every dtype for every path are tests/test_mover.py's ``cuda-<path>`` cases."""

from __future__ import annotations

import pytest
import torch

from kvoffload.dataplane import copy_backends, copy_vector_triton, cuda_paths
from kvoffload.dataplane.copy_calibration import Measurement
from kvoffload.dataplane.mover import BlockMover, TransferResult

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

# ~50 ms of GPU time at ~1.5 GHz: long enough that a copy not ordered after it would run first.
SLOW_CYCLES = 75_000_000
BLOCKS = 64
ROW = 4096  # float16 elements: 8 KiB blocks


def finish(m: BlockMover, job_id: int) -> TransferResult:
    m.wait([job_id])
    (result,) = [r for r in m.poll() if r.job_id == job_id]
    return result


@pytest.mark.parametrize("path", cuda_paths.PATHS)
def test_store_waits_for_the_compute_that_wrote_the_block(path: str) -> None:
    layer = torch.zeros(BLOCKS, ROW, dtype=torch.float16, device="cuda")
    m = BlockMover([layer], BLOCKS, cuda_copy=path)  # type: ignore[arg-type]
    torch.cuda.synchronize()
    torch.cuda._sleep(SLOW_CYCLES)  # the producer is slow ...
    # ... and writes the blocks only at its end (basic indexing: no index upload that could sync).
    layer[3].fill_(7.0)
    layer[9:11].fill_(7.0)
    m.store(1, [3, 10, 9], [0, 17, 5])
    assert finish(m, 1).ok
    assert bool((m.cpu_layers[0][[0, 17, 5]] == 7.0).all())
    m.close()


@pytest.mark.parametrize("path", cuda_paths.PATHS)
def test_load_does_not_overwrite_a_block_queued_compute_still_reads(path: str) -> None:
    layer = torch.full((BLOCKS, ROW), 1.0, dtype=torch.float16, device="cuda")
    m = BlockMover([layer], BLOCKS, cuda_copy=path)  # type: ignore[arg-type]
    m.cpu_layers[0].fill_(5.0)
    torch.cuda.synchronize()
    torch.cuda._sleep(SLOW_CYCLES)
    seen = layer[2:4].clone()  # queued behind the slow kernel on the compute stream
    m.load(1, [8, 9], [3, 2])
    assert finish(m, 1).ok
    torch.cuda.synchronize()
    assert bool((seen == 1.0).all()), "the load overwrote blocks before queued compute read them"
    assert bool((layer[2:4] == 5.0).all())
    m.close()


@pytest.mark.parametrize("path", cuda_paths.PATHS)
def test_a_load_is_complete_before_the_forward_pass_that_reads_it(path: str) -> None:
    layer = torch.zeros(BLOCKS, ROW, dtype=torch.float16, device="cuda")
    m = BlockMover([layer], BLOCKS, cuda_copy=path)  # type: ignore[arg-type]
    m.cpu_layers[0].copy_(torch.arange(BLOCKS, dtype=torch.float16)[:, None].expand(BLOCKS, ROW))
    gpu_ids = list(range(0, BLOCKS, 2))
    cpu_ids = list(range(BLOCKS - 1, -1, -2))
    m.load(1, cpu_ids, gpu_ids)
    assert finish(m, 1).ok
    # The "forward pass" runs on another stream once the mover reported the job done.
    forward = torch.cuda.Stream()
    with torch.cuda.stream(forward):
        read = layer[gpu_ids, 0].float().cpu()
    assert read.tolist() == [float(c) for c in cpu_ids]
    m.close()


def _break_path(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"simulated {path} failure")

    if path in cuda_paths.DMA_PATHS:
        for backend in (copy_backends.DriverCtypes, copy_backends.DriverBindings):
            monkeypatch.setattr(backend, "copy_async", boom)
            monkeypatch.setattr(backend, "copy_batch", boom)
    else:
        monkeypatch.setattr(torch.Tensor, "index_copy_", boom)
        monkeypatch.setattr(copy_vector_triton, "copy_rows", boom)


@pytest.mark.parametrize("path", cuda_paths.PATHS)
def test_a_failed_copy_is_reported_and_never_counted_as_done(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    layer = torch.ones(BLOCKS, ROW, dtype=torch.float16, device="cuda")
    m = BlockMover([layer], BLOCKS, cuda_copy=path)  # type: ignore[arg-type]
    _break_path(path, monkeypatch)
    m.store(1, [1, 2, 3], [4, 5, 6])
    monkeypatch.undo()
    result = finish(m, 1)
    assert not result.ok and result.error is not None and f"simulated {path} failure" in result.error
    assert m.in_flight() == set()
    m.store(2, [1, 2, 3], [4, 5, 6])  # the mover stays usable
    assert finish(m, 2).ok
    m.close()


def test_every_path_can_run_on_this_gpu() -> None:
    """The GPU run must exercise every path: say which cannot run here and why."""
    layer = torch.zeros(BLOCKS, ROW, dtype=torch.float16, device="cuda")
    m = BlockMover([layer], BLOCKS, cuda_copy="merged")
    assert m.cuda_copy_unavailable == {}, m.cuda_copy_unavailable


def test_auto_follows_a_table_per_direction() -> None:
    layer = torch.zeros(BLOCKS, ROW, dtype=torch.float16, device="cuda")
    table = [
        Measurement("merged", "store", 8192, 40.0, 0.0),
        Measurement("gather", "store", 8192, 45.0, 0.30),
        Measurement("gather", "load", 8192, 45.0, 0.01),
        Measurement("batched", "load", 8192, 44.0, 0.0),
    ]
    m = BlockMover([layer], BLOCKS, copy_table=table)
    assert m.cuda_copy == {"store": "merged", "load": "gather"}
    assert "highest bandwidth" in m.cuda_copy_reasons["store"]


def test_auto_calibrates_both_directions_at_start_up() -> None:
    layer = torch.zeros(BLOCKS, ROW, dtype=torch.float16, device="cuda")
    m = BlockMover([layer], BLOCKS)
    assert m.cuda_copy is not None and set(m.cuda_copy) == {"store", "load"}
    assert set(m.cuda_copy.values()) <= set(cuda_paths.PATHS)
    assert all(" at 8192 B" in m.cuda_copy_reasons[d] for d in ("store", "load")), m.cuda_copy_reasons
