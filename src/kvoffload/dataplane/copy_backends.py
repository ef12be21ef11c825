"""Who submits a DMA copy path's byte ranges: the CUDA driver, or a host stand-in for tests.

A backend has two calls: :meth:`copy_async` (one range, ``cuMemcpyAsync``) and
:meth:`copy_batch` (every range of a job in one ``cuMemcpyBatchAsync``, CUDA 12.8 and later).
Addresses are plain integers: with unified virtual addressing a pinned host pointer and a device
pointer are both valid ``CUdeviceptr`` values and the driver infers the direction.

- :class:`DriverBindings`: ``cuda.bindings.driver`` (NVIDIA's cuda-python), when importable.
- :class:`DriverCtypes`: ``libcuda.so.1`` through ctypes; every CUDA machine has it, so no
  package is needed. ``cuMemcpyBatchAsync`` is looked up as ``cuMemcpyBatchAsync_v2`` (CUDA 13
  ABI, no ``failIdx``) and then ``cuMemcpyBatchAsync`` (the CUDA 12.8 ABI, with ``failIdx``).
- :class:`HostMemmove`: runs each range at once with ``ctypes.memmove`` on CPU memory; the CPU
  tests drive the DMA paths through it, and a failing one through a subclass.

:func:`driver_backends` returns the driver backends that load, with the reason each other one
did not; :func:`probe_batch` checks that a backend's batched copy really moves
bytes before a mover relies on it.
"""

from __future__ import annotations

import ctypes
import importlib
from typing import Any, Protocol

import torch

from kvoffload.dataplane.copy_plan import Descriptors

__all__ = ["CopyBackend", "DriverBindings", "DriverCtypes", "HostMemmove", "driver_backends", "probe_batch"]

# Enum values from cuda.h (CUDA 12.8+): CU_MEMCPY_SRC_ACCESS_ORDER_STREAM, CU_MEM_LOCATION_TYPE_*,
# CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE.
_ORDER_STREAM = 1
_LOCATION_DEVICE = 1
_LOCATION_HOST = 2
_PREFER_OVERLAP = 1
_BATCH_MIN_DRIVER = 12080


class CopyBackend(Protocol):
    """Submits asynchronous byte copies on a stream (a ``cudaStream_t`` as an int; 0 on the host)."""

    name: str

    def bind(self) -> None:
        """Make the device's context current on this thread (once per job, before its copies):
        a job may be submitted from a thread where torch never made it current."""
        ...

    def copy_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """Copy ``nbytes`` from address ``src`` to ``dst`` after the stream's earlier work."""
        ...

    def copy_batch(self, batch: Descriptors, stream: int, store: bool) -> None:
        """Copy every range of ``batch`` in one call; ``store``: device to host, else host to device."""
        ...


class HostMemmove:
    """Copies on the host at once (``ctypes.memmove``): the DMA paths' logic on CPU tensors."""

    name = "host-memmove"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []  # ("async" | "batch", ranges), for the tests

    def bind(self) -> None:
        self.calls.append(("bind", 0))

    def copy_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self.calls.append(("async", 1))
        ctypes.memmove(dst, src, nbytes)

    def copy_batch(self, batch: Descriptors, stream: int, store: bool) -> None:
        self.calls.append(("batch", len(batch)))
        for d, s, n in zip(batch.dsts.tolist(), batch.srcs.tolist(), batch.sizes.tolist(), strict=True):
            ctypes.memmove(d, s, n)


class _CUmemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _CUmemcpyAttributes(ctypes.Structure):
    _fields_ = [
        ("srcAccessOrder", ctypes.c_int),
        ("srcLocHint", _CUmemLocation),
        ("dstLocHint", _CUmemLocation),
        ("flags", ctypes.c_uint),
    ]


def _attributes(store: bool, device: int) -> _CUmemcpyAttributes:
    dev, host = _CUmemLocation(_LOCATION_DEVICE, device), _CUmemLocation(_LOCATION_HOST, 0)
    src, dst = (dev, host) if store else (host, dev)
    return _CUmemcpyAttributes(_ORDER_STREAM, src, dst, _PREFER_OVERLAP)


class DriverCtypes:
    """The CUDA driver (``libcuda.so.1``) through ctypes. OSError when the library is missing."""

    name = "ctypes-libcuda"

    def __init__(self, device: int = 0) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        self._device = device
        self._check(lib.cuInit(0), "cuInit")
        version = ctypes.c_int()
        self._check(lib.cuDriverGetVersion(ctypes.byref(version)), "cuDriverGetVersion")
        self.driver_version = version.value
        self._lib = lib
        # torch runs on the device's primary context; retained here, made current per job.
        handle = ctypes.c_int()
        self._check(lib.cuDeviceGet(ctypes.byref(handle), device), "cuDeviceGet")
        self._context = ctypes.c_void_p()
        self._check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self._context), handle), "cuDevicePrimaryCtxRetain")
        lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        self._memcpy = lib.cuMemcpyAsync
        self._memcpy.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
        self._batch: Any = None
        self._batch_fail_idx = False
        self.batch_symbol: str | None = None
        if version.value >= _BATCH_MIN_DRIVER:
            for symbol, fail_idx in (("cuMemcpyBatchAsync_v2", False), ("cuMemcpyBatchAsync", True)):
                fn = getattr(lib, symbol, None)
                if fn is not None:
                    self._batch, self._batch_fail_idx, self.batch_symbol = fn, fail_idx, symbol
                    break

    def _check(self, code: int, call: str) -> None:
        if code != 0:
            raise RuntimeError(f"{call} failed: CUDA driver error {code} ({self._error_name(code)})")

    def _error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        lib = getattr(self, "_lib", None)
        if lib is None or lib.cuGetErrorName(code, ctypes.byref(name)) != 0 or name.value is None:
            return "unknown"
        return name.value.decode()

    def bind(self) -> None:
        self._check(self._lib.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")

    def copy_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._check(self._memcpy(dst, src, nbytes, stream), "cuMemcpyAsync")

    def copy_batch(self, batch: Descriptors, stream: int, store: bool) -> None:
        if self._batch is None:
            raise RuntimeError(f"cuMemcpyBatchAsync needs a CUDA 12.8+ driver, this one is {self.driver_version}")
        n = len(batch)
        if n == 0:
            return
        ptr = ctypes.c_void_p
        attrs = _attributes(store, self._device)
        zero = ctypes.c_size_t(0)
        args: list[Any] = [
            ptr(batch.dsts.data_ptr()),
            ptr(batch.srcs.data_ptr()),
            ptr(batch.sizes.data_ptr()),
            ctypes.c_size_t(n),
            ctypes.byref(attrs),
            ctypes.byref(zero),
            ctypes.c_size_t(1),
        ]
        fail_idx = ctypes.c_size_t(0)
        if self._batch_fail_idx:
            args.append(ctypes.byref(fail_idx))
        args.append(ptr(stream))
        code = self._batch(*args)
        if code != 0:
            where = f" at copy {fail_idx.value}" if self._batch_fail_idx else ""
            raise RuntimeError(
                f"{self.batch_symbol} failed{where}: CUDA driver error {code} ({self._error_name(code)})"
            )


class DriverBindings:
    """The CUDA driver through ``cuda.bindings.driver``. ImportError when it is not installed."""

    name = "cuda.bindings"

    def __init__(self, device: int = 0) -> None:
        self._driver = importlib.import_module("cuda.bindings.driver")
        self._device = device
        self._check(self._driver.cuInit(0), "cuInit")
        err, handle = self._driver.cuDeviceGet(device)
        self._check((err,), "cuDeviceGet")
        err, self._context = self._driver.cuDevicePrimaryCtxRetain(handle)
        self._check((err,), "cuDevicePrimaryCtxRetain")

    def bind(self) -> None:
        self._check(self._driver.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")

    def _check(self, result: Any, call: str) -> None:
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != 0:
            raise RuntimeError(f"{call} failed: {err}")

    def copy_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        drv = self._driver
        self._check(drv.cuMemcpyAsync(dst, src, nbytes, drv.CUstream(stream)), "cuMemcpyAsync")

    def copy_batch(self, batch: Descriptors, stream: int, store: bool) -> None:
        drv = self._driver
        n = len(batch)
        if n == 0:
            return
        attrs = drv.CUmemcpyAttributes()
        attrs.srcAccessOrder = drv.CUmemcpySrcAccessOrder(_ORDER_STREAM)
        dev, host = drv.CUmemLocation(), drv.CUmemLocation()
        dev.type, dev.id = drv.CUmemLocationType(_LOCATION_DEVICE), self._device
        host.type, host.id = drv.CUmemLocationType(_LOCATION_HOST), 0
        attrs.srcLocHint, attrs.dstLocHint = (dev, host) if store else (host, dev)
        attrs.flags = _PREFER_OVERLAP
        result = drv.cuMemcpyBatchAsync(
            batch.dsts.tolist(), batch.srcs.tolist(), batch.sizes.tolist(), n, [attrs], [0], 1, drv.CUstream(stream)
        )
        self._check(result, "cuMemcpyBatchAsync")


def driver_backends(device: int) -> tuple[list[CopyBackend], list[str]]:
    """The driver backends that load, in order of preference (cuda.bindings, then ctypes), and
    why each other one did not."""
    loaded: list[CopyBackend] = []
    reasons: list[str] = []
    for cls in (DriverBindings, DriverCtypes):
        try:
            loaded.append(cls(device))
        except (ImportError, OSError, RuntimeError, AttributeError) as exc:
            reasons.append(f"{cls.name}: {exc}")
    return loaded, reasons


def probe_batch(backend: CopyBackend, device: torch.device) -> str | None:
    """None when one batched copy of 4 KiB host->device and back returns the bytes, else why not.

    Run once per mover: a driver that exports the call with another ABI would otherwise fail (or
    copy garbage) on the first real job."""
    try:
        host = torch.arange(4096, dtype=torch.uint8).pin_memory()
        back = torch.zeros(4096, dtype=torch.uint8).pin_memory()
        dev = torch.empty(4096, dtype=torch.uint8, device=device)
        stream = torch.cuda.Stream(device=device)
        one = torch.tensor([4096], dtype=torch.int64)
        backend.bind()
        for store, src, dst in ((False, host, dev), (True, dev, back)):
            batch = Descriptors(torch.tensor([src.data_ptr()]), torch.tensor([dst.data_ptr()]), one)
            backend.copy_batch(batch, stream.cuda_stream, store)
            stream.synchronize()
    except (RuntimeError, TypeError, AttributeError, ValueError) as exc:
        return f"{backend.name}: {exc}"
    return None if torch.equal(host, back) else f"{backend.name}: the probe copy returned other bytes"
