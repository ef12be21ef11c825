"""BlockMover: byte-exact round trips, ordering, validation before any byte moves, failure reporting."""

from __future__ import annotations

import math
import os
import random
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.dataplane import copy_backends, cuda_copy_setup, cuda_paths, mover_cpu_kernel
from kvoffload.dataplane import mover as mover_mod
from kvoffload.dataplane.mover import BlockMover, TransferResult

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


class CudaPath(str):
    """The device "cuda", with every mover of the test using one CUDA copy path (``path``)."""

    path: str

    def __new__(cls, path: str) -> CudaPath:
        self = super().__new__(cls, "cuda")
        self.path = path
        return self


DEVICES = [
    "cpu",
    *(pytest.param(CudaPath(p), marks=[needs_cuda, pytest.mark.cuda], id=f"cuda-{p}") for p in cuda_paths.PATHS),
]

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.uint8]
if hasattr(torch, "float8_e4m3fn"):
    DTYPES.append(torch.float8_e4m3fn)

NUM_GPU = 24
NUM_CPU = 20

try:
    import numpy as np
except ImportError:  # torch does not require numpy; numba (extra fast-cpu) does
    np = None
needs_numpy = pytest.mark.skipif(np is None, reason="needs numpy (installed with numba, extra fast-cpu)")

HAS_NUMBA = mover_cpu_kernel._numba_installed()
needs_numba = pytest.mark.skipif(not HAS_NUMBA, reason="needs numba (extra fast-cpu)")
CPU_PATHS = [pytest.param("kernel", marks=needs_numba), "torch"]


@pytest.fixture(autouse=True)
def cuda_copy_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``cuda-<path>`` test runs every mover it makes with ``cuda_copy=<path>``."""
    callspec = getattr(request.node, "callspec", None)
    device = None if callspec is None else callspec.params.get("device")
    if isinstance(device, CudaPath):
        real = cuda_copy_setup.select
        monkeypatch.setattr(
            cuda_copy_setup, "select", lambda _copy, rows, table, budget: real(device.path, rows, table, budget)
        )


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count rows copied by the numba kernel (calls go through the module attribute)."""
    calls: list[int] = []
    real = mover_cpu_kernel.copy_rows_arrays

    def counting(*args: object) -> None:
        calls.append(len(args[2]))  # type: ignore[arg-type]
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(mover_cpu_kernel, "copy_rows_arrays", counting)
    return calls


@pytest.fixture(params=CPU_PATHS)
def cpu_kernel(request: pytest.FixtureRequest) -> bool:
    """The mover's ``cpu_kernel``: the test runs with the numba kernel, then with the torch path."""
    if request.param == "kernel":
        assert mover_cpu_kernel.ready()
    return request.param == "kernel"


def rand_layer(n: int, shape: Sequence[int], dtype: torch.dtype, device: str, seed: int = 0) -> torch.Tensor:
    """Random BYTES viewed as ``dtype`` (NaN patterns included: we compare bytes, not values)."""
    g = torch.Generator().manual_seed(seed)
    esize = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n, math.prod(shape) * esize), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(n, *shape).to(device)


def as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(t.shape[0], -1).view(torch.uint8).clone()


def snapshot(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [as_bytes(t) for t in tensors]


def assert_same(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)


def finish(m: BlockMover, *job_ids: int) -> dict[int, TransferResult]:
    m.wait(job_ids)
    results = {r.job_id: r for r in m.poll()}
    assert set(job_ids) <= set(results)
    return results


def multi_layers(device: str, seed: int = 0) -> list[torch.Tensor]:
    # Different shapes and dtypes per layer; 5 uint8 bytes forces the byte-row path.
    return [
        rand_layer(NUM_GPU, (2, 4), torch.float16, device, seed),
        rand_layer(NUM_GPU, (3,), torch.float32, device, seed + 1),
        rand_layer(NUM_GPU, (5,), torch.uint8, device, seed + 2),
        rand_layer(NUM_GPU, (2, 2, 2), torch.bfloat16, device, seed + 3),
    ]


PATTERNS: dict[str, tuple[list[int], list[int]]] = {
    "single": ([5], [11]),
    "run": (list(range(3, 15)), list(range(4, 16))),
    "scattered": ([17, 2, 9, 0, 23, 11, 6], [3, 19, 0, 12, 7, 8, 1]),
    "dst run": ([19, 0, 7, 3, 12, 5, 16, 9, 1, 14], list(range(6, 16))),
    "src run": (list(range(2, 12)), [19, 0, 7, 3, 12, 5, 16, 9, 1, 14]),
    "mixed": ([*range(0, 10), 20, 15, 13, *range(16, 20)], [*range(5, 15), 0, 2, 19, 15, 16, 17, 18]),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_round_trip_bytes(device: str, dtype: torch.dtype, pattern: str, cpu_kernel: bool) -> None:
    gpu_ids, cpu_ids = PATTERNS[pattern]
    layers = [rand_layer(NUM_GPU, (4, 8), dtype, device, 1), rand_layer(NUM_GPU, (16,), dtype, device, 2)]
    before = snapshot(layers)
    m = BlockMover(layers, NUM_CPU, cpu_kernel=cpu_kernel)
    m.store(1, gpu_ids, cpu_ids)
    r = finish(m, 1)[1]
    assert r.ok and r.direction == "store" and r.error is None
    for b, c in zip(before, m.cpu_layers, strict=True):
        assert torch.equal(as_bytes(c)[cpu_ids], b[gpu_ids])
    # Overwrite the GPU blocks, then load back into different GPU blocks.
    for layer in layers:
        layer.view(torch.uint8).fill_(0)
    targets = list(reversed(range(NUM_GPU)))[: len(cpu_ids)]
    m.load(2, cpu_ids, targets)
    assert finish(m, 2)[2].ok
    for b, layer in zip(before, layers, strict=True):
        assert torch.equal(as_bytes(layer)[targets], b[gpu_ids])
    m.close()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_multi_layer_store_overwrite_load_restores(device: str, pattern: str, cpu_kernel: bool) -> None:
    gpu_ids, cpu_ids = PATTERNS[pattern]
    layers = multi_layers(device)
    before = snapshot(layers)
    m = BlockMover(layers, NUM_CPU, cpu_kernel=cpu_kernel)
    assert m.block_bytes == 2 * 4 * 2 + 3 * 4 + 5 + 8 * 2
    m.store(1, gpu_ids, cpu_ids)
    finish(m, 1)
    for i, layer in enumerate(layers):
        layer.copy_(rand_layer(NUM_GPU, layer.shape[1:], layer.dtype, device, 99 + i))
    m.load(2, cpu_ids, gpu_ids)
    assert finish(m, 2)[2].ok
    for b, layer in zip(before, layers, strict=True):
        assert torch.equal(as_bytes(layer)[gpu_ids], b[gpu_ids])


@pytest.mark.parametrize("device", DEVICES)
def test_reused_cpu_block_gives_new_bytes(device: str) -> None:
    layers = multi_layers(device)
    before = snapshot(layers)
    m = BlockMover(layers, NUM_CPU)
    m.store(1, [0, 1], [7, 8])
    m.store(2, [4, 5], [8, 7])  # evict: CPU blocks 7 and 8 now hold GPU blocks 5 and 4
    finish(m, 1, 2)
    m.load(3, [7, 8], [20, 21])
    finish(m, 3)
    for b, layer in zip(before, layers, strict=True):
        assert torch.equal(as_bytes(layer)[[20, 21]], b[[5, 4]])


@pytest.mark.parametrize("device", DEVICES)
def test_load_into_blocks_an_in_flight_store_reads_is_ordered(device: str) -> None:
    big = 4096 if device == "cuda" else 64  # bigger blocks on CUDA make a race more likely to show
    layers = [rand_layer(NUM_GPU, (big,), torch.float16, device, 3)]
    before = snapshot(layers)
    m = BlockMover(layers, NUM_CPU)
    m.store(1, list(range(8)), list(range(8, 16)))
    finish(m, 1)
    new = as_bytes(m.cpu_layers[0])[8:16]  # blocks 0..7 as stored
    m.store(2, list(range(8, 16)), list(range(8)))  # reads GPU 8..15
    m.load(3, list(range(8, 16)), list(range(8, 16)))  # overwrites GPU 8..15 with old 0..7
    results = finish(m, 2, 3)
    assert results[2].ok and results[3].ok
    assert torch.equal(as_bytes(m.cpu_layers[0])[:8], before[0][8:16])  # the pre-load bytes
    assert torch.equal(as_bytes(layers[0])[8:16], new)


@pytest.mark.parametrize("device", DEVICES)
def test_poll_reports_each_job_once_with_bytes(device: str) -> None:
    layers = multi_layers(device)
    m = BlockMover(layers, NUM_CPU)
    m.store(10, [1, 2, 3], [0, 1, 2])
    m.store(11, [], [])
    m.load(12, [5], [6])
    assert m.in_flight() == {10, 11, 12}
    m.wait([10, 11, 12])
    results = m.poll()
    assert sorted(r.job_id for r in results) == [10, 11, 12]
    by_id = {r.job_id: r for r in results}
    assert by_id[10].bytes == 3 * m.block_bytes and by_id[10].direction == "store"
    assert by_id[11].bytes == 0 and by_id[11].ok
    assert by_id[12].bytes == m.block_bytes and by_id[12].direction == "load"
    assert all(r.ok and r.seconds >= 0 for r in results)
    assert m.poll() == []
    assert m.in_flight() == set()
    m.store(10, [1], [0])  # a polled id may be reused
    assert [r.job_id for r in finish(m, 10).values()] == [10]


@pytest.mark.parametrize("device", DEVICES)
def test_wait_on_unknown_id_errors(device: str) -> None:
    m = BlockMover(multi_layers(device), NUM_CPU)
    with pytest.raises(KeyError, match="unknown job id"):
        m.wait([42])
    m.store(1, [0], [0])
    m.wait([1])
    m.poll()
    with pytest.raises(KeyError, match=r"\[1\]"):
        m.wait([1])  # already polled


Invalid = Callable[[BlockMover], None]
INVALID_SUBMITS: dict[str, tuple[type[Exception], str, Invalid]] = {
    "negative gpu id": (ValueError, "job 5: gpu_block_ids contains -1", lambda m: m.store(5, [0, -1], [0, 1])),
    "gpu id too big": (ValueError, f"contains {NUM_GPU}", lambda m: m.store(5, [0, NUM_GPU], [0, 1])),
    "cpu id too big": (ValueError, f"cpu_block_ids contains {NUM_CPU}", lambda m: m.store(5, [0, 1], [0, NUM_CPU])),
    "load gpu id too big": (ValueError, "job 5: gpu_block_ids", lambda m: m.load(5, [0, 1], [2, 99])),
    "load negative cpu": (ValueError, "cpu_block_ids contains -3", lambda m: m.load(5, [-3, 1], [2, 3])),
    "lengths": (
        ValueError,
        "job 5: gpu_block_ids has 3 ids but cpu_block_ids has 2",
        lambda m: m.store(5, [0, 1, 2], [0, 1]),
    ),
    "duplicate dst": (ValueError, "job 5: duplicate destination id 4", lambda m: m.store(5, [0, 1, 2], [4, 3, 4])),
    "duplicate load dst": (ValueError, "duplicate destination id 9", lambda m: m.load(5, [0, 1], [9, 9])),
    "non-int id": (TypeError, "job 5: gpu_block_ids must contain ints, got 1.5", lambda m: m.store(5, [1.5], [0])),
    "non-int job id": (TypeError, "job id must be an int", lambda m: m.store("5", [0], [0])),  # type: ignore[arg-type]
    # Lists of more than _SMALL_JOB ids are converted in one call (struct.pack_into).
    "non-int id, big list": (
        TypeError,
        "job 5: gpu_block_ids must contain ints, got 2.5",
        lambda m: m.store(5, [0] * 199 + [2.5], [0] * 200),  # type: ignore[list-item]
    ),
    "beyond int64, big list": (
        ValueError,
        f"job 5: cpu_block_ids contains {2**63}, outside the int64 range",
        lambda m: m.store(5, [0] * 200, [0] * 199 + [2**63]),
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(INVALID_SUBMITS))
def test_invalid_submit_raises_before_any_byte_moves(device: str, case: str, cpu_kernel: bool) -> None:
    exc, msg, submit = INVALID_SUBMITS[case]
    layers = multi_layers(device)
    m = BlockMover(layers, NUM_CPU, cpu_kernel=cpu_kernel)
    for c in m.cpu_layers:
        c.view(torch.uint8).fill_(0xAB)
    gpu_before, cpu_before = snapshot(layers), snapshot(m.cpu_layers)
    with pytest.raises(exc, match=msg):
        submit(m)
    assert m.in_flight() == set() and m.poll() == []
    assert_same(snapshot(layers), gpu_before)
    assert_same(snapshot(m.cpu_layers), cpu_before)


@pytest.mark.parametrize("device", DEVICES)
def test_job_id_reused_while_in_flight(device: str) -> None:
    layers = multi_layers(device)
    m = BlockMover(layers, NUM_CPU)
    m.store(7, [0, 1], [0, 1])
    m.wait([7])
    cpu_before = snapshot(m.cpu_layers)
    with pytest.raises(ValueError, match="job 7 is still in flight"):
        m.store(7, [2, 3], [2, 3])
    with pytest.raises(ValueError, match="job 7 is still in flight"):
        m.load(7, [0], [5])
    assert_same(snapshot(m.cpu_layers), cpu_before)
    assert [r.job_id for r in m.poll()] == [7]


def test_constructor_validation() -> None:
    layer = rand_layer(NUM_GPU, (4,), torch.float16, "cpu")
    with pytest.raises(ValueError, match="at least one GPU layer"):
        BlockMover([], 4)
    with pytest.raises(ValueError, match="layer 1 has 23 blocks, layer 0 has 24"):
        BlockMover([layer, rand_layer(NUM_GPU - 1, (4,), torch.float16, "cpu")], 4)
    with pytest.raises(ValueError, match="not contiguous"):
        BlockMover([rand_layer(NUM_GPU, (4, 2), torch.float16, "cpu").transpose(1, 2)], 4)
    with pytest.raises(ValueError, match="num_cpu_blocks or cpu_layers"):
        BlockMover([layer])
    with pytest.raises(TypeError, match=r"expected a torch\.Tensor"):
        BlockMover([layer, [1, 2]], 4)  # type: ignore[list-item]


def test_provided_cpu_tensor_validation() -> None:
    layer = rand_layer(NUM_GPU, (4,), torch.float16, "cpu")
    with pytest.raises(ValueError, match="too small: 3 blocks, need 8"):
        BlockMover([layer], 8, cpu_layers=[torch.zeros(3, 4, dtype=torch.float16)])
    with pytest.raises(ValueError, match="has shape"):
        BlockMover([layer], 8, cpu_layers=[torch.zeros(8, 5, dtype=torch.float16)])
    with pytest.raises(TypeError, match=r"dtype torch\.float32"):
        BlockMover([layer], 8, cpu_layers=[torch.zeros(8, 4, dtype=torch.float32)])
    with pytest.raises(ValueError, match="1 CPU layer tensors for 2 GPU layers"):
        BlockMover([layer, layer.clone()], 8, cpu_layers=[torch.zeros(8, 4, dtype=torch.float16)])
    # A larger provided tensor is fine: the mover uses its first num_cpu_blocks rows, in place.
    provided = torch.zeros(10, 4, dtype=torch.float16)
    m = BlockMover([layer], 8, cpu_layers=[provided])
    assert m.num_cpu_blocks == 8
    m.store(1, [3], [7])
    finish(m, 1)
    assert torch.equal(provided[7], layer[3]) and not provided[8:].any()
    with pytest.raises(ValueError, match="cpu_block_ids contains 8"):
        m.store(2, [3], [8])


@pytest.mark.parametrize("device", DEVICES)
def test_injected_fault_is_reported_and_leaves_destination(device: str) -> None:
    layers = multi_layers(device)
    calls: list[tuple[int, str]] = []

    def injector(job_id: int, direction: str) -> bool:
        calls.append((job_id, direction))
        return job_id == 2

    m = BlockMover(layers, NUM_CPU, fault_injector=injector)
    m.store(1, [0, 1], [0, 1])
    finish(m, 1)
    cpu_before = snapshot(m.cpu_layers)
    gpu_before = snapshot(layers)
    m.store(2, [2, 3], [0, 1])
    r = finish(m, 2)[2]
    assert not r.ok and r.error == "injected fault" and r.direction == "store"
    assert r.bytes == 2 * m.block_bytes
    assert_same(snapshot(m.cpu_layers), cpu_before)
    m.load(3, [0, 1], [5, 6])
    assert finish(m, 3)[3].ok
    assert calls == [(1, "store"), (2, "store"), (3, "load")]
    assert torch.equal(snapshot(layers)[0][[5, 6]], gpu_before[0][[0, 1]])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("primitive", ["copy_", "index_select", "index_select threaded"])
def test_copy_raising_inside_torch_is_reported_failed(
    device: str, primitive: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    layers = multi_layers(device)
    m = BlockMover(layers, NUM_CPU, cpu_kernel=False)  # the torch path (the kernel: below)

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError(f"simulated {primitive.split()[0]} failure")

    if primitive == "index_select threaded":
        monkeypatch.setattr(mover_mod, "_PARALLEL_MIN_BYTES", 1)
        monkeypatch.setattr(mover_mod, "_CHUNK_BYTES", 64)
    if primitive == "copy_":
        gpu_ids, cpu_ids = list(range(10)), list(range(10))  # one run -> slice copy_
        monkeypatch.setattr(torch.Tensor, "copy_", boom)
    else:
        gpu_ids, cpu_ids = [9, 3, 14], [0, 5, 2]  # scattered -> gather
        monkeypatch.setattr(torch, "index_select", boom)
        monkeypatch.setattr(torch.Tensor, "index_select", boom)
    if isinstance(device, CudaPath):
        # On CUDA the SM paths copy by index_copy_ (or Triton), the DMA paths through the driver.
        monkeypatch.setattr(torch.Tensor, "index_copy_", boom)
        monkeypatch.setattr(cuda_paths.copy_vector_triton, "copy_rows", boom)
        for backend in (copy_backends.DriverCtypes, copy_backends.DriverBindings):
            monkeypatch.setattr(backend, "copy_async", boom)
            monkeypatch.setattr(backend, "copy_batch", boom)
    threads = torch.get_num_threads()
    m.store(1, gpu_ids, cpu_ids)
    monkeypatch.undo()
    assert torch.get_num_threads() == threads  # restored after the failure
    results = finish(m, 1)
    assert not results[1].ok and results[1].error is not None
    assert f"simulated {primitive.split()[0]} failure" in results[1].error
    # The mover stays usable after a failed job.
    m.store(2, gpu_ids, cpu_ids)
    assert finish(m, 2)[2].ok


@needs_numba
@pytest.mark.parametrize("threaded", [False, True], ids=["one thread", "threaded"])
def test_kernel_raising_is_reported_failed(threaded: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    assert mover_cpu_kernel.ready()
    layers = multi_layers("cpu")
    m = BlockMover(layers, NUM_CPU)
    if threaded:
        monkeypatch.setattr(mover_mod, "_PARALLEL_MIN_BYTES", 1)
        monkeypatch.setattr(mover_mod, "_KERNEL_CHUNK_BYTES", 1)
    real = mover_cpu_kernel.copy_rows_arrays
    calls: list[int] = []

    def boom(*args: object) -> None:
        calls.append(1)
        if len(calls) == 2:  # fail mid-job: some layers/chunks were already copied
            raise RuntimeError("simulated kernel failure")
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(mover_cpu_kernel, "copy_rows_arrays", boom)
    gpu_ids, cpu_ids = PATTERNS["scattered"]
    threads = torch.get_num_threads()
    m.store(1, gpu_ids, cpu_ids)
    assert torch.get_num_threads() == threads
    r = finish(m, 1)[1]
    assert not r.ok and r.error is not None and "simulated kernel failure" in r.error
    monkeypatch.setattr(mover_cpu_kernel, "copy_rows_arrays", real)
    m.store(2, gpu_ids, cpu_ids)
    assert finish(m, 2)[2].ok
    before = snapshot(layers)
    for b, c in zip(before, m.cpu_layers, strict=True):
        assert torch.equal(as_bytes(c)[cpu_ids], b[gpu_ids])


def test_kernel_is_used_when_numba_is_installed(kernel_calls: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails if numba is installed but the mover silently copies scattered blocks with torch."""
    if not HAS_NUMBA:
        assert not mover_cpu_kernel.AVAILABLE
        pytest.skip("numba is not installed: the torch path is the expected one")
    assert mover_cpu_kernel.ready(), "numba is installed but the copy kernel did not load"
    layers = multi_layers("cpu")
    m = BlockMover(layers, NUM_CPU)
    gpu_ids, cpu_ids = PATTERNS["scattered"]
    m.store(1, gpu_ids, cpu_ids)
    assert finish(m, 1)[1].ok
    assert sum(kernel_calls) == len(gpu_ids) * len(layers)  # every scattered row, every layer
    kernel_calls.clear()
    monkeypatch.setattr(mover_mod, "_SMALL_JOB", 0)  # the vectorised planner too
    gpu_ids = torch.randperm(NUM_GPU, generator=torch.Generator().manual_seed(1))[:NUM_CPU].tolist()
    m.load(2, list(range(NUM_CPU))[::-1], gpu_ids)
    assert finish(m, 2)[2].ok
    assert sum(kernel_calls) == NUM_CPU * len(layers)


@needs_numba
def test_cpu_kernel_false_copies_scattered_blocks_with_torch(kernel_calls: list[int]) -> None:
    """The kernel choice is the mover's argument: with numba ready, ``cpu_kernel=False`` still copies with torch."""
    assert mover_cpu_kernel.ready()
    layers = multi_layers("cpu")
    m = BlockMover(layers, NUM_CPU, cpu_kernel=False)
    gpu_ids, cpu_ids = PATTERNS["scattered"]
    m.store(1, gpu_ids, cpu_ids)
    assert finish(m, 1)[1].ok
    assert kernel_calls == []
    for b, c in zip(snapshot(layers), m.cpu_layers, strict=True):
        assert torch.equal(as_bytes(c)[cpu_ids], b[gpu_ids])


@pytest.mark.parametrize("cpu_kernel", [pytest.param(True, marks=needs_numba), False])
def test_the_mover_imports_numba_only_with_the_cpu_kernel(cpu_kernel: bool) -> None:
    """What the vLLM harness relies on (``cpu_kernel: false``): once numba is imported, no second
    vLLM engine starts in the process."""
    import subprocess
    import sys

    code = (
        "import sys, torch\n"
        "from kvoffload.dataplane.mover import BlockMover\n"
        f"m = BlockMover([torch.arange(96.0).reshape(24, 4)], 20, cpu_kernel={cpu_kernel})\n"
        f"m.store(1, {PATTERNS['scattered'][0]}, {PATTERNS['scattered'][1]})\n"
        "m.wait([1])\n"
        "assert [r.ok for r in m.poll()] == [True]\n"
        "print('numba' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert done.stdout.split() == [str(cpu_kernel)]


def test_numba_not_imported_with_kvoffload() -> None:
    import subprocess
    import sys

    code = "import sys, kvoffload, kvoffload.dataplane.mover, kvoffload_lab.cli; assert 'numba' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_numba
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8], ids=str)
def test_copy_rows_public_api(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(3)
    src = torch.randint(0, 100, (30, 9), dtype=torch.int64, generator=g).to(dtype)
    dst = torch.zeros(25, 9, dtype=dtype)
    s = torch.tensor([29, 0, 7, 13], dtype=torch.int32)
    d = torch.tensor([3, 24, 0, 11])
    mover_cpu_kernel.copy_rows(src, dst, s, d)
    expected = torch.zeros_like(dst)
    expected[d] = src[s.long()]
    assert torch.equal(dst, expected)
    with pytest.raises(ValueError, match="outside"):
        mover_cpu_kernel.copy_rows(src, dst, s, torch.tensor([3, 25, 0, 11]))
    with pytest.raises(ValueError, match="row mismatch"):
        mover_cpu_kernel.copy_rows(src, torch.zeros(25, 8, dtype=dtype), s, d)
    with pytest.raises(TypeError, match="dtype"):
        mover_cpu_kernel.copy_rows(src.float(), dst.float(), s, d)
    with pytest.raises(ValueError, match="ids but"):
        mover_cpu_kernel.copy_rows(src, dst, s, d[:3])


def test_pinning_failure_falls_back_with_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    real_empty = torch.empty

    def empty(*args: object, pin_memory: bool = False, **kwargs: object) -> torch.Tensor:
        if pin_memory:
            raise RuntimeError("cannot pin")
        return real_empty(*args, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(torch, "empty", empty)
    with pytest.warns(RuntimeWarning, match="pinning .* failed"):
        m = BlockMover([rand_layer(NUM_GPU, (4,), torch.float16, "cpu")], 4, pin_memory=True)
    monkeypatch.undo()
    assert not m.cpu_layers[0].is_pinned()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BlockMover([rand_layer(NUM_GPU, (4,), torch.float16, "cpu")], 4)


@pytest.mark.parametrize("device", DEVICES)
def test_large_block_and_chunked_paths(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Force single-block slice copies and many small staging chunks on tiny tensors.
    layers = multi_layers(device, seed=5)
    before = snapshot(layers)
    monkeypatch.setattr(mover_mod, "_MIN_RUN_BYTES", 1)
    m = BlockMover(layers, NUM_CPU)
    gpu_ids, cpu_ids = PATTERNS["scattered"]
    m.store(1, gpu_ids, cpu_ids)
    finish(m, 1)
    monkeypatch.setattr(mover_mod, "_MIN_RUN_BYTES", 1 << 30)
    monkeypatch.setattr(mover_mod, "_STAGING_BYTES", 1)
    m.load(2, cpu_ids, [0, 1, 2, 3, 4, 5, 6])
    finish(m, 2)
    for b, layer in zip(before, layers, strict=True):
        assert torch.equal(as_bytes(layer)[:7], b[gpu_ids])


@pytest.mark.parametrize("path", CPU_PATHS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_mappings_match_per_block_reference(data: st.DataObject, path: str) -> None:
    n = data.draw(st.integers(0, 16))
    gpu_ids = data.draw(st.lists(st.integers(0, NUM_GPU - 1), min_size=n, max_size=n))
    cpu_ids = data.draw(st.lists(st.integers(0, NUM_CPU - 1), min_size=n, max_size=n, unique=True))
    layers = multi_layers("cpu", seed=7)
    m = BlockMover(layers, NUM_CPU, cpu_kernel=path == "kernel")
    expected = snapshot(m.cpu_layers)
    src = snapshot(layers)
    for g, c in zip(gpu_ids, cpu_ids, strict=True):
        for e, s in zip(expected, src, strict=True):
            e[c] = s[g]
    m.store(1, gpu_ids, cpu_ids)
    assert finish(m, 1)[1].ok
    assert_same(snapshot(m.cpu_layers), expected)


@needs_cuda
@pytest.mark.cuda
def test_cuda_pinned_and_store_waits_for_compute_stream() -> None:
    layer = torch.zeros(NUM_GPU, 1 << 16, dtype=torch.float16, device="cuda")
    m = BlockMover([layer], NUM_CPU)
    assert m.cpu_layers[0].is_pinned()
    assert m.device.type == "cuda"
    assert m.cuda_copy is not None and set(m.cuda_copy.values()) <= set(cuda_paths.PATHS)
    torch.cuda.synchronize()
    # The compute stream is busy, then writes the block: the store must see the write.
    torch.cuda._sleep(50_000_000)
    layer[3].fill_(7.0)
    m.store(1, [3], [0])
    r = finish(m, 1)[1]
    assert r.ok
    assert bool((m.cpu_layers[0][0] == 7.0).all())
    m.close()


def structured_mapping(rng: random.Random, pool_src: int, pool_dst: int, n: int) -> tuple[list[int], list[int]]:
    """A mapping mixing runs on both sides, runs on one side and scattered pairs (unique dst)."""
    dst_pool = list(range(pool_dst))
    chunks = [dst_pool[i : i + rng.randint(1, 12)] for i in range(0, pool_dst, 12)]
    rng.shuffle(chunks)
    src: list[int] = []
    dst: list[int] = []
    for chunk in chunks:
        if len(dst) >= n:
            break
        kind = rng.choice(["both", "dst", "src", "scattered"])
        chunk = chunk[: n - len(dst)]
        if kind in ("src", "scattered"):
            rng.shuffle(chunk)
        if kind in ("both", "src"):
            start = rng.randrange(0, pool_src - len(chunk) + 1)
            src += range(start, start + len(chunk))
        else:
            src += [rng.randrange(pool_src) for _ in chunk]
        dst += chunk
    return src, dst


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("planner", ["python", "torch"])
@pytest.mark.parametrize("mode", ["staged", "big blocks", "threaded"])
def test_structured_mappings_match_reference(
    device: str, planner: str, mode: str, cpu_kernel: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if planner == "torch":
        monkeypatch.setattr(mover_mod, "_SMALL_JOB", 0)
    if mode == "big blocks":
        monkeypatch.setattr(mover_mod, "_MIN_RUN_BYTES", 1)  # lone blocks become slice copies
    elif mode == "staged":
        monkeypatch.setattr(mover_mod, "_STAGING_BYTES", 256)  # several staging chunks
    else:  # scattered pairs split in small chunks over worker threads (when torch has >1 thread)
        monkeypatch.setattr(mover_mod, "_PARALLEL_MIN_BYTES", 1)
        monkeypatch.setattr(mover_mod, "_CHUNK_BYTES", 64)
        monkeypatch.setattr(mover_mod, "_KERNEL_CHUNK_BYTES", 64)
    n_gpu, n_cpu = 150, 120
    layers = [
        rand_layer(n_gpu, (3, 2), torch.float16, device, 11),
        rand_layer(n_gpu, (7,), torch.uint8, device, 12),
    ]
    m = BlockMover(layers, n_cpu, cpu_kernel=cpu_kernel)
    rng = random.Random(f"{planner}-{mode}")
    job = 0
    for _ in range(6):
        for direction in ("store", "load"):
            job += 1
            n = rng.randint(0, 100)
            if direction == "store":
                src, dst = structured_mapping(rng, n_gpu, n_cpu, n)
                src_t, dst_t = layers, m.cpu_layers
            else:
                src, dst = structured_mapping(rng, n_cpu, n_gpu, n)
                src_t, dst_t = m.cpu_layers, layers
            expected = snapshot(dst_t)
            source = snapshot(src_t)
            for s, d in zip(src, dst, strict=True):
                for e, b in zip(expected, source, strict=True):
                    e[d] = b[s]
            (m.store if direction == "store" else m.load)(job, src, dst)
            assert finish(m, job)[job].ok
            assert_same(snapshot(dst_t), expected)


def test_numba_cache_dir_falls_back_to_user_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A read-only install must not make numba warn or fail: the cache goes to a user directory."""
    real = mover_cpu_kernel._writable_dir
    pycache = Path(mover_cpu_kernel.__file__).parent / "__pycache__"
    monkeypatch.setattr(mover_cpu_kernel, "_writable_dir", lambda p: p != pycache and real(p))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    mover_cpu_kernel._set_cache_dir()
    target = tmp_path / "kvoffload" / "numba"
    assert os.environ["NUMBA_CACHE_DIR"] == str(target) and target.is_dir()
    monkeypatch.setenv("NUMBA_CACHE_DIR", "/somewhere/else")  # a user's own setting is kept
    mover_cpu_kernel._set_cache_dir()
    assert os.environ["NUMBA_CACHE_DIR"] == "/somewhere/else"


def test_cpu_tensors_sharing_memory_with_layers_avoid_the_kernel(kernel_calls: list[int]) -> None:
    """The kernel copies row by row; with source and destination in one buffer a chain of moves
    would read an overwritten row, so such a mover keeps torch's gather-then-scatter."""
    half = NUM_GPU // 2
    buf = rand_layer(NUM_GPU + half, (4,), torch.int64, "cpu", 21)
    assert BlockMover([buf[:half]], half, cpu_layers=[buf[half:]])._kernel_safe  # disjoint
    m = BlockMover([buf[:NUM_GPU]], NUM_GPU, cpu_layers=[buf[half:]])  # CPU row c is GPU row half + c
    assert not m._kernel_safe
    src, dst = [1, half + 2], [2, 5]  # writes GPU row half + 2, then reads it
    expected = buf.clone()
    expected[[half + d for d in dst]] = buf[src]
    m.store(1, src, dst)
    assert finish(m, 1)[1].ok
    assert torch.equal(buf, expected) and kernel_calls == []


@needs_numba
def test_kernel_path_matches_torch_path_on_big_scattered_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unplanned kernel path (pairs sorted by destination, chunks over threads) writes exactly
    the bytes of the planned torch path, with list and strided tensor ids; a duplicate destination
    is rejected and the next job with the same ids runs."""
    monkeypatch.setattr(mover_mod, "_PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(mover_mod, "_KERNEL_CHUNK_BYTES", 64)
    n_gpu, n_cpu = 900, 700
    movers = {}
    for path in ("kernel", "torch"):
        layers = [rand_layer(n_gpu, (5, 2), torch.float16, "cpu", 3), rand_layer(n_gpu, (9,), torch.uint8, "cpu", 4)]
        movers[path] = (BlockMover(layers, n_cpu, cpu_kernel=path == "kernel"), layers)
    gen = torch.Generator().manual_seed(5)
    jobs: list[tuple[str, list[int] | torch.Tensor, list[int] | torch.Tensor]] = []
    for n in (n_cpu, 300, 129, 1):
        gpu_ids = torch.randperm(n_gpu, generator=gen)[:n]
        cpu_ids = torch.randperm(n_cpu, generator=gen)[:n]
        jobs.append(("store", gpu_ids.tolist(), cpu_ids.tolist()))
        jobs.append(("load", cpu_ids.repeat_interleave(2)[::2], gpu_ids.flip(0)))  # strided tensor ids
    for path, (m, _) in movers.items():
        for job, (direction, src, dst) in enumerate(jobs, 1):
            (m.store if direction == "store" else m.load)(job, src, dst)
            assert finish(m, job)[job].ok
        if path == "kernel":
            with pytest.raises(ValueError, match="job 99: duplicate destination id 3 in cpu_block_ids"):
                m.store(99, list(range(200)), [*range(3, 202), 3])
            # The ids of the failed job, each once (the torch mover does the same below as job 101).
            m.store(100, list(range(200)), list(range(200)))
            assert finish(m, 100)[100].ok
    kernel_m, kernel_layers = movers["kernel"]
    torch_m, torch_layers = movers["torch"]
    kernel_m.store(101, list(range(200)), list(range(200)))
    torch_m.store(101, list(range(200)), list(range(200)))
    assert finish(kernel_m, 101)[101].ok and finish(torch_m, 101)[101].ok
    assert_same(snapshot(kernel_m.cpu_layers), snapshot(torch_m.cpu_layers))
    assert_same(snapshot(kernel_layers), snapshot(torch_layers))

# ---------------------------------------------------------------- ids: numpy arrays, compiled check
# The kernel path checks and sorts ids in one compiled pass (mover_cpu_kernel.pairs_by_destination)
# instead of Python/numpy code, so that pass is checked against a plain-Python reference on every
# outcome: in range and sorted, out of range on either side, a repeated destination, with dense
# (counting sort) and sparse (argsort) destination spans.

def pairs_reference(
    src: list[int], dst: list[int], src_limit: int, dst_limit: int
) -> tuple[str, int] | list[tuple[int, int]]:
    """What pairs_by_destination must do: ('src'|'dst'|'dup', value) or the pairs sorted by dst."""
    for side, ids, limit in (("src", src, src_limit), ("dst", dst, dst_limit)):
        if min(ids) < 0:
            return side, min(ids)
        if max(ids) >= limit:
            return side, max(ids)
    repeated = sorted({d for d in dst if dst.count(d) > 1})
    if repeated:
        return "dup", repeated[0]
    return sorted(zip(src, dst, strict=True), key=lambda p: p[1])


@needs_numba
@given(
    data=st.data(),
    n=st.integers(1, 40),
    dst_span=st.sampled_from([10, 60, 100_000]),  # 100_000: sparser than the counting sort takes
    sort_dst=st.booleans(),
)
def test_pairs_by_destination_matches_reference(data: st.DataObject, n: int, dst_span: int, sort_dst: bool) -> None:
    src_limit, dst_limit = 50, dst_span
    src = data.draw(st.lists(st.integers(-3, src_limit + 2), min_size=n, max_size=n), label="src")
    dst = data.draw(st.lists(st.integers(-3, dst_limit + 2), min_size=n, max_size=n), label="dst")
    if sort_dst:
        dst.sort()
    expected = pairs_reference(src, dst, src_limit, dst_limit)
    src_a, dst_a = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)
    before = (src_a.copy(), dst_a.copy())
    if isinstance(expected, tuple):
        with pytest.raises(mover_cpu_kernel.PairsError) as info:
            mover_cpu_kernel.pairs_by_destination(src_a, dst_a, src_limit, dst_limit)
        got = ("dup" if info.value.duplicate else info.value.side, info.value.value)
        assert got == expected
    else:
        out_src, out_dst = mover_cpu_kernel.pairs_by_destination(src_a, dst_a, src_limit, dst_limit)
        assert list(zip(out_src.tolist(), out_dst.tolist(), strict=True)) == expected
        assert out_src.dtype == out_dst.dtype == np.int64
        assert out_src.flags.c_contiguous and out_dst.flags.c_contiguous
    # The inputs are never reordered in place.
    assert np.array_equal(src_a, before[0]) and np.array_equal(dst_a, before[1])


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint16", "uint64", "intp"])
@needs_numpy
def test_numpy_array_ids_move_the_same_bytes(dtype: str, cpu_kernel: bool) -> None:
    """numpy ids of any integer dtype, strided or not, copy what the same ids as lists copy."""
    gen = np.random.default_rng(7)
    gpu_ids = gen.permutation(NUM_GPU)[:NUM_CPU].astype(dtype)
    cpu_ids = np.repeat(gen.permutation(NUM_CPU).astype(dtype), 2)[::2]  # strided view
    layers = multi_layers("cpu")
    m = BlockMover(layers, NUM_CPU, cpu_kernel=cpu_kernel)
    m.store(1, gpu_ids, cpu_ids)
    assert finish(m, 1)[1].ok
    for g, c in zip(layers, m.cpu_layers, strict=True):
        assert torch.equal(as_bytes(c)[cpu_ids.tolist()], as_bytes(g)[gpu_ids.tolist()])
    back = [torch.zeros_like(g) for g in layers]
    m2 = BlockMover(back, NUM_CPU, cpu_layers=m.cpu_layers, cpu_kernel=cpu_kernel)
    m2.load(2, cpu_ids, gpu_ids)
    assert finish(m2, 2)[2].ok
    for g, b in zip(layers, back, strict=True):
        assert torch.equal(as_bytes(b)[gpu_ids.tolist()], as_bytes(g)[gpu_ids.tolist()])


BAD_ARRAYS: dict[str, tuple[type[Exception], str, Callable[[], object]]] = {
    "2-D": (TypeError, "gpu_block_ids must be a 1-D integer array, got int64 (1, 2)", lambda: np.zeros((1, 2), int)),
    "float": (TypeError, "job 3: gpu_block_ids must be a 1-D integer array, got float64", lambda: np.zeros(2)),
    "bool": (TypeError, "job 3: gpu_block_ids must be a 1-D integer array, got bool", lambda: np.zeros(2, bool)),
    "negative": (ValueError, "job 3: gpu_block_ids contains -1, outside", lambda: np.array([0, -1], np.int32)),
    "too big": (ValueError, f"job 3: gpu_block_ids contains {NUM_GPU}, outside", lambda: np.array([0, NUM_GPU])),
    "beyond int64": (ValueError, "outside the int64 range", lambda: np.array([0, 2**63], np.uint64)),
}


@needs_numpy
@pytest.mark.parametrize("case", list(BAD_ARRAYS))
def test_bad_numpy_ids_are_rejected_before_any_byte_moves(case: str, cpu_kernel: bool) -> None:
    exc, msg, make_ids = BAD_ARRAYS[case]
    gpu_ids = make_ids()
    layers = multi_layers("cpu")
    m = BlockMover(layers, NUM_CPU, cpu_kernel=cpu_kernel)
    cpu_before = snapshot(m.cpu_layers)
    with pytest.raises(exc, match=re.escape(msg)):
        m.store(3, gpu_ids, np.array([0, 1]))
    assert m.in_flight() == set() and m.poll() == []
    assert all(torch.equal(a, b) for a, b in zip(snapshot(m.cpu_layers), cpu_before, strict=True))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense ids", "sparse ids"])
@pytest.mark.parametrize("bad", ["duplicate", "src too big", "dst negative"])
def test_big_bad_jobs_change_nothing(bad: str, sparse: bool, cpu_kernel: bool) -> None:
    """Jobs past the small-job size (compiled check on the kernel path, the counting sort or, for
    a sparse span, argsort) are rejected whole, with the message the small jobs get."""
    n_gpu, n_cpu, n = 600, 50_000 if sparse else 600, 300
    gen = torch.Generator().manual_seed(11)
    layers = [torch.randint(0, 256, (n_gpu, 16), dtype=torch.uint8, generator=gen)]
    m = BlockMover(layers, n_cpu, cpu_kernel=cpu_kernel)
    gpu_ids = torch.randperm(n_gpu, generator=gen)[:n].tolist()
    cpu_ids = torch.randperm(n_cpu, generator=gen)[:n].tolist()
    smallest = min(cpu_ids)
    if bad == "duplicate":
        cpu_ids[-1] = cpu_ids[0] = smallest  # the smallest repeated id is named, in job order too
        cpu_ids[5] = cpu_ids[7] = max(cpu_ids)
        msg = f"job 4: duplicate destination id {smallest} in cpu_block_ids"
    elif bad == "src too big":
        gpu_ids[n // 2] = n_gpu + 5
        msg = f"job 4: gpu_block_ids contains {n_gpu + 5}, outside [0, {n_gpu})"
    else:
        cpu_ids[3] = -2
        msg = f"job 4: cpu_block_ids contains -2, outside [0, {n_cpu})"
    cpu_before = snapshot(m.cpu_layers)
    with pytest.raises(ValueError, match=re.escape(msg)):
        m.store(4, gpu_ids, cpu_ids)
    assert m.in_flight() == set() and m.poll() == []
    assert torch.equal(snapshot(m.cpu_layers)[0], cpu_before[0])


@needs_numba
@pytest.mark.parametrize("row_bytes", [64, 2048, 72, 24])
@pytest.mark.parametrize("dst_offset", [0, 8], ids=["aligned", "unaligned"])
def test_streaming_copy_writes_what_the_plain_copy_writes(row_bytes: int, dst_offset: int) -> None:
    """Streaming stores (64-byte aligned rows only; the rest fall back to plain stores) and the
    prefetch write exactly the rows asked, nothing else, in every case the kernel can meet."""
    assert mover_cpu_kernel.ready()
    width, n = row_bytes // 8, 300
    src = rand_layer(n, (width,), torch.int64, "cpu", 31).numpy()
    base = torch.zeros(n * width + dst_offset // 8, dtype=torch.int64)
    dst = base[dst_offset // 8 :].view(n, width).numpy()
    gen = np.random.default_rng(3)
    src_ids, dst_ids = gen.permutation(n)[:200], np.sort(gen.permutation(n)[:200])
    expected = dst.copy()
    expected[dst_ids] = src[src_ids]
    mover_cpu_kernel.copy_rows_arrays(src, dst, src_ids, dst_ids, stream=True)
    assert np.array_equal(dst, expected)
    assert base[: dst_offset // 8].eq(0).all()


@needs_numba
def test_big_jobs_stream_and_match_the_torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs past _STREAM_MIN_BYTES ask the kernel for streaming stores, in every chunk and layer;
    the bytes are those of the torch path."""
    streams: list[bool] = []
    real = mover_cpu_kernel.copy_rows_arrays

    def spy(src: object, dst: object, src_ids: object, dst_ids: object, stream: bool = False) -> None:
        streams.append(stream)
        real(src, dst, src_ids, dst_ids, stream)  # type: ignore[arg-type]

    monkeypatch.setattr(mover_cpu_kernel, "copy_rows_arrays", spy)
    monkeypatch.setattr(mover_mod, "_STREAM_MIN_BYTES", 128 * 300)
    monkeypatch.setattr(mover_mod, "_PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(mover_mod, "_KERNEL_CHUNK_BYTES", 64 * 16)
    n_gpu, n_cpu = 700, 500
    gen = torch.Generator().manual_seed(8)
    gpu_ids = torch.randperm(n_gpu, generator=gen)[:n_cpu].tolist()
    cpu_ids = torch.randperm(n_cpu, generator=gen).tolist()
    out = {}
    for path in ("kernel", "torch"):
        layers = [rand_layer(n_gpu, (16,), torch.float32, "cpu", 12)]
        layers.append(rand_layer(n_gpu, (2, 32), torch.uint8, "cpu", 13))
        m = BlockMover(layers, n_cpu, cpu_kernel=path == "kernel")
        m.store(1, gpu_ids, cpu_ids)  # 500 blocks of 128 bytes: streamed
        m.load(2, cpu_ids[:200][::-1], gpu_ids[:200])  # 200 blocks: below the threshold
        assert finish(m, 1, 2)[2].ok
        out[path] = snapshot([*layers, *m.cpu_layers])
    assert_same(out["kernel"], out["torch"])
    assert True in streams and False in streams
    assert len(streams) > 2 * 2  # the streamed job ran in several chunks, each layer


def test_big_list_ids_land_where_they_must(cpu_kernel: bool) -> None:
    """Lists past the small-job size are converted in one call (struct.pack_into); every block
    lands at its id, checked against the ids themselves, not against the other path."""
    n_gpu, n_cpu, n = 400, 300, 250
    gen = torch.Generator().manual_seed(21)
    layers = [rand_layer(n_gpu, (3, 8), torch.float16, "cpu", 22), rand_layer(n_gpu, (40,), torch.uint8, "cpu", 23)]
    m = BlockMover(layers, n_cpu, cpu_kernel=cpu_kernel)
    gpu_ids = torch.randperm(n_gpu, generator=gen)[:n].tolist()
    cpu_ids = torch.randperm(n_cpu, generator=gen)[:n].tolist()
    m.store(1, gpu_ids, cpu_ids)
    assert finish(m, 1)[1].ok
    for g, c in zip(layers, m.cpu_layers, strict=True):
        for gi, ci in zip(gpu_ids, cpu_ids, strict=True):
            assert torch.equal(as_bytes(c[ci : ci + 1]), as_bytes(g[gi : gi + 1]))
    back = [torch.zeros_like(g) for g in layers]
    m2 = BlockMover(back, n_cpu, cpu_layers=m.cpu_layers, cpu_kernel=cpu_kernel)
    m2.load(2, cpu_ids, gpu_ids)
    assert finish(m2, 2)[2].ok
    for g, b in zip(layers, back, strict=True):
        assert torch.equal(as_bytes(b[gpu_ids]), as_bytes(g[gpu_ids]))


def test_cuda_copy_is_none_on_cpu_and_an_unknown_mode_is_refused() -> None:
    layers = [torch.zeros(NUM_GPU, 8, dtype=torch.float16)]
    assert BlockMover(layers, NUM_CPU).cuda_copy is None
    with pytest.raises(
        ValueError, match="cuda_copy must be 'auto' or one of naive, merged, batched, gather, vector, got 'fast'"
    ):
        BlockMover(layers, NUM_CPU, cuda_copy="fast")  # type: ignore[arg-type]


@needs_cuda
@pytest.mark.cuda
def test_cuda_copy_modes_and_sm_paths_need_pinned_cpu_layers() -> None:
    layer = rand_layer(NUM_GPU, (64,), torch.float16, "cuda", 5)
    for path in cuda_paths.PATHS:
        assert BlockMover([layer], NUM_CPU, cuda_copy=path).cuda_copy == {"store": path, "load": path}  # type: ignore[arg-type]
    pageable = [torch.zeros(NUM_CPU, 64, dtype=torch.float16)]
    auto = BlockMover([layer], cpu_layers=pageable)
    assert auto.cuda_copy is not None and set(auto.cuda_copy.values()) <= set(cuda_paths.DMA_PATHS)
    assert set(auto.cuda_copy_unavailable) >= {"gather", "vector"}
    with pytest.raises(ValueError, match="cuda_copy='gather' cannot run here: the gather path needs CUDA views"):
        BlockMover([layer], cpu_layers=pageable, cuda_copy="gather")


@needs_cuda
@pytest.mark.cuda
@pytest.mark.parametrize("cuda_copy", cuda_paths.PATHS)
def test_cuda_scattered_round_trip_of_many_small_blocks(cuda_copy: str) -> None:
    """Thousands of scattered 4 KiB-and-smaller rows each way, checked byte for byte."""
    n_gpu, n_cpu = 4096, 6000
    layers = [rand_layer(n_gpu, (1024,), torch.int32, "cuda", 7), rand_layer(n_gpu, (3,), torch.uint8, "cuda", 8)]
    m = BlockMover(layers, n_cpu, cuda_copy=cuda_copy)  # type: ignore[arg-type]
    rng = random.Random(3)
    gpu_ids = rng.sample(range(n_gpu), 3000)
    cpu_ids = rng.sample(range(n_cpu), 3000)
    before = [layer.cpu().clone() for layer in layers]
    m.store(1, gpu_ids, cpu_ids)
    assert finish(m, 1)[1].ok
    for cpu_layer, ref in zip(m.cpu_layers, before, strict=True):
        assert torch.equal(cpu_layer[cpu_ids], ref[gpu_ids])
    for layer in layers:
        layer.zero_()
    back = rng.sample(range(n_gpu), 3000)
    m.load(2, cpu_ids, back)
    assert finish(m, 2)[2].ok
    for layer, ref in zip(layers, before, strict=True):
        assert torch.equal(layer[back].cpu(), ref[gpu_ids])
        untouched = sorted(set(range(n_gpu)) - set(back))
        assert not layer[untouched].any()
    m.close()


@pytest.mark.parametrize("as_tensor", [False, True])
def test_check_unique_names_the_smallest_duplicate(as_tensor: bool) -> None:
    """The CUDA kernel path's duplicate check (no plan) names the id the sorting planners name."""
    ids = [9, 5, 7, 5, 9, 9, 2]
    with pytest.raises(ValueError, match=r"^job 4: duplicate destination id 5 in cpu_block_ids$"):
        mover_mod._check_unique(4, "cpu_block_ids", torch.tensor(ids) if as_tensor else ids)
    mover_mod._check_unique(4, "cpu_block_ids", torch.tensor([3, 1, 2]) if as_tensor else [3, 1, 2])
