"""Block mover: copies KV-cache blocks between per-layer GPU tensors and CPU memory.

A *block* is row ``i`` of every layer's KV tensor (``layer[i]``). A CPU block holds one GPU block
of every layer. ``store`` copies GPU -> CPU, ``load`` copies CPU -> GPU; both are asynchronous
jobs identified by a caller-chosen integer id whose outcome is reported exactly once by
:meth:`BlockMover.poll`. A failed copy is reported ``ok=False``, never as done.

On CUDA the copies run on one stream per direction and complete through CUDA events; on CPU
they run synchronously at submit (a helper thread was not worth it: the copy is memory-bound and
is split over the intra-op threads anyway). On CPU with numba installed (extra ``fast-cpu``, see
:mod:`kvoffload.dataplane.mover_cpu_kernel`) a job is not planned: one compiled pass checks its ids
and sorts the pairs by destination, and a single-pass kernel copies them, split in chunks over
both cores, big jobs with prefetch and streaming stores. Otherwise (no numba on CPU) a job is
planned into slice runs, one-sided gathers and a scattered rest, copied by torch. On CUDA a job is
handed to one of the copy paths of :mod:`kvoffload.dataplane.cuda_paths` per direction (copy
engines one block at a time, merged runs, one batched call, or SM kernels through a CUDA view of
the pinned tier), chosen by ``cuda_copy`` (see :mod:`kvoffload.dataplane.cuda_copy_setup`).

Block ids may be given as a sequence of ints, a 1-D integer tensor or a 1-D integer numpy array
(used without a copy when it is C-contiguous int64).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import operator
import struct
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from kvoffload.dataplane import cuda_copy_setup, cuda_host, host_memory, mover_cpu_kernel
from kvoffload.dataplane.cuda_paths import PATHS, CopyPath, LayerRows

Direction = Literal["store", "load"]
CudaCopy = Literal["auto", "naive", "merged", "batched", "gather", "vector"]
FaultInjector = Callable[[int, str], bool]

__all__ = ["BlockMover", "CudaCopy", "Direction", "FaultInjector", "TransferResult"]

# A run of blocks consecutive on both sides is copied with one slice ``copy_`` (a memcpy) when it
# is at least this long; shorter runs are cheaper inside the batched gather, whose per-call cost
# is paid once per job rather than once per run.
_MIN_RUN_BLOCKS = 8
# ... or when the run is at least this many bytes (over all layers): then a memcpy beats the
# two-pass gather/scatter whatever the run length.
_MIN_RUN_BYTES = 1024 * 1024
# The scattered path gathers into a reusable staging buffer in chunks of at most this many bytes:
# a reused buffer avoids page-faulting a fresh allocation on every job (measured: 3x slower), and
# bounded chunks keep the mover's extra memory small.
_STAGING_BYTES = 16 * 1024 * 1024
# Chunk of the two-pass scattered copy when it is split over threads: small enough to stay in a
# core's L2 between the gather and the scatter (measured best of 256 KiB..4 MiB).
_CHUNK_BYTES = 1024 * 1024
# Jobs up to this many blocks are planned in pure Python, larger ones with vectorised torch ops.
_SMALL_JOB = 128
# Jobs moving fewer bytes than this run on one intra-op thread (see _intra_op_threads).
_PARALLEL_MIN_BYTES = 4 * 1024 * 1024
# Chunk of the numba kernel's rows handed to one worker thread at a time: small enough that a
# worker descheduled on a loaded box holds back little of the job, large enough that the per-call
# cost (~2 us per layer) stays a few percent.
_KERNEL_CHUNK_BYTES = 2 * 1024 * 1024
# A job is split into about this many chunks: measured (64 MiB of 4-16 KiB blocks, loaded 2-core
# box) 8 chunks ~0.93-1.12 of a contiguous copy, 32 chunks of 2 MiB ~0.81-0.84, two halves ~0.6.
_KERNEL_CHUNKS = 8
# Kernel jobs of at least this many bytes write with streaming stores (see mover_cpu_jit): they
# would evict their own rows from the caches anyway; smaller ones keep the rows in cache for a
# reader that comes soon.
_STREAM_MIN_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class TransferResult:
    """The outcome of one store or load job, reported once by :meth:`BlockMover.poll`.

    ``bytes`` is the number of bytes the job was asked to move (blocks x bytes per block over all
    layers), ``seconds`` the copy time (CUDA event time on CUDA, wall time on CPU), ``error`` the
    reason when ``ok`` is False.
    """

    job_id: int
    ok: bool
    bytes: int
    seconds: float
    direction: Direction
    error: str | None = None


def _row_dtype(row_bytes: int) -> torch.dtype:
    # Copy every layer as rows of the widest integer type that divides the block: the copy is
    # dtype-agnostic (bf16, fp8, ... all move the same way) and per-element kernels such as
    # index_copy_ do 8x fewer iterations on int64 than on uint8 (measured 2-3x faster).
    for dtype, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
        if row_bytes % size == 0:
            return dtype
    return torch.uint8


def _as_rows(t: torch.Tensor, row_dtype: torch.dtype) -> torch.Tensor:
    """View a contiguous ``[n, ...]`` tensor as ``[n, row_elems]`` of ``row_dtype`` (no copy)."""
    # An explicit row length (not -1) so that empty pools (n == 0) reshape too.
    flat = t.reshape(t.shape[0], math.prod(t.shape[1:]))
    return flat.view(torch.uint8).view(row_dtype)


@dataclass
class _Plan:
    """How one job's (src, dst) pairs are copied, per layer, each group by the cheapest call.

    ``runs``: (src_start, dst_start, length), consecutive on both sides -> slice ``copy_``.
    ``dst_runs``: (dst_start, src_ids), consecutive destination -> ``index_select(out=slice)``.
    ``src_runs``: (src_start, dst_ids), consecutive source -> ``index_copy_(slice)``.
    ``scatter_src``/``scatter_dst``: the rest, scattered on both sides, sorted by destination.
    ``kernel``: the job was not planned: every pair is in ``scatter_src``/``scatter_dst`` (sorted
    by destination) and is copied by the numba kernel, a single pass whatever the layout.
    On CUDA a job is not planned either: its pairs, in the given order, are in
    ``scatter_src``/``scatter_dst`` for the direction's copy path.
    """

    runs: list[tuple[int, int, int]] = field(default_factory=list)
    dst_runs: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    src_runs: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    scatter_src: torch.Tensor | None = None
    scatter_dst: torch.Tensor | None = None
    kernel: bool = False


def _long_segments(brk: torch.Tensor, n: int, min_len: int) -> tuple[list[tuple[int, int]], torch.Tensor]:
    """Segments of ``n`` items split after each True in ``brk`` that are at least ``min_len`` long.

    Returns their (start, length) pairs and a mask of the items NOT in such a segment; vectorised
    because a job can hold tens of thousands of one-block segments.
    """
    starts = torch.cat([torch.zeros(1, dtype=torch.int64), brk.nonzero().flatten() + 1])
    lengths = torch.diff(starts, append=torch.tensor([n]))
    long = lengths >= min_len
    # Segment id of every item, then a gather: repeat_interleave is ~10x slower here.
    seg = torch.zeros(n, dtype=torch.int64)
    if n > 1:
        torch.cumsum(brk, 0, out=seg[1:])
    rest = ~long[seg]
    return list(zip(starts[long].tolist(), lengths[long].tolist(), strict=True)), rest


def _sort(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.sort`` of a 1-D int64 CPU tensor (not stable), through numpy's argsort when numpy
    is installed (torch does not require it): measured 16384 ids 0.3 ms vs 1.5 ms for torch.sort,
    ~10% of a 64 MiB job of 4 KiB blocks."""
    try:
        import numpy as np

        order = torch.from_numpy(np.argsort(t.numpy()))
    except (ImportError, RuntimeError):  # RuntimeError: "Numpy is not available"
        return torch.sort(t)
    return t[order], order


def _by_destination(
    src: torch.Tensor, dst: torch.Tensor, job_id: int, dst_name: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs sorted by destination id; ValueError on a duplicate destination id."""
    if dst.numel() > 1 and not bool((dst[1:] > dst[:-1]).all()):
        dst, order = _sort(dst)
        src = src[order]
        dup = (dst[1:] == dst[:-1]).nonzero()
        if dup.numel():
            raise ValueError(f"job {job_id}: duplicate destination id {int(dst[int(dup[0])])} in {dst_name}")
    return src, dst


@dataclass
class _KeyRuns:
    """Pairs grouped by runs of consecutive ``key`` ids (see :func:`_key_runs`)."""

    groups: list[tuple[int, torch.Tensor]]
    covered: int
    rest_key: torch.Tensor
    rest_other: torch.Tensor


def _key_runs(key: torch.Tensor, other: torch.Tensor, min_len: int, sort: bool) -> _KeyRuns:
    """Group pairs into runs of consecutive ``key`` ids at least ``min_len`` long (all of them if
    there is just one run): (key_start, other_ids) per group, plus the pairs left over."""
    n = int(key.numel())
    if n == 0:
        return _KeyRuns([], 0, key, other)
    if sort and n > 1 and not bool((key[1:] > key[:-1]).all()):
        key, order = _sort(key)
        other = other[order]
    segs, rest = _long_segments((key[1:] - key[:-1]) != 1, n, min(min_len, n))
    groups = [(int(key[start]), other[start : start + length]) for start, length in segs]
    return _KeyRuns(groups, sum(length for _, length in segs), key[rest], other[rest])


@contextlib.contextmanager
def _intra_op_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (None: unchanged).

    Small jobs run on one thread: a parallel region waits for every worker thread, and when the
    other cores are busy (a loaded CI box, the engine's own threads) a worker may not be scheduled
    for a whole time slice: measured 2 threads on a loaded 2-core box, 1024 rows of 512 bytes,
    index_select 7.8 ms vs 0.03 ms on one thread. Toggling costs ~0.3 us. The setting is
    process-wide, so another Python thread using torch meanwhile runs single-threaded too
    (slower, never wrong).
    """
    if n is None or torch.get_num_threads() <= n:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _overlapping(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    """Whether any tensor of ``a`` shares memory with any tensor of ``b`` (same-device tensors)."""
    spans = sorted(
        (t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), side)
        for side, ts in enumerate((a, b))
        for t in ts
        if t.numel()
    )
    ends = [-1, -1]  # furthest end so far of each side's spans
    for start, stop, side in spans:
        if start < ends[1 - side]:
            return True
        ends[side] = max(ends[side], stop)
    return False


def _is_ndarray(ids: object) -> bool:
    # numpy is optional (torch does not require it); if it was never imported, ids cannot be one.
    np = sys.modules.get("numpy")
    return np is not None and isinstance(ids, np.ndarray)


def _ndarray_ids(job_id: int, name: str, ids: Any) -> Any:
    """A 1-D integer numpy array as C-contiguous int64 (zero-copy when it already is)."""
    import numpy as np

    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise TypeError(f"job {job_id}: {name} must be a 1-D integer array, got {ids.dtype} {ids.shape}")
    if ids.dtype == np.uint64 and ids.size and int(ids.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"job {job_id}: {name} contains {int(ids.max())}, outside the int64 range")
    return np.ascontiguousarray(ids, dtype=np.int64)


def _tensor_ids(job_id: int, name: str, ids: torch.Tensor) -> torch.Tensor:
    if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"job {job_id}: {name} must be a 1-D integer tensor, got {ids.dtype} {tuple(ids.shape)}")
    return ids.detach().to("cpu", torch.int64).contiguous()


def _small_list_ids(job_id: int, name: str, ids: Sequence[int]) -> list[int]:
    bad = next((v for v in ids if isinstance(v, bool) or not isinstance(v, int)), None)
    if bad is not None:
        raise TypeError(f"job {job_id}: {name} must contain ints, got {bad!r}")
    return list(ids)


def _list_ids(job_id: int, name: str, ids: Sequence[int]) -> bytearray:
    """A sequence of ints as a writable native int64 buffer. ``struct.pack_into`` converts ~2x
    faster than ``array('q')`` (measured 16,384 ids: 0.09 vs 0.19 ms; numpy's constructors are no
    faster than the latter) and ~10x faster than torch.tensor(list): a job is checked whole before
    any byte moves, so this conversion cannot overlap the copy and is paid in full by every job."""
    buf = bytearray(8 * len(ids))
    try:
        struct.pack_into(f"={len(ids)}q", buf, 0, *ids)
    except struct.error as exc:
        for v in ids:  # name the first id at fault
            try:
                value = operator.index(v)
            except TypeError:
                raise TypeError(f"job {job_id}: {name} must contain ints, got {v!r} ({exc})") from None
            if not -(2**63) <= value < 2**63:
                raise ValueError(f"job {job_id}: {name} contains {value}, outside the int64 range") from None
        raise TypeError(f"job {job_id}: {name} must contain ints ({exc})") from None
    return buf


def _check_unique(job_id: int, name: str, ids: list[int] | torch.Tensor) -> None:
    """ValueError naming the smallest id that ``ids`` holds twice, the id the sorting planners name.

    O(n + largest id) with no sort: CUDA jobs skip the torch planner, so this is all the host
    does per block besides converting the ids."""
    if isinstance(ids, list):
        seen: set[int] = set()
        repeated: set[int] = set()
        for v in ids:
            (repeated if v in seen else seen).add(v)
        if repeated:
            raise ValueError(f"job {job_id}: duplicate destination id {min(repeated)} in {name}")
        return
    if ids.numel() < 2:
        return
    counts = torch.bincount(ids)
    if int(counts.max()) > 1:
        raise ValueError(f"job {job_id}: duplicate destination id {int((counts > 1).nonzero()[0])} in {name}")


def _check_lengths(job_id: int, src_name: str, n_src: int, dst_name: str, n_dst: int) -> None:
    if n_src != n_dst:
        raise ValueError(f"job {job_id}: {src_name} has {n_src} ids but {dst_name} has {n_dst}")


def _as_list(ids: list[int] | torch.Tensor) -> list[int]:
    return ids if isinstance(ids, list) else ids.tolist()


def _as_tensor(ids: list[int] | torch.Tensor) -> torch.Tensor:
    return ids if isinstance(ids, torch.Tensor) else torch.tensor(ids, dtype=torch.int64)


def _min_group(block_bytes: int) -> int:
    """Blocks a group needs to earn its own call(s); the floor of 2 keeps lone blocks batched."""
    return max(2, min(_MIN_RUN_BLOCKS, -(-_MIN_RUN_BYTES // max(block_bytes, 1))))


def _groups_py(
    pairs: list[tuple[int, int]], min_len: int, both: bool
) -> tuple[list[list[tuple[int, int]]], list[tuple[int, int]]]:
    """Split (key, other) pairs sorted by key into runs of consecutive keys (and consecutive others
    too if ``both``) at least ``min_len`` long; the pure-Python twin of :func:`_long_segments`."""
    groups: list[list[tuple[int, int]]] = []
    rest: list[tuple[int, int]] = []
    if not pairs:
        return groups, rest
    start = 0
    prev_k, prev_o = pairs[0]
    for i in range(1, len(pairs) + 1):
        if i < len(pairs):
            k, o = pairs[i]
            if k == prev_k + 1 and (not both or o == prev_o + 1):
                prev_k, prev_o = k, o
                continue
            prev_k, prev_o = k, o
        if i - start >= min_len:
            groups.append(pairs[start:i])
        else:
            rest.extend(pairs[start:i])
        start = i
    return groups, rest


def _make_plan_small(src: list[int], dst: list[int], block_bytes: int, job_id: int, dst_name: str) -> _Plan:
    """:func:`_make_plan` for small jobs, in pure Python: a few torch calls on tiny tensors cost
    more (tens of microseconds each) than looping over a few hundred pairs."""
    plan = _Plan()
    if not dst:
        return plan
    by_dst = sorted(zip(dst, src, strict=True))
    for (a, _), (b, _) in itertools.pairwise(by_dst):
        if a == b:
            raise ValueError(f"job {job_id}: duplicate destination id {a} in {dst_name}")
    min_len = _min_group(block_bytes)
    runs, rest = _groups_py(by_dst, min_len, both=True)
    plan.runs = [(g[0][1], g[0][0], len(g)) for g in runs]
    if not rest:
        return plan
    k = len(rest)
    dst_groups, dst_rest = _groups_py(rest, min(min_len, k), both=False)
    src_groups, src_rest = _groups_py(sorted((s_, d_) for d_, s_ in rest), min(min_len, k), both=False)
    # Same rule as _make_plan: the grouping covering more pairs first, the other on the rest.
    left_pairs: list[tuple[int, int]]  # (src, dst)
    if len(dst_rest) <= len(src_rest):
        src_groups, left_pairs = _groups_py(sorted((s_, d_) for d_, s_ in dst_rest), min(min_len, len(dst_rest)), False)
    else:
        dst_groups, left = _groups_py(sorted((d_, s_) for s_, d_ in src_rest), min(min_len, len(src_rest)), False)
        left_pairs = [(s_, d_) for d_, s_ in left]
    plan.dst_runs = [(g[0][0], torch.tensor([o for _, o in g], dtype=torch.int64)) for g in dst_groups]
    plan.src_runs = [(g[0][0], torch.tensor([o for _, o in g], dtype=torch.int64)) for g in src_groups]
    if not left_pairs:
        return plan
    if block_bytes >= _MIN_RUN_BYTES:
        plan.runs += [(s_, d_, 1) for s_, d_ in left_pairs]
        return plan
    left_pairs.sort(key=lambda p: p[1])
    plan.scatter_src = torch.tensor([s_ for s_, _ in left_pairs], dtype=torch.int64)
    plan.scatter_dst = torch.tensor([d_ for _, d_ in left_pairs], dtype=torch.int64)
    return plan


def _make_plan(src: torch.Tensor, dst: torch.Tensor, block_bytes: int, job_id: int, dst_name: str) -> _Plan:
    """Sort pairs by destination and split them into slice runs, gather runs and a scattered rest.

    Raises ValueError on a duplicate destination id (before any byte moves). Vectorised with
    torch: a Python loop over pairs would cost more than the copy itself for small blocks.
    """
    plan = _Plan()
    n = int(dst.numel())
    if n == 0:
        return plan
    src, dst = _by_destination(src, dst, job_id, dst_name)
    min_len = _min_group(block_bytes)
    # Runs consecutive on both sides -> one memcpy per layer each.
    runs, rest = _long_segments(((dst[1:] - dst[:-1]) != 1) | ((src[1:] - src[:-1]) != 1), n, min_len)
    if runs:
        src_l, dst_l = src.tolist(), dst.tolist()
        plan.runs = [(src_l[start], dst_l[start], length) for start, length in runs]
        if not bool(rest.any()):
            return plan
        src, dst = src[rest], dst[rest]
    # One side consecutive, the other scattered -> one pass over the bytes instead of gather +
    # scatter: index_select straight into a destination slice (dst_runs) or index_copy_ from a
    # source slice (src_runs). Take first the grouping that covers more pairs, so that it is not
    # fragmented by the other one.
    by_dst = _key_runs(dst, src, min_len, sort=False)
    by_src = _key_runs(src, dst, min_len, sort=True)
    if by_dst.covered >= by_src.covered:
        plan.dst_runs = by_dst.groups
        second = _key_runs(by_dst.rest_other, by_dst.rest_key, min_len, sort=True)
        plan.src_runs = second.groups
        src, dst = second.rest_key, second.rest_other
    else:
        plan.src_runs = by_src.groups
        second = _key_runs(by_src.rest_other, by_src.rest_key, min_len, sort=True)
        plan.dst_runs = second.groups
        src, dst = second.rest_other, second.rest_key
    if not src.numel():
        return plan
    if block_bytes >= _MIN_RUN_BYTES:
        # Big blocks: one memcpy per block (per layer) is a single pass over the bytes and its
        # call overhead is negligible, so it beats the two-pass gather/scatter (measured 1 MiB:
        # ~0.65-0.8 of a contiguous copy vs ~0.4).
        plan.runs += [(s0, d0, 1) for s0, d0 in zip(src.tolist(), dst.tolist(), strict=True)]
        return plan
    dst, order = _sort(dst)
    plan.scatter_src, plan.scatter_dst = src[order], dst
    return plan


@dataclass
class _Job:
    job_id: int
    direction: Direction
    nbytes: int
    gpu_idx: list[int] | torch.Tensor = field(default_factory=list)
    cpu_idx: list[int] | torch.Tensor = field(default_factory=list)
    start: Any = None  # torch.cuda.Event
    end: Any = None  # torch.cuda.Event
    keepalive: list[Any] = field(default_factory=list)
    _blocks: tuple[frozenset[int], frozenset[int]] | None = None

    def blocks(self) -> tuple[frozenset[int], frozenset[int]]:
        """(GPU ids, CPU ids) as sets, made on first use: only jobs in flight together with one
        of the other direction need them (~2 ms per 10^4 ids on a slow host)."""
        if self._blocks is None:
            self._blocks = (frozenset(_as_list(self.gpu_idx)), frozenset(_as_list(self.cpu_idx)))
        return self._blocks


class BlockMover:
    """Moves KV blocks between per-layer GPU tensors and a CPU block pool.

    Layout: one contiguous CPU tensor per layer, ``[num_cpu_blocks, *layer.shape[1:]]``, rather
    than one flat byte tensor viewed per layer. Either way every copy is one call per layer (the
    GPU side is per layer), but a per-layer tensor keeps each layer's CPU rows contiguous, so a
    destination run is a contiguous ``out=`` for ``index_select`` and a single memcpy/DMA per
    layer; in a flat ``[blocks, all_layers_bytes]`` tensor a layer's rows are strided, which
    forces torch onto slower strided kernels (or a temporary) and splits DMA transfers.

    Args:
        gpu_layers: the engine's per-layer KV tensors, each ``[num_gpu_blocks, ...]``, contiguous,
            on one device (a CPU device is accepted: then everything runs on the CPU).
        num_cpu_blocks: CPU pool size in blocks; optional when ``cpu_layers`` is given.
        cpu_layers: caller-provided CPU tensors, one per layer, same dtype and trailing shape as
            the GPU layer and at least ``num_cpu_blocks`` rows. Allocated when omitted: pinned on
            CUDA, else on transparent huge pages where the kernel offers them
            (:func:`kvoffload.dataplane.host_memory.empty`, which a CPU engine can use for its own
            KV cache too).
        pin_memory: pin allocated CPU memory (default: only when the layers are on CUDA). When
            pinning fails the mover warns and falls back to pageable memory.
        fault_injector: ``(job_id, direction) -> bool``; True makes that job fail with
            ``error="injected fault"`` before any byte moves (its destination is untouched).
        cuda_copy: how CUDA jobs move blocks: one of the paths of
            :mod:`kvoffload.dataplane.cuda_paths` (``"naive"``, ``"merged"``, ``"batched"``,
            ``"gather"``, ``"vector"``) for both directions, or ``"auto"`` (default): per
            direction, the highest bandwidth with a compute slowdown of at most 5% (see
            :mod:`kvoffload.dataplane.copy_calibration`), from ``copy_table`` or else from a
            start-up calibration of at most about ``calibration_s`` seconds on scratch buffers.
            Ignored on CPU. :attr:`cuda_copy` holds the path used per direction (``None`` on
            CPU), :attr:`cuda_copy_reasons` why, :attr:`cuda_copy_details` how each runs here
            (driver backend, kernel), :attr:`cuda_copy_unavailable` the paths that cannot run
            here and why.
        copy_table: for ``cuda_copy="auto"``: a JSON table written by
            ``kvoffload bench mover --device cuda --table PATH``, or a list of
            :class:`~kvoffload.dataplane.copy_calibration.Measurement`.
        calibration_s: time budget of the start-up calibration (``cuda_copy="auto"``, no table).
        cpu_kernel: on CPU, copy scattered blocks with the numba kernel when it is installed
            (default); False copies with torch only.

    Job ids stay known from submit until :meth:`poll` has returned their result: in that window
    they are "in flight", cannot be reused and can be waited on.
    """

    def __init__(
        self,
        gpu_layers: Sequence[torch.Tensor],
        num_cpu_blocks: int | None = None,
        *,
        cpu_layers: Sequence[torch.Tensor] | None = None,
        pin_memory: bool | None = None,
        fault_injector: FaultInjector | None = None,
        cuda_copy: CudaCopy = "auto",
        copy_table: cuda_copy_setup.CopyTable | None = None,
        calibration_s: float = 0.25,
        cpu_kernel: bool = True,
    ) -> None:
        if cuda_copy != "auto" and cuda_copy not in PATHS:
            raise ValueError(f"cuda_copy must be 'auto' or one of {', '.join(PATHS)}, got {cuda_copy!r}")
        layers = self._validate_gpu_layers(list(gpu_layers))
        self._device = layers[0].device
        self.num_gpu_blocks = int(layers[0].shape[0])
        self._is_cuda = self._device.type == "cuda"
        self.num_cpu_blocks, cpu = self._cpu_pool(layers, num_cpu_blocks, cpu_layers, pin_memory)
        self.gpu_layers: list[torch.Tensor] = layers
        self.cpu_layers: list[torch.Tensor] = cpu
        self.layer_block_bytes: list[int] = [math.prod(layer.shape[1:]) * layer.element_size() for layer in layers]
        self.block_bytes: int = sum(self.layer_block_bytes)
        row_dtypes = [_row_dtype(b) for b in self.layer_block_bytes]
        self._gpu_rows = [_as_rows(g, d) for g, d in zip(layers, row_dtypes, strict=True)]
        self._cpu_rows = [_as_rows(c, d) for c, d in zip(cpu, row_dtypes, strict=True)]
        self._fault_injector = fault_injector
        self._ready: list[TransferResult] = []
        self._known: set[int] = set()
        self._pending: dict[Direction, deque[_Job]] = {"store": deque(), "load": deque()}
        self._staging: list[torch.Tensor] = []
        # numpy views of the row tensors for the numba kernel, made on first use (~3 us per
        # tensor, so per job they would cost more than a small copy).
        self._row_arrays: dict[bool, tuple[list[Any], list[Any]]] = {}
        # The kernel copies row by row, so a destination row that is also a later source row
        # would be read after being overwritten; torch's gather-then-scatter reads every source
        # first. Only possible when caller-provided CPU tensors share memory with the layers.
        self._kernel_safe = cpu_kernel and not self._is_cuda and not _overlapping(layers, cpu)
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self.cuda_copy: dict[Direction, str] | None = None
        self.cuda_copy_reasons: dict[Direction, str] = {}
        self.cuda_copy_details: dict[Direction, str] = {}
        self.cuda_copy_unavailable: dict[str, str] = {}
        self._paths: dict[Direction, CopyPath] = {}
        if self._is_cuda:
            self._select_cuda_paths(cuda_copy, copy_table, calibration_s)

    # ------------------------------------------------------------------ construction helpers

    @staticmethod
    def _validate_gpu_layers(layers: list[torch.Tensor]) -> list[torch.Tensor]:
        """``layers``, once each is a contiguous tensor of blocks and all share a device and a
        number of blocks."""
        if not layers:
            raise ValueError("BlockMover needs at least one GPU layer tensor, got an empty list")
        for i, layer in enumerate(layers):
            if not isinstance(layer, torch.Tensor):
                raise TypeError(f"gpu layer {i} is a {type(layer).__name__}, expected a torch.Tensor")
            if layer.dim() < 1:
                raise ValueError(f"gpu layer {i} is 0-dimensional; expected [num_gpu_blocks, ...]")
            if not layer.is_contiguous():
                raise ValueError(f"gpu layer {i} is not contiguous; blocks must be contiguous rows")
        device, num_gpu_blocks = layers[0].device, int(layers[0].shape[0])
        for i, layer in enumerate(layers):
            if layer.device != device:
                raise ValueError(f"gpu layer {i} is on {layer.device}, layer 0 on {device}")
            if layer.shape[0] != num_gpu_blocks:
                raise ValueError(
                    f"gpu layer {i} has {layer.shape[0]} blocks, layer 0 has {num_gpu_blocks}: "
                    "all layers must have the same num_gpu_blocks"
                )
        return layers

    def _cpu_pool(
        self, layers: list[torch.Tensor], num_cpu_blocks: int | None, cpu_layers: Sequence[torch.Tensor] | None,
        pin_memory: bool | None,
    ) -> tuple[int, list[torch.Tensor]]:
        """The CPU pool's size in blocks and its per-layer tensors: the caller's, checked, or
        allocated (pinned by default on CUDA)."""
        if cpu_layers is not None:
            cpu = self._validate_cpu_layers(layers, list(cpu_layers), num_cpu_blocks)
            return int(cpu[0].shape[0]), cpu
        if num_cpu_blocks is None:
            raise ValueError("give num_cpu_blocks or cpu_layers")
        n = operator.index(num_cpu_blocks)
        if n < 0:
            raise ValueError(f"num_cpu_blocks must be >= 0, got {num_cpu_blocks}")
        return n, self._allocate(layers, n, self._is_cuda if pin_memory is None else pin_memory)

    def _select_cuda_paths(
        self, cuda_copy: CudaCopy, copy_table: cuda_copy_setup.CopyTable | None, calibration_s: float
    ) -> None:
        """The copy streams, and the copy path per direction (see ``cuda_copy`` in the class doc)."""
        self._streams: dict[Direction, Any] = {
            "store": torch.cuda.Stream(device=self._device),
            "load": torch.cuda.Stream(device=self._device),
        }
        rows = LayerRows(self._gpu_rows, self._cpu_rows, self._device_views(), self._device)
        selection = cuda_copy_setup.select(cuda_copy, rows, copy_table, calibration_s)
        self._paths = selection.paths
        self.cuda_copy = {d: p.name for d, p in selection.paths.items()}
        self.cuda_copy_reasons = selection.reasons
        self.cuda_copy_details = {d: p.detail for d, p in selection.paths.items()}
        self.cuda_copy_unavailable = selection.unavailable

    def _device_views(self) -> list[torch.Tensor] | None:
        """CUDA views of every layer's CPU rows (for the SM paths), or None when one cannot be
        made (an unpinned tier): then only the copy-engine paths can run."""
        views = [cuda_host.device_view(rows, self._device) for rows in self._cpu_rows]
        if all(view is not None for view in views):
            return [view for view in views if view is not None]
        return None

    @staticmethod
    def _allocate(layers: list[torch.Tensor], n: int, pin: bool) -> list[torch.Tensor]:
        out: list[torch.Tensor] = []
        for layer in layers:
            shape = (n, *layer.shape[1:])
            t: torch.Tensor | None = None
            if pin:
                try:
                    t = torch.empty(shape, dtype=layer.dtype, pin_memory=True)
                except RuntimeError as exc:
                    warnings.warn(
                        f"pinning {n} CPU blocks failed ({exc}); using pageable memory, "
                        "host<->device copies will be slower and synchronous",
                        RuntimeWarning,
                        stacklevel=4,  # _allocate, _cpu_pool, __init__, then the caller
                    )
                    pin = False
            if t is None:
                # Huge pages where the kernel offers them: the scattered copy is bound by page
                # walks (see host_memory); a plain torch.empty tensor where it does not.
                t = host_memory.empty(shape, layer.dtype)
            out.append(t)
        return out

    @staticmethod
    def _validate_cpu_layers(
        layers: list[torch.Tensor], cpu: list[torch.Tensor], num_cpu_blocks: int | None
    ) -> list[torch.Tensor]:
        if len(cpu) != len(layers):
            raise ValueError(f"got {len(cpu)} CPU layer tensors for {len(layers)} GPU layers")
        want = None if num_cpu_blocks is None else operator.index(num_cpu_blocks)
        out = []
        for i, (g, c) in enumerate(zip(layers, cpu, strict=True)):
            if not isinstance(c, torch.Tensor):
                raise TypeError(f"cpu layer {i} is a {type(c).__name__}, expected a torch.Tensor")
            if c.device.type != "cpu":
                raise ValueError(f"cpu layer {i} is on {c.device}, expected a CPU tensor")
            if c.dtype != g.dtype:
                raise TypeError(f"cpu layer {i} has dtype {c.dtype}, GPU layer has {g.dtype}")
            if c.dim() != g.dim() or c.shape[1:] != g.shape[1:]:
                raise ValueError(f"cpu layer {i} has shape {tuple(c.shape)}, expected (n, *{tuple(g.shape[1:])})")
            if not c.is_contiguous():
                raise ValueError(f"cpu layer {i} is not contiguous")
            n = want if want is not None else int(cpu[0].shape[0])
            if c.shape[0] < n:
                raise ValueError(f"cpu layer {i} is too small: {c.shape[0]} blocks, need {n}")
            out.append(c[:n])
        return out

    # ------------------------------------------------------------------ public API

    @property
    def device(self) -> torch.device:
        """The device of the GPU-side layer tensors."""
        return self._device

    def in_flight(self) -> set[int]:
        """Ids submitted whose result :meth:`poll` has not returned yet."""
        return set(self._known)

    def store(self, job_id: int, gpu_block_ids: Sequence[int], cpu_block_ids: Sequence[int]) -> None:
        """Copy GPU blocks to CPU blocks, pairwise (``gpu_block_ids[i] -> cpu_block_ids[i]``)."""
        self._submit(job_id, "store", gpu_block_ids, cpu_block_ids)

    def load(self, job_id: int, cpu_block_ids: Sequence[int], gpu_block_ids: Sequence[int]) -> None:
        """Copy CPU blocks to GPU blocks, pairwise (``cpu_block_ids[i] -> gpu_block_ids[i]``)."""
        self._submit(job_id, "load", cpu_block_ids, gpu_block_ids)

    def poll(self) -> list[TransferResult]:
        """Results of the jobs finished since the last poll, each job exactly once."""
        self._collect(block=frozenset())
        out, self._ready = self._ready, []
        for r in out:
            self._known.discard(r.job_id)
        return out

    def wait(self, job_ids: Iterable[int]) -> None:
        """Block until the given jobs finished; their results are returned by the next poll()."""
        ids = frozenset(job_ids)
        unknown = sorted(ids - self._known)
        if unknown:
            raise KeyError(f"wait on unknown job id(s) {unknown}: never submitted or already polled")
        self._collect(block=ids)

    def close(self) -> None:
        """Wait for every in-flight copy and drop the streams; the results stay pollable."""
        if self._closed:
            return
        self._collect(block=frozenset(self._known))
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._staging = []
        self._row_arrays = {}
        self._closed = True

    # ------------------------------------------------------------------ submission

    def _ids(self, job_id: int, name: str, ids: Sequence[int], limit: int) -> list[int] | torch.Tensor:
        """Validated ids: a list for small jobs (planned in Python), an int64 tensor otherwise."""
        t: list[int] | torch.Tensor
        if _is_ndarray(ids):
            t = torch.from_numpy(_ndarray_ids(job_id, name, ids))
        elif isinstance(ids, torch.Tensor):
            t = _tensor_ids(job_id, name, ids)
        elif len(ids) <= _SMALL_JOB:
            t = _small_list_ids(job_id, name, ids)
        else:
            t = torch.frombuffer(_list_ids(job_id, name, ids), dtype=torch.int64)
        if len(t):
            # numpy, not torch: a torch reduction may run on the intra-op threads, which on a
            # loaded box wait a time slice for the other core (see _intra_op_threads).
            lo, hi = (min(t), max(t)) if isinstance(t, list) else (int(t.numpy().min()), int(t.numpy().max()))
            if lo < 0 or hi >= limit:
                bad = lo if lo < 0 else hi
                raise ValueError(f"job {job_id}: {name} contains {bad}, outside [0, {limit})")
        return t

    @staticmethod
    def _id_array(job_id: int, name: str, ids: Sequence[int]) -> Any:
        """Type-checked ids as a C-contiguous int64 numpy array, range NOT checked (the kernel
        path checks ranges in its compiled preparation pass). Zero-copy from int64 arrays and
        tensors."""
        if _is_ndarray(ids):
            return _ndarray_ids(job_id, name, ids)
        if isinstance(ids, torch.Tensor):
            return _tensor_ids(job_id, name, ids).numpy()
        import numpy as np

        if len(ids) <= _SMALL_JOB:
            _small_list_ids(job_id, name, ids)
        return np.frombuffer(_list_ids(job_id, name, ids), dtype=np.int64)

    def _submit(self, job_id: int, direction: Direction, src_ids: Sequence[int], dst_ids: Sequence[int]) -> None:
        if self._closed:
            raise RuntimeError(f"job {job_id}: the mover is closed")
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            raise TypeError(f"job id must be an int, got {job_id!r}")
        if job_id in self._known:
            raise ValueError(f"job {job_id} is still in flight (not yet polled); job ids cannot be reused")
        store = direction == "store"
        src_name, dst_name = ("gpu_block_ids", "cpu_block_ids") if store else ("cpu_block_ids", "gpu_block_ids")
        src_limit, dst_limit = (
            (self.num_gpu_blocks, self.num_cpu_blocks) if store else (self.num_cpu_blocks, self.num_gpu_blocks)
        )
        # Read per job (not cached at construction) so that tests and callers can switch it off;
        # ready() imports numba on the first CPU job that needs it (~1 s once per process).
        kernel = self._kernel_safe and mover_cpu_kernel.AVAILABLE and mover_cpu_kernel.ready()
        if kernel:
            src_a, dst_a = self._id_array(job_id, src_name, src_ids), self._id_array(job_id, dst_name, dst_ids)
            _check_lengths(job_id, src_name, len(src_a), dst_name, len(dst_a))
            kernel = len(dst_a) > 0
        if kernel:
            # No planning: the kernel is one pass whatever the layout. One compiled pass checks
            # the ids and sorts the pairs by destination (which also finds duplicates), with no
            # Python work per block: measured 64 MiB of 4 KiB blocks, 0.97 of a contiguous copy
            # sorted (sort included) vs 0.78 in random order (fewer TLB misses and page walks on
            # the written side).
            try:
                src_a, dst_a = mover_cpu_kernel.pairs_by_destination(src_a, dst_a, src_limit, dst_limit)
            except mover_cpu_kernel.PairsError as exc:
                if exc.duplicate:
                    raise ValueError(f"job {job_id}: duplicate destination id {exc.value} in {dst_name}") from None
                name, limit = (src_name, src_limit) if exc.side == "src" else (dst_name, dst_limit)
                raise ValueError(f"job {job_id}: {name} contains {exc.value}, outside [0, {limit})") from None
            src, dst = torch.from_numpy(src_a), torch.from_numpy(dst_a)
            plan = _Plan(scatter_src=src, scatter_dst=dst, kernel=True)
        elif self._is_cuda:
            # No torch planning: each CUDA path plans (or not) for itself (see cuda_paths); the
            # torch planner cost the host ~30 ms for 65,536 ids, 6x an SM kernel's copy.
            src = self._ids(job_id, src_name, src_ids, src_limit)
            dst = self._ids(job_id, dst_name, dst_ids, dst_limit)
            _check_lengths(job_id, src_name, len(src), dst_name, len(dst))
            with _intra_op_threads(1):
                _check_unique(job_id, dst_name, dst)
            plan = _Plan(scatter_src=_as_tensor(src), scatter_dst=_as_tensor(dst)) if len(dst) else _Plan()
        else:
            src = self._ids(job_id, src_name, src_ids, src_limit)
            dst = self._ids(job_id, dst_name, dst_ids, dst_limit)
            _check_lengths(job_id, src_name, len(src), dst_name, len(dst))
            # Planning runs on one thread whatever the job size: its ops touch a few int64 per
            # block, far too little to share, and on a loaded box each 2-thread op can wait a time
            # slice for the other thread (measured 16384 blocks: 20 ms on 2 threads vs 3 ms on one).
            with _intra_op_threads(1):
                # Planning also rejects duplicate destinations, so it runs before the job is accepted.
                if len(dst) <= _SMALL_JOB:
                    src, dst = _as_list(src), _as_list(dst)
                    plan = _make_plan_small(src, dst, self.block_bytes, job_id, dst_name)
                else:
                    src, dst = _as_tensor(src), _as_tensor(dst)
                    plan = _make_plan(src, dst, self.block_bytes, job_id, dst_name)
        nbytes = len(dst) * self.block_bytes
        with _intra_op_threads(1 if nbytes < _PARALLEL_MIN_BYTES else None):
            self._start(job_id, direction, src, dst, nbytes, plan)

    def _start(
        self,
        job_id: int,
        direction: Direction,
        src: list[int] | torch.Tensor,
        dst: list[int] | torch.Tensor,
        nbytes: int,
        plan: _Plan,
    ) -> None:
        store = direction == "store"
        self._known.add(job_id)
        if self._fault_injector is not None and self._fault_injector(job_id, direction):
            self._ready.append(TransferResult(job_id, False, nbytes, 0.0, direction, "injected fault"))
            return
        if self._is_cuda:
            self._submit_cuda(job_id, direction, src, dst, nbytes, plan)
            return
        t0 = time.perf_counter()
        try:
            srcs, dsts = (self._gpu_rows, self._cpu_rows) if store else (self._cpu_rows, self._gpu_rows)
            self._copy_cpu(plan, srcs, dsts)
        except Exception as exc:  # torch raises RuntimeError, but any failure must not read as done
            self._ready.append(TransferResult(job_id, False, nbytes, time.perf_counter() - t0, direction, str(exc)))
            return
        self._ready.append(TransferResult(job_id, True, nbytes, time.perf_counter() - t0, direction))

    # ------------------------------------------------------------------ CPU copies

    def _staging_rows(self, rows: int, like: torch.Tensor, worker: int = 0) -> torch.Tensor:
        """A reused ``[rows, row]`` buffer shaped like ``like``'s rows, one per worker thread."""
        need = rows * like.shape[1] * like.element_size()
        while len(self._staging) <= worker:
            self._staging.append(torch.empty(0, dtype=torch.uint8))
        if self._staging[worker].numel() < need:
            self._staging[worker] = torch.empty(need, dtype=torch.uint8)
        return self._staging[worker][:need].view(like.dtype).view(rows, like.shape[1])

    def _copy_cpu(self, plan: _Plan, srcs: list[torch.Tensor], dsts: list[torch.Tensor]) -> None:
        for s, d in zip(srcs, dsts, strict=True):
            for s0, d0, n in plan.runs:
                d[d0 : d0 + n].copy_(s[s0 : s0 + n])
            for d0, sidx in plan.dst_runs:
                torch.index_select(s, 0, sidx, out=d[d0 : d0 + sidx.numel()])
            for s0, didx in plan.src_runs:
                d.index_copy_(0, didx, s[s0 : s0 + didx.numel()])
        if plan.scatter_src is not None and plan.scatter_dst is not None:
            if plan.kernel:
                self._scatter_kernel(plan.scatter_src, plan.scatter_dst, srcs, dsts)
            else:
                self._scatter_cpu(plan.scatter_src, plan.scatter_dst, srcs, dsts)

    def _run_workers(self, work: Callable[[int], None], workers: int, torch_ops: bool = True) -> None:
        """Run ``work(0)`` here and ``work(1..workers-1)`` on the pool; re-raise the first failure
        only after every worker stopped (none may still write when the job is reported).
        ``torch_ops``: the workers run torch ops, each on one intra-op thread."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=workers - 1, thread_name_prefix="kvoffload-mover")
        with _intra_op_threads(1 if torch_ops else None):
            futures = [self._pool.submit(work, w) for w in range(1, workers)]
            try:
                work(0)
            finally:
                done = [f.exception() for f in futures]
        for exc in done:
            if exc is not None:
                raise exc

    def _scatter_kernel(
        self, src_ids: torch.Tensor, dst_ids: torch.Tensor, srcs: list[torch.Tensor], dsts: list[torch.Tensor]
    ) -> None:
        """Pairs scattered on both sides, by the single-pass numba kernel (see mover_cpu_kernel).

        Big jobs split the rows in chunks over one Python thread per intra-op thread (the kernel
        releases the GIL), the scheme _scatter_cpu measured best; numba's own threading measured
        slower on a loaded box.
        """
        total = int(src_ids.numel())
        s_np, d_np = src_ids.numpy(), dst_ids.numpy()
        store = srcs is self._gpu_rows
        if store not in self._row_arrays:
            self._row_arrays[store] = ([s.detach().numpy() for s in srcs], [d.detach().numpy() for d in dsts])
        src_arr, dst_arr = self._row_arrays[store]
        workers = torch.get_num_threads()
        stream = total * self.block_bytes >= _STREAM_MIN_BYTES
        # At least _KERNEL_CHUNKS chunks for load balance, each at least _KERNEL_CHUNK_BYTES:
        # every chunk ends in a GIL handoff, which on a loaded box can wait a whole time slice.
        chunk = max(1, _KERNEL_CHUNK_BYTES // max(self.block_bytes, 1), -(-total // _KERNEL_CHUNKS))
        if workers <= 1 or total * self.block_bytes < _PARALLEL_MIN_BYTES or total <= chunk:
            for s, d in zip(src_arr, dst_arr, strict=True):
                mover_cpu_kernel.copy_rows_arrays(s, d, s_np, d_np, stream)
            return
        starts = iter(range(0, total, chunk))  # shared: next() on it is atomic under the GIL

        def work(worker: int) -> None:
            for c0 in starts:
                sidx, didx = s_np[c0 : c0 + chunk], d_np[c0 : c0 + chunk]
                for s, d in zip(src_arr, dst_arr, strict=True):
                    mover_cpu_kernel.copy_rows_arrays(s, d, sidx, didx, stream)

        self._run_workers(work, workers, torch_ops=False)

    def _scatter_cpu(
        self, src_ids: torch.Tensor, dst_ids: torch.Tensor, srcs: list[torch.Tensor], dsts: list[torch.Tensor]
    ) -> None:
        """Pairs scattered on both sides: gather rows into a staging buffer, then scatter them.

        That is two passes over the bytes (torch has no fused gather-scatter), so the passes are
        run chunk by chunk with the chunk still in cache for the second pass. Big jobs split the
        chunks over one Python thread per intra-op thread, each running single-threaded torch
        ops on its own staging buffer (torch releases the GIL): measured ~1.5-2x faster than
        one thread issuing 2-thread ops, whose every call waits for both threads, and whose
        second pass reads rows the other core's cache holds.
        """
        total = int(src_ids.numel())
        workers = torch.get_num_threads()
        if workers <= 1 or total * self.block_bytes < _PARALLEL_MIN_BYTES:
            chunk = max(1, _STAGING_BYTES // max(self.block_bytes, 1))
        else:
            chunk = max(1, _CHUNK_BYTES // max(self.block_bytes, 1))
        starts = iter(range(0, total, chunk))  # shared: next() on it is atomic under the GIL

        def work(worker: int) -> None:
            for c0 in starts:
                sidx, didx = src_ids, dst_ids
                if total > chunk:
                    sidx, didx = sidx[c0 : c0 + chunk], didx[c0 : c0 + chunk]
                for s, d in zip(srcs, dsts, strict=True):
                    tmp = self._staging_rows(int(sidx.numel()), s, worker)
                    torch.index_select(s, 0, sidx, out=tmp)
                    d.index_copy_(0, didx, tmp)

        if workers <= 1 or total <= chunk:
            work(0)
            return
        self._staging_rows(0, srcs[0], workers - 1)  # one staging buffer per worker, made here
        self._run_workers(work, workers)

    # ------------------------------------------------------------------ CUDA copies

    def _submit_cuda(
        self,
        job_id: int,
        direction: Direction,
        src: list[int] | torch.Tensor,
        dst: list[int] | torch.Tensor,
        nbytes: int,
        plan: _Plan,
    ) -> None:
        store = direction == "store"
        job = _Job(job_id, direction, nbytes, src if store else dst, dst if store else src)
        stream = self._streams[direction]
        # Recorded on the compute stream at submit: a store then reads what the model has written
        # so far, and a load never overwrites a block that kernels already queued may still read.
        compute_done = torch.cuda.current_stream(self._device).record_event()
        try:
            with torch.cuda.stream(stream):
                stream.wait_event(compute_done)
                # In-flight jobs of the other direction that touch the same blocks finish first:
                # a load must not overwrite a GPU block a store is still reading (nor a store read
                # one a load is still writing), and the same for CPU blocks. Same-direction jobs
                # share a stream, so FIFO order already holds between them.
                for prev in self._pending["load" if store else "store"]:
                    gpu_ids, cpu_ids = job.blocks()
                    prev_gpu, prev_cpu = prev.blocks()
                    if not (prev_gpu.isdisjoint(gpu_ids) and prev_cpu.isdisjoint(cpu_ids)):
                        stream.wait_event(prev.end)
                job.start = torch.cuda.Event(enable_timing=True)
                job.end = torch.cuda.Event(enable_timing=True)
                job.start.record(stream)
                self._copy_cuda(plan, store, job.keepalive, stream)
                job.end.record(stream)
        except Exception as exc:
            # The stream may hold part of this job's copies; wait for them so that the failed
            # job's destination is at least no longer being written when it is reported.
            stream.synchronize()
            self._ready.append(TransferResult(job_id, False, nbytes, 0.0, direction, str(exc)))
            return
        self._pending[direction].append(job)

    def _copy_cuda(self, plan: _Plan, store: bool, keep: list[Any], stream: Any) -> None:
        """Hand the job's pairs (unplanned: see _submit) to this direction's copy path."""
        if plan.scatter_src is None or plan.scatter_dst is None:
            return
        src, dst = plan.scatter_src, plan.scatter_dst
        gpu_ids, cpu_ids = (src, dst) if store else (dst, src)
        self._paths["store" if store else "load"].copy(store, gpu_ids, cpu_ids, stream.cuda_stream, keep)

    # ------------------------------------------------------------------ completion

    def _collect(self, block: frozenset[int]) -> None:
        """Move finished CUDA jobs to the ready list, FIFO per direction; wait for ``block`` ids."""
        for direction in ("store", "load"):
            queue = self._pending[direction]
            last = max((i for i, j in enumerate(queue) if j.job_id in block), default=-1)
            i = 0
            while queue:
                job = queue[0]
                try:
                    if i <= last:
                        job.end.synchronize()
                    elif not job.end.query():
                        break
                    seconds = job.start.elapsed_time(job.end) / 1000.0
                    result = TransferResult(job.job_id, True, job.nbytes, seconds, direction)
                except Exception as exc:  # an asynchronous CUDA error surfaces here
                    result = TransferResult(job.job_id, False, job.nbytes, 0.0, direction, str(exc))
                queue.popleft()
                job.keepalive.clear()
                self._ready.append(result)
                i += 1
