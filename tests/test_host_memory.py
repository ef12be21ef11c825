"""host_memory: huge-page CPU tensors where THP is offered, plain torch.empty where not; the mover's
CPU tier on either lands every byte where it must."""

from __future__ import annotations

import gc
import mmap
from pathlib import Path

import pytest
import torch

from kvoffload.dataplane import host_memory
from kvoffload.dataplane.mover import BlockMover

MIB = 1 << 20
needs_thp = pytest.mark.skipif(
    not host_memory.huge_pages_available(),
    reason=f"transparent huge pages not offered here (mode {host_memory.thp_mode()!r})",
)


def thp_eligible(address: int) -> bool | None:
    """The ``THPeligible`` flag of this process's mapping holding ``address`` (None: not found)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=1)[0]
        if "-" in head and not head.endswith(":"):
            start, stop = (int(x, 16) for x in head.split("-"))
            inside = start <= address < stop
        elif inside and head == "THPeligible:":
            return line.split()[1] == "1"
    return None


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("always [madvise] never\n", "madvise"),
        ("[always] madvise never", "always"),
        ("always madvise [never]", "never"),
    ],
)
def test_thp_mode_reads_the_bracketed_mode(tmp_path: Path, text: str, mode: str) -> None:
    path = tmp_path / "enabled"
    path.write_text(text)
    assert host_memory.thp_mode(path) == mode


def test_thp_mode_unknown_without_the_file_or_brackets(tmp_path: Path) -> None:
    assert host_memory.thp_mode(tmp_path / "missing") is None
    (tmp_path / "odd").write_text("always madvise never")
    assert host_memory.thp_mode(tmp_path / "odd") is None


@needs_thp
def test_huge_tensor_is_aligned_advised_and_holds_its_bytes() -> None:
    t = host_memory.empty((3 * MIB + 512, 2), torch.float16)  # 2 huge pages and a bit
    assert t.shape == (3 * MIB + 512, 2) and t.dtype == torch.float16 and t.is_contiguous()
    assert t.data_ptr() % host_memory.HUGE_PAGE_BYTES == 0
    assert thp_eligible(t.data_ptr()) is True
    assert thp_eligible(t.data_ptr() + t.numel() * 2 - 1) is True
    values = torch.arange(t.numel(), dtype=torch.int32).remainder(2039).to(torch.float16).view(t.shape)
    t.copy_(values)
    assert torch.equal(t, values)


def test_fallback_is_plain_torch_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """THP off (or unknown): no mapping is made, the tensor is an ordinary one with its bytes."""

    def no_mapping(*args: object, **kwargs: object) -> None:
        raise AssertionError("mmap called although THP is off")

    monkeypatch.setattr(host_memory, "thp_mode", lambda path=host_memory.THP_ENABLED: "never")
    monkeypatch.setattr(mmap, "mmap", no_mapping)
    assert not host_memory.huge_pages_available()
    t = host_memory.empty((4 * MIB,), torch.uint8)
    t.fill_(7)
    assert t.shape == (4 * MIB,) and int(t.sum()) == 7 * 4 * MIB
    monkeypatch.setattr(host_memory, "thp_mode", lambda path=host_memory.THP_ENABLED: None)
    assert host_memory.empty((2, 3), torch.float32).shape == (2, 3)


def test_small_or_unrequested_tensors_are_not_mapped(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_mapping(*args: object, **kwargs: object) -> None:
        raise AssertionError("mmap called for a tensor that gets no huge page")

    monkeypatch.setattr(mmap, "mmap", no_mapping)
    assert host_memory.empty((MIB,), torch.uint8).numel() == MIB  # under one huge page
    assert host_memory.empty((8 * MIB,), torch.uint8, huge_pages=False).numel() == 8 * MIB


def test_a_mapping_lives_as_long_as_a_view_of_it() -> None:
    view = host_memory.empty((4 * MIB,), torch.uint8)[MIB:]
    view.fill_(3)
    gc.collect()
    assert int(view[-1]) == 3 and int(view.sum()) == 3 * 3 * MIB


@pytest.mark.parametrize("thp", [pytest.param(True, marks=needs_thp), False])
def test_mover_cpu_tier_on_either_page_size_lands_every_byte(thp: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not thp:  # the fallback: THP off, so no mapping may be made

        def no_mapping(*args: object, **kwargs: object) -> None:
            raise AssertionError("mmap called although THP is off")

        monkeypatch.setattr(host_memory, "thp_mode", lambda path=host_memory.THP_ENABLED: "never")
        monkeypatch.setattr(mmap, "mmap", no_mapping)
    blocks, row = 2048, 1024  # 2 layers x 2 MiB tiers: big enough for huge pages
    gen = torch.Generator().manual_seed(5)
    gpu = [torch.randint(-(2**15), 2**15, (blocks, row // 2), dtype=torch.int16, generator=gen) for _ in range(2)]
    m = BlockMover(gpu, blocks)
    if thp:
        assert all(thp_eligible(c.data_ptr()) for c in m.cpu_layers)
    src = torch.randperm(blocks, generator=gen)[:1500]
    dst = torch.randperm(blocks, generator=gen)[:1500]
    m.store(1, src, dst)
    m.wait([1])
    assert [r.ok for r in m.poll()] == [True]
    for g, c in zip(gpu, m.cpu_layers, strict=True):
        assert torch.equal(c[dst], g[src])
    back = [torch.zeros_like(g) for g in gpu]
    m2 = BlockMover(back, blocks, cpu_layers=m.cpu_layers)
    m2.load(2, dst, src)
    m2.wait([2])
    assert [r.ok for r in m2.poll()] == [True]
    for g, b in zip(gpu, back, strict=True):
        assert torch.equal(b[src], g[src])
    m.close()
    m2.close()


def test_no_madv_hugepage_constant_means_no_huge_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_memory, "thp_mode", lambda path=host_memory.THP_ENABLED: "always")
    monkeypatch.delattr(mmap, "MADV_HUGEPAGE", raising=False)
    assert not host_memory.huge_pages_available()
    assert host_memory.empty((4 * MIB,), torch.uint8).numel() == 4 * MIB


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="mmap.MADV_HUGEPAGE exists on Linux only")
def test_refused_advice_still_gives_a_working_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel built without THP answers madvise with EINVAL: the mapping stays, on small pages."""
    advised: list[int] = []

    class RefusingMapping(mmap.mmap):
        def madvise(self, option: int, start: int = 0, length: int = 0) -> None:
            advised.append(option)
            raise OSError(22, "Invalid argument")

    monkeypatch.setattr(host_memory, "thp_mode", lambda path=host_memory.THP_ENABLED: "madvise")
    monkeypatch.setattr(mmap, "mmap", RefusingMapping)
    t = host_memory.empty((MIB, 3), torch.int32)
    assert advised == [mmap.MADV_HUGEPAGE]
    t.copy_(torch.arange(3 * MIB, dtype=torch.int32).view(MIB, 3))
    assert int(t[-1, -1]) == 3 * MIB - 1 and t.data_ptr() % host_memory.HUGE_PAGE_BYTES == 0
