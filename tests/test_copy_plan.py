"""copy_plan: which byte ranges a DMA path copies, merged runs, and batched-copy descriptors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvoffload.dataplane.copy_plan import CopyPlan, block_plan, descriptors, merge_runs


def byte_map(plan: CopyPlan) -> dict[int, int]:
    """Destination byte -> source byte, for every byte the plan copies (it must write each once)."""
    out: dict[int, int] = {}
    for s, d, n in zip(plan.src_offsets.tolist(), plan.dst_offsets.tolist(), plan.sizes.tolist(), strict=True):
        for k in range(n):
            assert d + k not in out, f"byte {d + k} written twice"
            out[d + k] = s + k
    return out


@st.composite
def scattered_jobs(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    """Random unique destination ids and source ids (sometimes with consecutive runs), row bytes."""
    pool = draw(st.integers(1, 48))
    n = draw(st.integers(0, pool))
    dst = draw(st.permutations(range(pool)))[:n]
    if draw(st.booleans()):
        src = draw(st.lists(st.integers(0, pool - 1), min_size=n, max_size=n))
    else:  # runs of consecutive sources against sorted destinations, pairs then shuffled
        dst, src = sorted(dst), []
        while len(src) < n:
            length, start = draw(st.integers(1, n - len(src))), draw(st.integers(0, 64))
            src += range(start, start + length)
        order = draw(st.permutations(range(n)))
        src, dst = [src[i] for i in order], [dst[i] for i in order]
    row_bytes = draw(st.sampled_from([1, 2, 3, 8, 16, 24]))
    return src, dst, row_bytes


@settings(max_examples=300, deadline=None)
@given(scattered_jobs())
def test_merged_plan_copies_exactly_the_bytes_of_the_per_block_plan(job: tuple[list[int], list[int], int]) -> None:
    src, dst, row_bytes = job
    per_block = block_plan(src, dst, row_bytes)
    merged = merge_runs(per_block)
    assert byte_map(merged) == byte_map(per_block)
    assert merged.nbytes == per_block.nbytes == len(dst) * row_bytes
    assert len(merged) <= len(per_block)
    # Maximal: no two merged ranges could be joined further.
    ends = {
        (s + n, d + n)
        for s, d, n in zip(merged.src_offsets.tolist(), merged.dst_offsets.tolist(), merged.sizes.tolist(), strict=True)
    }
    assert not any(
        (s, d) in ends for s, d in zip(merged.src_offsets.tolist(), merged.dst_offsets.tolist(), strict=True)
    )


def test_block_plan_is_one_range_per_block_in_order() -> None:
    plan = block_plan([4, 0, 7], [1, 2, 0], 16)
    assert plan.src_offsets.tolist() == [64, 0, 112]
    assert plan.dst_offsets.tolist() == [16, 32, 0]
    assert plan.sizes.tolist() == [16, 16, 16]


def test_runs_consecutive_on_both_sides_merge_and_others_do_not() -> None:
    # 3->10, 4->11, 5->12 is one run; 6->14 breaks on the destination; 9->15 on the source.
    merged = merge_runs(block_plan([3, 4, 5, 6, 9], [10, 11, 12, 14, 15], 4))
    assert list(zip(merged.src_offsets.tolist(), merged.dst_offsets.tolist(), merged.sizes.tolist(), strict=True)) == [
        (12, 40, 12),
        (24, 56, 4),
        (36, 60, 4),
    ]


def test_runs_given_out_of_order_still_merge() -> None:
    merged = merge_runs(block_plan([2, 0, 1], [7, 5, 6], 8))
    assert (merged.src_offsets.tolist(), merged.dst_offsets.tolist(), merged.sizes.tolist()) == ([0], [40], [24])


def test_bad_plans_are_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match=r"^2 source ids but 1 destination ids$"):
        block_plan([0, 1], [0], 8)
    with pytest.raises(ValueError, match=r"^row_bytes must be > 0, got 0$"):
        block_plan([0], [0], 0)


def test_descriptors_add_each_layers_base_addresses() -> None:
    unit = merge_runs(block_plan([0, 1, 5], [3, 4, 0], 1))  # (5->0, 1 block), (0->3, 2 blocks)
    layers = [CopyPlan(unit.src_offsets * rb, unit.dst_offsets * rb, unit.sizes * rb) for rb in (16, 48)]
    batch = descriptors(layers, [1000, 50_000], [2000, 90_000])
    assert len(batch) == 4
    assert batch.srcs.tolist() == [1000 + 80, 1000 + 0, 50_000 + 240, 50_000 + 0]
    assert batch.dsts.tolist() == [2000 + 0, 2000 + 48, 90_000 + 0, 90_000 + 144]
    assert batch.sizes.tolist() == [16, 32, 48, 96]
    assert all(t.dtype == torch.int64 and t.is_contiguous() for t in (batch.srcs, batch.dsts, batch.sizes))


def test_descriptors_check_the_layer_counts() -> None:
    plan = block_plan([0], [0], 8)
    with pytest.raises(ValueError, match=r"^1 plans for 2 source and 1 destination layers$"):
        descriptors([plan], [0, 8], [0])
    assert len(descriptors([], [], [])) == 0


@settings(max_examples=100, deadline=None)
@given(scattered_jobs(), st.integers(1, 3))
def test_descriptors_cover_every_byte_of_every_layer(job: tuple[list[int], list[int], int], layers: int) -> None:
    """Executed byte by byte on host buffers, the descriptors copy what the per-block plan says."""
    src, dst, row_bytes = job
    pool = max([*src, *dst], default=0) + 1
    sources = [torch.randint(0, 256, (pool * row_bytes * (k + 1),), dtype=torch.uint8) for k in range(layers)]
    targets = [torch.zeros(pool * row_bytes * (k + 1), dtype=torch.uint8) for k in range(layers)]
    merged = merge_runs(block_plan(src, dst, 1))
    plans = [
        CopyPlan(merged.src_offsets * rb, merged.dst_offsets * rb, merged.sizes * rb)
        for rb in (row_bytes * (k + 1) for k in range(layers))
    ]
    batch = descriptors(plans, [t.data_ptr() for t in sources], [t.data_ptr() for t in targets])
    by_address = {t.data_ptr(): t for t in (*sources, *targets)}
    base = sorted(by_address)
    for s, d, n in zip(batch.srcs.tolist(), batch.dsts.tolist(), batch.sizes.tolist(), strict=True):
        s_base = max(b for b in base if b <= s)
        d_base = max(b for b in base if b <= d)
        by_address[d_base][d - d_base : d - d_base + n] = by_address[s_base][s - s_base : s - s_base + n]
    for k in range(layers):
        rb = row_bytes * (k + 1)
        expect = torch.zeros_like(targets[k])
        for si, di in zip(src, dst, strict=True):
            expect[di * rb : (di + 1) * rb] = sources[k][si * rb : (si + 1) * rb]
        assert torch.equal(targets[k], expect)
