"""The CUDA copy paths of :class:`~kvoffload.dataplane.mover.BlockMover`, behind one interface.

Every path copies one job, block ``gpu_ids[i]`` <-> ``cpu_ids[i]`` of every layer, enqueued on
the caller's stream after the stream's earlier work (:meth:`CopyPath.copy`). Names are the values
of ``BlockMover(cuda_copy=...)``:

- ``naive``: one ``cuMemcpyAsync`` per block and layer (the copy engines, one descriptor each).
- ``merged``: blocks consecutive on both sides joined into one ``cuMemcpyAsync`` per run and
  layer (:func:`~kvoffload.dataplane.copy_plan.merge_runs`).
- ``batched``: the merged ranges of every layer in one ``cuMemcpyBatchAsync`` per job, through
  ``cuda.bindings`` or libcuda via ctypes (:mod:`~kvoffload.dataplane.copy_backends`).
- ``gather``: one ``index_select`` and one ``index_copy_`` kernel per layer, one side reading or
  writing the pinned tier through its CUDA view (:mod:`~kvoffload.dataplane.cuda_host`); runs on SMs.
- ``vector``: one kernel per layer that moves 16 bytes per thread from source row to destination
  row in one pass (Triton, :mod:`~kvoffload.dataplane.copy_vector_triton`), when Triton imports;
  otherwise ``index_select`` / ``index_copy_`` on 16-byte (``complex128``) elements of the rows,
  two passes like ``gather`` but 16 bytes per element (the documented fallback, see docs/mover.md).

The DMA paths (first three) take byte addresses and a :class:`~kvoffload.dataplane.copy_backends.
CopyBackend`; the SM paths take tensors. Both run on CPU tensors too (the DMA paths with
:class:`~kvoffload.dataplane.copy_backends.HostMemmove`), which is how the CPU tests check them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from kvoffload.dataplane import copy_vector_triton
from kvoffload.dataplane.copy_backends import CopyBackend
from kvoffload.dataplane.copy_plan import CopyPlan, block_plan, descriptors, merge_runs

__all__ = ["DMA_PATHS", "PATHS", "SM_PATHS", "CopyPath", "LayerRows", "make_path"]

DMA_PATHS: tuple[str, ...] = ("naive", "merged", "batched")
SM_PATHS: tuple[str, ...] = ("gather", "vector")
PATHS: tuple[str, ...] = DMA_PATHS + SM_PATHS


@dataclass(frozen=True)
class LayerRows:
    """The tensors a path copies between: per layer, the GPU rows ``[gpu_blocks, row]``, the CPU
    rows ``[cpu_blocks, row]`` and (for the SM paths) a view of the CPU rows on ``device``."""

    gpu: Sequence[torch.Tensor]
    cpu: Sequence[torch.Tensor]
    cpu_views: Sequence[torch.Tensor] | None
    device: torch.device

    def row_bytes(self) -> list[int]:
        """Bytes per block of each layer."""
        return [g.shape[1] * g.element_size() for g in self.gpu]


class CopyPath(ABC):
    """One way to move a job's blocks. ``detail`` says how it runs here (backend, kernel)."""

    name: ClassVar[str]
    uses_sms: ClassVar[bool]
    detail: str = ""

    def __init__(self, rows: LayerRows) -> None:
        self.rows = rows

    @abstractmethod
    def copy(self, store: bool, gpu_ids: torch.Tensor, cpu_ids: torch.Tensor, stream: int, keep: list[Any]) -> None:
        """Enqueue the job on ``stream`` (a ``cudaStream_t``; SM paths use torch's current stream,
        which the caller sets to the same one). ``keep`` receives every tensor that must outlive
        the copy; the caller holds it until the job's end event completed."""


class _DmaPath(CopyPath):
    uses_sms = False

    def __init__(self, rows: LayerRows, backend: CopyBackend) -> None:
        super().__init__(rows)
        self.backend = backend
        self.detail = backend.name

    def _sides(
        self, store: bool, gpu_ids: torch.Tensor, cpu_ids: torch.Tensor
    ) -> tuple[CopyPlan, list[int], list[int]]:
        """The plan in block units (offsets and sizes in blocks), and each layer's source and
        destination base address; binds the backend to this thread first."""
        self.backend.bind()
        gpu = [t.data_ptr() for t in self.rows.gpu]
        cpu = [t.data_ptr() for t in self.rows.cpu]
        if store:
            return block_plan(gpu_ids, cpu_ids, 1), gpu, cpu
        return block_plan(cpu_ids, gpu_ids, 1), cpu, gpu

    def _submit_each(self, unit: CopyPlan, src_bases: list[int], dst_bases: list[int], stream: int) -> None:
        src_l, dst_l, size_l = unit.src_offsets.tolist(), unit.dst_offsets.tolist(), unit.sizes.tolist()
        copy = self.backend.copy_async
        for rb, sb, db in zip(self.rows.row_bytes(), src_bases, dst_bases, strict=True):
            for s, d, n in zip(src_l, dst_l, size_l, strict=True):
                copy(db + d * rb, sb + s * rb, n * rb, stream)


class NaivePath(_DmaPath):
    """One copy-engine transfer per block and layer."""

    name = "naive"

    def copy(self, store: bool, gpu_ids: torch.Tensor, cpu_ids: torch.Tensor, stream: int, keep: list[Any]) -> None:
        unit, src_bases, dst_bases = self._sides(store, gpu_ids, cpu_ids)
        self._submit_each(unit, src_bases, dst_bases, stream)


class MergedPath(_DmaPath):
    """One copy-engine transfer per run of blocks consecutive on both sides, per layer."""

    name = "merged"

    def copy(self, store: bool, gpu_ids: torch.Tensor, cpu_ids: torch.Tensor, stream: int, keep: list[Any]) -> None:
        unit, src_bases, dst_bases = self._sides(store, gpu_ids, cpu_ids)
        self._submit_each(merge_runs(unit), src_bases, dst_bases, stream)


class BatchedPath(_DmaPath):
    """Every merged range of every layer in one batched copy call per job."""

    name = "batched"

    def copy(self, store: bool, gpu_ids: torch.Tensor, cpu_ids: torch.Tensor, stream: int, keep: list[Any]) -> None:
        unit, src_bases, dst_bases = self._sides(store, gpu_ids, cpu_ids)
        merged = merge_runs(unit)
        plans = [
            CopyPlan(merged.src_offsets * rb, merged.dst_offsets * rb, merged.sizes * rb)
            for rb in self.rows.row_bytes()
        ]
        batch = descriptors(plans, src_bases, dst_bases)
        keep.extend((batch.srcs, batch.dsts, batch.sizes))
        self.backend.copy_batch(batch, stream, store)


def _to_device(ids: torch.Tensor, device: torch.device, keep: list[Any]) -> torch.Tensor:
    """``ids`` on ``device``, through pinned memory so that the index upload is asynchronous."""
    if device.type != "cuda":
        return ids
    try:
        pinned = ids.pin_memory()
    except RuntimeError:  # pinning unavailable: the upload is then synchronous, still correct
        pinned = ids
    out = pinned.to(device, non_blocking=True)
    keep.extend((pinned, out))
    return out


class _SmPath(CopyPath):
    uses_sms = True

    def __init__(self, rows: LayerRows) -> None:
        if rows.cpu_views is None:
            raise ValueError(f"the {self.name} path needs CUDA views of a pinned CPU tier")
        super().__init__(rows)
        self.views: Sequence[torch.Tensor] = rows.cpu_views

    def _device_ids(
        self, gpu_ids: torch.Tensor, cpu_ids: torch.Tensor, keep: list[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.rows.device
        return _to_device(gpu_ids, device, keep), _to_device(cpu_ids, device, keep)


def _gather_scatter(
    src: torch.Tensor, sidx: torch.Tensor, dst: torch.Tensor, didx: torch.Tensor, keep: list[Any]
) -> None:
    staging = src.index_select(0, sidx)
    dst.index_copy_(0, didx, staging)
    keep.append(staging)


class GatherPath(_SmPath):
    """One gather and one scatter kernel per layer through the pinned tier's CUDA view."""

    name = "gather"
    detail = "torch index_select/index_copy_"

    def copy(self, store: bool, gpu_ids: torch.Tensor, cpu_ids: torch.Tensor, stream: int, keep: list[Any]) -> None:
        gidx, cidx = self._device_ids(gpu_ids, cpu_ids, keep)
        for g, c in zip(self.rows.gpu, self.views, strict=True):
            if store:
                _gather_scatter(g, gidx, c, cidx, keep)
            else:
                _gather_scatter(c, cidx, g, gidx, keep)


def _wide_rows(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` as 16-byte elements when its rows and start allow it, else unchanged."""
    row_bytes = rows.shape[1] * rows.element_size()
    if row_bytes % 16 or rows.data_ptr() % 16:
        return rows
    return rows.view(torch.uint8).view(torch.complex128)


class VectorPath(_SmPath):
    """One pass per layer, 16 bytes per thread (Triton), or 16-byte elements through torch."""

    name = "vector"

    def __init__(self, rows: LayerRows) -> None:
        super().__init__(rows)
        unavailable = copy_vector_triton.unavailable(rows.device)
        self.triton = unavailable is None
        self.detail = "triton" if self.triton else f"torch complex128 index ops ({unavailable})"
        if not self.triton:
            self._gpu_wide = [_wide_rows(g) for g in rows.gpu]
            self._cpu_wide = [_wide_rows(c) for c in self.views]

    def copy(self, store: bool, gpu_ids: torch.Tensor, cpu_ids: torch.Tensor, stream: int, keep: list[Any]) -> None:
        gidx, cidx = self._device_ids(gpu_ids, cpu_ids, keep)
        if self.triton:
            for g, c in zip(self.rows.gpu, self.views, strict=True):
                src, sidx, dst, didx = (g, gidx, c, cidx) if store else (c, cidx, g, gidx)
                copy_vector_triton.copy_rows(src, sidx, dst, didx)
            return
        for g, c in zip(self._gpu_wide, self._cpu_wide, strict=True):
            if store:
                _gather_scatter(g, gidx, c, cidx, keep)
            else:
                _gather_scatter(c, cidx, g, gidx, keep)


_DMA_CLASSES: dict[str, type[_DmaPath]] = {"naive": NaivePath, "merged": MergedPath, "batched": BatchedPath}
_SM_CLASSES: dict[str, type[_SmPath]] = {"gather": GatherPath, "vector": VectorPath}


def make_path(name: str, rows: LayerRows, backend: CopyBackend | None) -> CopyPath:
    """The path called ``name`` over ``rows``; ValueError when it cannot run (no backend for a DMA
    path, no CUDA view of the CPU tier for an SM path, or an unknown name)."""
    if name in _DMA_CLASSES:
        if backend is None:
            raise ValueError(f"the {name} path needs a CUDA driver backend, none loaded")
        return _DMA_CLASSES[name](rows, backend)
    if name in _SM_CLASSES:
        return _SM_CLASSES[name](rows)
    raise ValueError(f"unknown CUDA copy path {name!r}; expected one of {', '.join(PATHS)}")
