"""The numba code behind :mod:`kvoffload.dataplane.mover_cpu_kernel`, imported (with numba) only
when that module compiles it, never by ``import kvoffload``.

The functions here are plain Python until ``mover_cpu_kernel`` jits them with explicit
signatures; the three intrinsics emit LLVM instructions numba has no Python spelling for.
"""

from __future__ import annotations

import platform
from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# Status codes of pairs_by_destination (read by mover_cpu_kernel).
OK, SRC_OUT_OF_RANGE, DST_OUT_OF_RANGE, DUPLICATE_DST, NEEDS_SORT = 0, 1, 2, 3, 4
# pairs_by_destination sorts by counting (one slot per id between the smallest and largest
# destination id) when that span is at most this many times the job's length; a sparser job is
# left to numpy's argsort (measured 16384 ids: 0.13 ms, numba's argsort 0.9 ms).
COUNTING_SPAN_FACTOR = 8
# copy_rows prefetches the first lines (up to 2 KiB) of the source row this many rows ahead: a row
# starts a new page at a random address, where the hardware prefetcher has to start over. Measured
# on one thread, 64 MiB of 4 KiB blocks (2 KiB rows): 8 lines 2 rows ahead cut ~10-15% over none;
# 32 lines 4 rows ahead cut another ~9% (8 rows ahead, or interleaving two rows line by line, no
# better); for 8 KiB rows, 32 lines 4 ahead equals 8 lines 2 ahead, and the whole 8 KiB is worse.
PREFETCH_ROWS_AHEAD = 4
PREFETCH_LINES = 32
LINE = 64
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@intrinsic
def _prefetch(typingctx: Any, addr: Any) -> Any:  # pragma: no cover - compiled
    """``llvm.prefetch`` of the cache line at integer address ``addr`` (read, keep in all levels)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ptr = ir.PointerType()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ptr, i32, i32, i32]), "llvm.prefetch.p0"
        )
        builder.call(fn, [builder.inttoptr(args[0], ptr), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(types.int64), codegen


@intrinsic
def _stream_lines(typingctx: Any, dst: Any, src: Any, lines: Any) -> Any:  # pragma: no cover - compiled
    """Copy ``lines`` 64-byte lines from address ``src`` (any alignment: unaligned loads) to the
    64-byte aligned address ``dst`` with non-temporal (streaming) stores: the destination lines
    are written without first being read into the cache, a third less memory traffic than plain
    stores (glibc's memcpy does the same for large copies)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        line = ir.VectorType(ir.IntType(64), LINE // 8)
        ptr = ir.PointerType()
        d, s = builder.inttoptr(args[0], ptr), builder.inttoptr(args[1], ptr)
        nontemporal = builder.module.add_metadata([ir.IntType(32)(1)])
        with cgutils.for_range(builder, args[2]) as loop:
            value = builder.load(builder.gep(s, [loop.index], source_etype=line), typ=line, align=1)
            store = builder.store(value, builder.gep(d, [loop.index], source_etype=line), align=LINE)
            store.set_metadata("nontemporal", nontemporal)
        return context.get_dummy_value()

    return types.void(types.int64, types.int64, types.int64), codegen


@intrinsic
def _store_fence(typingctx: Any) -> Any:  # pragma: no cover - compiled
    """Streaming stores are weakly ordered, so they are fenced before the copy is reported done
    and another thread reads the rows. On x86 that takes ``sfence`` (or ``mfence``): a locked
    instruction, which LLVM emits for a seq_cst fence, is not documented to order them on every
    x86. Elsewhere a seq_cst fence (``dmb ish`` on ARM) orders every store."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        if _X86:
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse.sfence"), [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


def copy_rows(src: Any, dst: Any, src_ids: Any, dst_ids: Any, stream: bool) -> None:  # pragma: no cover - jitted
    """``dst[dst_ids[i]] = src[src_ids[i]]``; with ``stream``, by streaming stores when every
    destination row is 64-byte aligned (else plain stores)."""
    width = src.shape[1]
    row_bytes = width * src.itemsize
    n = src_ids.shape[0]
    src_addr, dst_addr = src.ctypes.data, dst.ctypes.data
    ahead_lines = min(PREFETCH_LINES, (row_bytes + LINE - 1) // LINE)
    if stream and row_bytes % LINE == 0 and dst_addr % LINE == 0:
        for i in range(n):
            if i + PREFETCH_ROWS_AHEAD < n:
                ahead = src_addr + src_ids[i + PREFETCH_ROWS_AHEAD] * row_bytes
                for k in range(ahead_lines):
                    _prefetch(ahead + k * LINE)
            _stream_lines(dst_addr + dst_ids[i] * row_bytes, src_addr + src_ids[i] * row_bytes, row_bytes // LINE)
        _store_fence()
        return
    for i in range(n):
        if i + PREFETCH_ROWS_AHEAD < n:
            ahead = src_addr + src_ids[i + PREFETCH_ROWS_AHEAD] * row_bytes
            for k in range(ahead_lines):
                _prefetch(ahead + k * LINE)
        # An explicit inner loop, not ``dst[d, :] = src[s, :]``: numba's array assignment checks
        # for overlap and goes through a generic strided loop (measured ~0.55-0.75 vs ~1.0 of a
        # contiguous copy for this loop, which LLVM turns into a vectorised copy).
        a = src[src_ids[i]]
        b = dst[dst_ids[i]]
        for j in range(width):
            b[j] = a[j]


def pairs_by_destination(src: Any, dst: Any, src_limit: int, dst_limit: int) -> Any:  # pragma: no cover - jitted
    """(status, bad id, src, dst sorted by dst); see mover_cpu_kernel.pairs_by_destination."""
    # One pass finds both sides' extremes and whether dst is already increasing (no sort, no
    # duplicate possible); otherwise a counting sort over the destination span, which also finds
    # duplicates, costs O(n + span) instead of a sort's O(n log n).
    n = dst.shape[0]
    s_lo, s_hi, d_lo, d_hi = src[0], src[0], dst[0], dst[0]
    increasing = non_decreasing = True
    for i in range(n):
        s, d = src[i], dst[i]
        s_lo, s_hi = min(s_lo, s), max(s_hi, s)
        d_lo, d_hi = min(d_lo, d), max(d_hi, d)
        if i > 0 and d <= dst[i - 1]:
            increasing = False
            non_decreasing = non_decreasing and d == dst[i - 1]
    if s_lo < 0:
        return SRC_OUT_OF_RANGE, s_lo, src, dst
    if s_hi >= src_limit:
        return SRC_OUT_OF_RANGE, s_hi, src, dst
    if d_lo < 0:
        return DST_OUT_OF_RANGE, d_lo, src, dst
    if d_hi >= dst_limit:
        return DST_OUT_OF_RANGE, d_hi, src, dst
    if increasing:
        return OK, 0, src, dst
    if non_decreasing:  # sorted with repeats: the first repeat is the smallest duplicate
        for i in range(1, n):
            if dst[i] == dst[i - 1]:
                return DUPLICATE_DST, dst[i], src, dst
    span = d_hi - d_lo + 1
    if span > COUNTING_SPAN_FACTOR * n:
        return NEEDS_SORT, 0, src, dst
    slot = np.full(span, -1, np.int64)
    duplicate = d_hi + 1
    for i in range(n):
        k = dst[i] - d_lo
        if slot[k] >= 0:
            duplicate = min(duplicate, dst[i])
        slot[k] = i
    if duplicate <= d_hi:
        return DUPLICATE_DST, duplicate, src, dst
    out_src = np.empty(n, np.int64)
    out_dst = np.empty(n, np.int64)
    j = 0
    for k in range(span):
        i = slot[k]
        if i >= 0:
            out_src[j] = src[i]
            out_dst[j] = k + d_lo
            j += 1
    return OK, 0, out_src, out_dst
