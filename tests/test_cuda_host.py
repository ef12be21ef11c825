"""CUDA views of pinned host memory (kvoffload.dataplane.cuda_host)."""

from __future__ import annotations

import pytest
import torch

from kvoffload.dataplane.cuda_host import device_view

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


def test_no_view_for_a_cpu_device_or_an_unpinned_tensor() -> None:
    host = torch.zeros(4, 8)
    assert device_view(host, torch.device("cpu")) is None
    assert device_view(host, torch.device("cuda", 0)) is None  # not pinned (and maybe no CUDA at all)


@needs_cuda
@pytest.mark.cuda
def test_view_aliases_pinned_memory_both_ways() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    host = torch.zeros(16, 32, dtype=torch.int64, pin_memory=True)
    view = device_view(host, device)
    assert view is not None
    assert (view.device, view.dtype, view.shape, view.data_ptr()) == (device, host.dtype, host.shape, host.data_ptr())
    view[3].fill_(7)  # a GPU kernel writes host memory
    torch.cuda.synchronize()
    assert host[3].eq(7).all() and host[[0, 1, 2, *range(4, 16)]].eq(0).all()
    host[5].fill_(-2)  # the host writes, a GPU kernel reads
    assert view[5].sum().item() == -64


@needs_cuda
@pytest.mark.cuda
def test_no_view_of_an_empty_or_strided_pinned_tensor() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    assert device_view(torch.zeros(0, 8, pin_memory=True), device) is None
    assert device_view(torch.zeros(8, 8, pin_memory=True).t(), device) is None
