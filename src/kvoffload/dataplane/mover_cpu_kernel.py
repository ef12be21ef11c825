"""Optional single-pass CPU row copy for :class:`~kvoffload.dataplane.mover.BlockMover` (numba).

``dst[dst_ids[i]] = src[src_ids[i]]`` for every ``i``, in ONE pass over the bytes. torch has no
fused gather-scatter, so the torch path gathers into a staging buffer and then scatters it (two
passes, measured ~0.1-0.65 of a contiguous copy); this kernel reaches ~0.7-1.1 single-threaded.
Big copies prefetch the next rows and write with streaming stores, as memcpy does for a large
contiguous copy (see :mod:`kvoffload.dataplane.mover_cpu_jit`, where the compiled code lives). A
job's ids are checked and sorted by destination in one compiled pass too
(:func:`pairs_by_destination`).

numba is an optional dependency (extra ``fast-cpu``). Importing this module never imports numba:
``import kvoffload`` must stay fast for the CLI, and GPU-only users do not need it. numba is
imported and the kernel compiled (or loaded from numba's on-disk cache) on first use, by
:func:`ready`; if that fails, :data:`AVAILABLE` turns False with a warning and the mover keeps
using torch.

The kernel is serial (no ``parallel=True``): splitting the rows over the mover's own threads
(the kernel releases the GIL) measured faster than numba's threading layer on a loaded 2-core
box (~0.8-1.1 vs ~0.55-1.0 of a contiguous copy), and numba's fallback ``workqueue`` layer
aborts the process when two threads launch parallel kernels at once.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

__all__ = ["AVAILABLE", "PairsError", "copy_rows", "copy_rows_arrays", "pairs_by_destination", "ready"]


def _numba_installed() -> bool:
    # find_spec locates the package without importing it (a ~0.5 s import); it raises rather
    # than returning None for a module blocked in sys.modules or by an import hook.
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):
        return False


AVAILABLE: bool = _numba_installed()
"""True when numba is installed and (once :func:`ready` ran) the kernel compiled. The mover reads
it on every job, so setting it False (e.g. in tests) forces the torch path."""

# Row element types the mover uses (see mover._row_dtype); the kernel is compiled for each of them
# up front so that no compilation (and no warnings.catch_warnings, which is not thread-safe)
# happens later inside the mover's worker threads.
_ROW_TYPES = ("int64", "int32", "int16", "uint8")

_lock = threading.Lock()
_kernel: Callable[..., None] | None = None
_prepare: Callable[..., tuple[int, int, Any, Any]] | None = None
_tried = False

def _writable_dir(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def _set_cache_dir() -> None:
    """Point numba's cache at a user directory when it cannot write next to this module.

    numba caches compiled code in ``__pycache__`` beside the source; in a read-only install it
    would warn or fail at every start. The variable is only set when the user has not set it,
    and before numba is imported (numba reads it once, at import).
    """
    if os.environ.get("NUMBA_CACHE_DIR") or _writable_dir(Path(__file__).parent / "__pycache__"):
        return
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    target = base / "kvoffload" / "numba"
    if _writable_dir(target):
        os.environ["NUMBA_CACHE_DIR"] = str(target)


def _jit(fn: Callable[..., Any], sigs: list[str]) -> Callable[..., Any]:
    import numba
    from numba.core.errors import NumbaWarning

    with warnings.catch_warnings():
        # A cache that cannot be written (e.g. a full disk) only costs a recompile next start.
        warnings.simplefilter("ignore", NumbaWarning)
        try:
            return numba.njit(sigs, cache=True, nogil=True, boundscheck=False)(fn)  # type: ignore[no-any-return]
        except RuntimeError:  # "cannot cache function ... no locator available"
            return numba.njit(sigs, cache=False, nogil=True, boundscheck=False)(fn)  # type: ignore[no-any-return]


def _compile() -> tuple[Callable[..., None], Callable[..., tuple[int, int, Any, Any]]]:
    _set_cache_dir()
    from kvoffload.dataplane import mover_cpu_jit

    rows = [f"void({t}[:, ::1], {t}[:, ::1], int64[::1], int64[::1], boolean)" for t in _ROW_TYPES]
    kernel = _jit(mover_cpu_jit.copy_rows, rows)
    prepare = _jit(
        mover_cpu_jit.pairs_by_destination,
        ["Tuple((int64, int64, int64[::1], int64[::1]))(int64[::1], int64[::1], int64, int64)"],
    )
    return kernel, prepare


def ready() -> bool:
    """Import numba and compile the kernel (from numba's disk cache when warm) on first call.

    Returns :data:`AVAILABLE`. Costs ~0.5-1 s the first time in a process (numba import and
    cache load; a few seconds more when the cache is cold), nothing afterwards. A failure (numba
    installed but broken) warns once and makes :data:`AVAILABLE` False.
    """
    global AVAILABLE, _kernel, _prepare, _tried
    if _kernel is not None or not AVAILABLE:
        return AVAILABLE and _kernel is not None
    with _lock:
        if not _tried:
            _tried = True
            try:
                _kernel, _prepare = _compile()
            except Exception as exc:  # any numba/llvmlite failure: torch still copies correctly
                warnings.warn(
                    f"numba kernel for CPU block copies unavailable ({type(exc).__name__}: {exc}); "
                    "using the slower torch path",
                    RuntimeWarning,
                    stacklevel=2,
                )
                AVAILABLE = False
    return AVAILABLE and _kernel is not None


class PairsError(ValueError):
    """Ids rejected by :func:`pairs_by_destination`.

    ``side`` is ``"src"`` or ``"dst"``, ``value`` the offending id; ``duplicate`` tells a repeated
    destination id from an id out of range.
    """

    def __init__(self, side: str, value: int, duplicate: bool) -> None:
        what = "duplicate destination id" if duplicate else f"{side} id out of range"
        super().__init__(f"{what}: {value}")
        self.side, self.value, self.duplicate = side, value, duplicate


def pairs_by_destination(
    src: np.ndarray, dst: np.ndarray, src_limit: int, dst_limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """Check a job's (src, dst) id pairs and return them sorted by destination id.

    ``src``/``dst``: C-contiguous int64 arrays of the same, non-zero length. One compiled pass:
    ids must lie in ``[0, src_limit)`` and ``[0, dst_limit)`` (for an id out of range the smallest
    negative one, else the largest, is reported, source first) and destination ids must be unique
    (the smallest repeated one is reported). Already increasing destinations come back as they
    are, otherwise as new arrays (counting sort over the id span, or numpy's argsort when the
    span is sparse).
    Releases the GIL.

    Raises:
        PairsError: an id out of range or a duplicate destination id; nothing else is done.
        RuntimeError: the kernel is not available (see :func:`ready`).
    """
    if _prepare is None and not ready():
        raise RuntimeError("numba CPU copy kernel is not available")
    assert _prepare is not None
    import numpy

    from kvoffload.dataplane import mover_cpu_jit as jit

    status, value, out_src, out_dst = _prepare(src, dst, src_limit, dst_limit)
    if status == jit.NEEDS_SORT:  # ids checked; sorted, the pass only looks for a repeat
        order = numpy.argsort(dst)
        status, value, out_src, out_dst = _prepare(src[order], dst[order], src_limit, dst_limit)
    if status != jit.OK:
        raise PairsError("src" if status == jit.SRC_OUT_OF_RANGE else "dst", int(value), status == jit.DUPLICATE_DST)
    return out_src, out_dst


def copy_rows_arrays(
    src: np.ndarray, dst: np.ndarray, src_ids: np.ndarray, dst_ids: np.ndarray, stream: bool = False
) -> None:
    """``dst[dst_ids[i]] = src[src_ids[i]]`` on numpy arrays, unchecked (the mover's fast path).

    ``src``/``dst``: C-contiguous 2-D arrays of one of int64/int32/int16/uint8, same width;
    ids: C-contiguous int64, same length, all in range, ``dst_ids`` unique when called from
    several threads. Out-of-range ids corrupt memory: there is no bounds check. Releases the GIL.
    ``stream``: write with non-temporal stores (bypassing the cache) when the destination rows
    are 64-byte aligned; for copies too big to stay in cache, whose destination is not read soon.
    Raises RuntimeError if the kernel is not available (see :func:`ready`).
    """
    kernel = _kernel
    if kernel is None:
        if not ready():
            raise RuntimeError("numba CPU copy kernel is not available")
        kernel = _kernel
        assert kernel is not None
    kernel(src, dst, src_ids, dst_ids, stream)


def copy_rows(src_rows: torch.Tensor, dst_rows: torch.Tensor, src_ids: torch.Tensor, dst_ids: torch.Tensor) -> None:
    """Copy row ``src_ids[i]`` of ``src_rows`` to row ``dst_ids[i]`` of ``dst_rows``, in one pass.

    Args:
        src_rows: contiguous 2-D CPU tensor of int64/int32/int16/uint8 (e.g. a layer viewed as
            integer rows); read through a zero-copy numpy view.
        dst_rows: like ``src_rows``, same dtype and row width; written in place.
        src_ids: 1-D integer ids into ``src_rows``.
        dst_ids: 1-D integer ids into ``dst_rows``, as many as ``src_ids``. With duplicates the
            last pair wins.

    Raises:
        RuntimeError: numba is not available.
        TypeError, ValueError: bad dtypes, shapes, devices or ids out of range.
    """
    import torch

    for name, t in (("src_rows", src_rows), ("dst_rows", dst_rows)):
        if t.device.type != "cpu" or t.dim() != 2 or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous 2-D CPU tensor, got {t.device} {tuple(t.shape)}")
        if str(t.dtype).removeprefix("torch.") not in _ROW_TYPES:
            raise TypeError(f"{name} has dtype {t.dtype}; expected one of {', '.join(_ROW_TYPES)}")
    if src_rows.dtype != dst_rows.dtype or src_rows.shape[1] != dst_rows.shape[1]:
        raise ValueError(
            f"row mismatch: src {src_rows.dtype} x {src_rows.shape[1]}, dst {dst_rows.dtype} x {dst_rows.shape[1]}"
        )
    ids = []
    for name, t, limit in (("src_ids", src_ids, src_rows.shape[0]), ("dst_ids", dst_ids, dst_rows.shape[0])):
        if t.dim() != 1 or t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise TypeError(f"{name} must be a 1-D integer tensor, got {t.dtype} {tuple(t.shape)}")
        t = t.detach().to("cpu", torch.int64).contiguous()
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= limit):
            raise ValueError(f"{name} has ids outside [0, {limit})")
        ids.append(t)
    if ids[0].numel() != ids[1].numel():
        raise ValueError(f"src_ids has {ids[0].numel()} ids but dst_ids has {ids[1].numel()}")
    copy_rows_arrays(src_rows.detach().numpy(), dst_rows.detach().numpy(), ids[0].numpy(), ids[1].numpy())
