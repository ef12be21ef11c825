"""cuda_paths on the CPU: every path's logic over CPU tensors, the DMA paths through a host
backend that runs each submitted range at once (no GPU needed). The CUDA runs are in
tests/test_copy_cuda.py."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.dataplane import copy_vector_triton
from kvoffload.dataplane.copy_backends import HostMemmove
from kvoffload.dataplane.copy_plan import Descriptors
from kvoffload.dataplane.cuda_paths import DMA_PATHS, PATHS, CopyPath, LayerRows, make_path

ROW_SHAPES = [(16, torch.int64), (3, torch.int32), (5, torch.uint8), (2, torch.int64)]  # 128, 12, 5, 16 bytes


def host_rows(n_gpu: int, n_cpu: int, seed: int) -> LayerRows:
    g = torch.Generator().manual_seed(seed)
    gpu = [torch.randint(-99, 99, (n_gpu, e), generator=g).to(d) for e, d in ROW_SHAPES]
    cpu = [torch.randint(-99, 99, (n_cpu, e), generator=g).to(d) for e, d in ROW_SHAPES]
    # On the host the "CUDA view" of the CPU tier is the CPU tier itself.
    return LayerRows(gpu, cpu, cpu, torch.device("cpu"))


def expected(rows: LayerRows, store: bool, gpu_ids: list[int], cpu_ids: list[int]) -> list[torch.Tensor]:
    """The destination side after the job, computed block by block."""
    out = [t.clone() for t in (rows.cpu if store else rows.gpu)]
    for k, dst in enumerate(out):
        src = (rows.gpu if store else rows.cpu)[k]
        for gi, ci in zip(gpu_ids, cpu_ids, strict=True):
            if store:
                dst[ci] = src[gi]
            else:
                dst[gi] = src[ci]
    return out


def run(path: CopyPath, store: bool, gpu_ids: list[int], cpu_ids: list[int]) -> list[object]:
    keep: list[object] = []
    path.copy(store, torch.tensor(gpu_ids, dtype=torch.int64), torch.tensor(cpu_ids, dtype=torch.int64), 0, keep)
    return keep


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(PATHS),
    store=st.booleans(),
    seed=st.integers(0, 2**16),
    n=st.integers(0, 24),
    runs=st.booleans(),
)
def test_every_path_moves_exactly_the_blocks_it_is_given(name: str, store: bool, seed: int, n: int, runs: bool) -> None:
    rng = random.Random(seed)
    rows = host_rows(32, 40, seed)
    gpu_ids = rng.sample(range(32), n)
    cpu_ids = sorted(rng.sample(range(40), n)) if runs else rng.sample(range(40), n)
    if runs:
        gpu_ids = list(range(3, 3 + n))  # consecutive on both sides: merged into few ranges
    want = expected(rows, store, gpu_ids, cpu_ids)
    src_before = [t.clone() for t in (rows.gpu if store else rows.cpu)]
    run(make_path(name, rows, HostMemmove()), store, gpu_ids, cpu_ids)
    for got, exp in zip(rows.cpu if store else rows.gpu, want, strict=True):
        assert torch.equal(got, exp)
    for got, before in zip(rows.gpu if store else rows.cpu, src_before, strict=True):
        assert torch.equal(got, before)  # the source side is only read


def test_dma_paths_submit_one_range_per_block_per_run_or_per_job() -> None:
    rows = host_rows(32, 40, 1)
    gpu_ids, cpu_ids = [4, 5, 6, 7, 20, 9], [10, 11, 12, 13, 0, 30]  # one run of 4, two lone blocks
    layers = len(ROW_SHAPES)
    counts = {}
    for name in DMA_PATHS:
        backend = HostMemmove()
        run(make_path(name, rows, backend), True, gpu_ids, cpu_ids)
        counts[name] = backend.calls
    # Every job first binds the backend to the submitting thread.
    assert counts["naive"] == [("bind", 0)] + [("async", 1)] * (6 * layers)
    assert counts["merged"] == [("bind", 0)] + [("async", 1)] * (3 * layers)
    assert counts["batched"] == [("bind", 0), ("batch", 3 * layers)]


def test_batched_path_keeps_its_descriptor_arrays_alive() -> None:
    rows = host_rows(8, 8, 2)
    keep = run(make_path("batched", rows, HostMemmove()), False, [1, 2], [5, 0])
    assert sum(isinstance(t, torch.Tensor) and t.dtype == torch.int64 for t in keep) == 3


class FailingBackend(HostMemmove):
    """Copies the first ``good`` ranges, then fails as a driver call would."""

    name = "failing"

    def __init__(self, good: int) -> None:
        super().__init__()
        self.good = good

    def copy_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        if self.good == 0:
            raise RuntimeError("cuMemcpyAsync failed: CUDA driver error 1 (CUDA_ERROR_INVALID_VALUE)")
        self.good -= 1
        super().copy_async(dst, src, nbytes, stream)

    def copy_batch(self, batch: Descriptors, stream: int, store: bool) -> None:
        raise RuntimeError("cuMemcpyBatchAsync_v2 failed: CUDA driver error 1 (CUDA_ERROR_INVALID_VALUE)")


@pytest.mark.parametrize("name", DMA_PATHS)
def test_a_failing_driver_call_raises_out_of_the_path(name: str) -> None:
    """The mover reports a job failed when its path raises (tests/test_mover.py checks that part);
    a path must therefore never swallow a driver error."""
    rows = host_rows(8, 8, 3)
    with pytest.raises(RuntimeError, match="CUDA driver error 1"):
        run(make_path(name, rows, FailingBackend(good=2)), True, [0, 1, 2, 3], [4, 5, 6, 7])


def test_paths_that_cannot_run_say_why() -> None:
    rows = host_rows(8, 8, 4)
    no_views = LayerRows(rows.gpu, rows.cpu, None, rows.device)
    with pytest.raises(ValueError, match="the gather path needs CUDA views of a pinned CPU tier"):
        make_path("gather", no_views, None)
    with pytest.raises(ValueError, match="the batched path needs a CUDA driver backend, none loaded"):
        make_path("batched", rows, None)
    with pytest.raises(ValueError, match="unknown CUDA copy path 'fast'; expected one of naive, merged"):
        make_path("fast", rows, None)


def test_vector_path_without_triton_says_which_fallback_it_runs() -> None:
    rows = host_rows(8, 8, 5)
    path = make_path("vector", rows, None)
    assert path.detail.startswith("torch complex128 index ops (device cpu is not CUDA)")
    assert copy_vector_triton.unavailable(torch.device("cpu")) == "device cpu is not CUDA"


def test_batched_copy_attributes_match_the_driver_struct_layout() -> None:
    """CUmemcpyAttributes (cuda.h, 12.8+): int order, two {int type, int id} locations, uint flags."""
    import ctypes

    from kvoffload.dataplane import copy_backends

    store = copy_backends._attributes(True, 3)
    assert ctypes.sizeof(store) == 24
    assert (store.srcAccessOrder, store.flags) == (1, 1)  # ..._ORDER_STREAM, PREFER_OVERLAP_WITH_COMPUTE
    assert (store.srcLocHint.type, store.srcLocHint.id, store.dstLocHint.type) == (1, 3, 2)  # device 3 -> host
    load = copy_backends._attributes(False, 3)
    assert (load.srcLocHint.type, load.dstLocHint.type, load.dstLocHint.id) == (2, 1, 3)


def test_without_a_cuda_driver_no_backend_loads_and_each_says_why() -> None:
    import ctypes.util

    from kvoffload.dataplane.copy_backends import driver_backends

    if ctypes.util.find_library("cuda") is not None:
        pytest.skip("a CUDA driver is installed here; this checks a machine without one")
    loaded, reasons = driver_backends(0)
    assert loaded == []
    assert [r.split(":")[0] for r in reasons] == ["cuda.bindings", "ctypes-libcuda"]
