"""Byte ranges of a block copy: the plans the DMA copy paths submit (see :mod:`cuda_paths`).

A job moves block ``src_ids[i]`` to block ``dst_ids[i]`` in every layer. In one layer of
``row_bytes`` bytes per block that is one byte range per block (:func:`block_plan`, the naive
path's plan); blocks consecutive on both sides make one longer range (:func:`merge_runs`, the
merged and batched paths' plan). :func:`descriptors` turns the plans of every layer into the three
address arrays that one batched-copy call takes. Pure torch on the CPU, so every step is tested
without a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["CopyPlan", "Descriptors", "block_plan", "descriptors", "merge_runs"]


@dataclass(frozen=True)
class CopyPlan:
    """Byte ranges of one layer's copy: range ``i`` is ``sizes[i]`` bytes from byte
    ``src_offsets[i]`` of the source layer to byte ``dst_offsets[i]`` of the destination layer.
    Three 1-D int64 CPU tensors of one length."""

    src_offsets: torch.Tensor
    dst_offsets: torch.Tensor
    sizes: torch.Tensor

    def __len__(self) -> int:
        return int(self.sizes.numel())

    @property
    def nbytes(self) -> int:
        """Bytes the plan copies."""
        return int(self.sizes.sum())


@dataclass(frozen=True)
class Descriptors:
    """One batched copy: ``sizes[i]`` bytes from address ``srcs[i]`` to address ``dsts[i]``
    (1-D int64 CPU tensors, contiguous, so their storage can be handed to the driver as
    ``CUdeviceptr*`` / ``size_t*`` arrays)."""

    srcs: torch.Tensor
    dsts: torch.Tensor
    sizes: torch.Tensor

    def __len__(self) -> int:
        return int(self.sizes.numel())


def _ids(ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(ids, dtype=torch.int64).reshape(-1)


def block_plan(
    src_ids: Sequence[int] | torch.Tensor, dst_ids: Sequence[int] | torch.Tensor, row_bytes: int
) -> CopyPlan:
    """One range per block, in the order given; ValueError when the id lists differ in length or
    ``row_bytes`` is not positive."""
    src, dst = _ids(src_ids), _ids(dst_ids)
    if src.numel() != dst.numel():
        raise ValueError(f"{src.numel()} source ids but {dst.numel()} destination ids")
    if row_bytes <= 0:
        raise ValueError(f"row_bytes must be > 0, got {row_bytes}")
    return CopyPlan(src * row_bytes, dst * row_bytes, torch.full_like(src, row_bytes))


def merge_runs(plan: CopyPlan) -> CopyPlan:
    """The same bytes in fewer ranges: sorted by destination, each range that starts where the
    previous one ended on both sides is joined to it. Destinations must not overlap (a job never
    writes a block twice), so the order of the ranges does not matter."""
    n = len(plan)
    if n < 2:
        return plan
    dst, order = torch.sort(plan.dst_offsets)
    src, sizes = plan.src_offsets[order], plan.sizes[order]
    ends_src, ends_dst = src[:-1] + sizes[:-1], dst[:-1] + sizes[:-1]
    starts_run = torch.ones(n, dtype=torch.bool)
    starts_run[1:] = (src[1:] != ends_src) | (dst[1:] != ends_dst)
    first = starts_run.nonzero().flatten()
    # Bytes per run: differences of the running total taken at each run's first range.
    total = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(sizes, 0)])
    bounds = torch.cat([first, torch.tensor([n])])
    return CopyPlan(src[first], dst[first], total[bounds[1:]] - total[bounds[:-1]])


def descriptors(plans: Sequence[CopyPlan], src_bases: Sequence[int], dst_bases: Sequence[int]) -> Descriptors:
    """Absolute addresses of every range of every layer: ``plans[k]`` against layer ``k``'s base
    addresses (its tensors' ``data_ptr()``), layers one after the other."""
    if not len(plans) == len(src_bases) == len(dst_bases):
        raise ValueError(f"{len(plans)} plans for {len(src_bases)} source and {len(dst_bases)} destination layers")
    if not plans:
        empty = torch.empty(0, dtype=torch.int64)
        return Descriptors(empty, empty, empty)
    srcs = torch.cat([p.src_offsets + base for p, base in zip(plans, src_bases, strict=True)])
    dsts = torch.cat([p.dst_offsets + base for p, base in zip(plans, dst_bases, strict=True)])
    sizes = torch.cat([p.sizes for p in plans])
    return Descriptors(srcs.contiguous(), dsts.contiguous(), sizes.contiguous())
