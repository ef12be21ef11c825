"""The CPU pool KVOffloadSpec shares between its worker and its scheduler-side tier I/O (no vLLM):
bytes the worker writes are the bytes the scheduler side reads and the other way round, a pool is
never created over an existing file, and a file that is not a pool is refused with one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kvoffload.vllm.settings import ConfigError
from kvoffload.vllm.spec.shared_pool import create_pool, open_pool, pool_path
from kvoffload.vllm.tier_io import LayerChunks

PAGES = [96, 4100, 32]
ROWS = 6


def test_both_sides_see_the_same_bytes(tmp_path: Path) -> None:
    path = str(tmp_path / "pool")
    worker = create_pool(path, PAGES, ROWS)
    scheduler = open_pool(path)
    assert [tuple(layer.shape) for layer in scheduler.layers] == [(ROWS, page) for page in PAGES]
    for index, layer in enumerate(worker.layers):
        seeded = torch.Generator().manual_seed(index)
        layer.copy_(torch.randint(-128, 128, layer.shape, dtype=torch.int8, generator=seeded))
    for written, read in zip(worker.layers, scheduler.layers, strict=True):
        assert torch.equal(written, read)
    # A chunk of two rows gathered on the scheduler side and scattered into another chunk lands
    # in the worker's rows.
    chunks = LayerChunks(scheduler.layers, 2)
    chunks.scatter(2, chunks.chunk_view(0))
    for layer in worker.layers:
        assert torch.equal(layer[4:6], layer[0:2])
    scheduler.unlink()
    assert not Path(path).exists()
    worker.unlink()


def test_a_pool_is_never_created_over_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "pool"
    path.write_bytes(b"someone else's")
    with pytest.raises(ConfigError, match=r"cannot create the shared CPU pool .*File exists"):
        create_pool(str(path), PAGES, ROWS)
    assert path.read_bytes() == b"someone else's"


@pytest.mark.parametrize("content", [b"x" * 8192, b""])
def test_a_file_that_is_not_a_pool_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "pool"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=f"{path} is not a kvoffload CPU pool"):
        open_pool(str(path))


def test_a_missing_pool_names_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "absent")
    with pytest.raises(ConfigError, match=f"shared CPU pool {path} cannot be opened"):
        open_pool(path)


def test_a_resized_pool_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "pool")
    create_pool(path, PAGES, ROWS)
    with open(path, "r+b") as pool_file:
        pool_file.truncate(8192)
    with pytest.raises(ConfigError, match="its header describes another size"):
        open_pool(path)


def test_pool_names_carry_engine_and_rank() -> None:
    assert pool_path("a/b c", 1).endswith("kvoffload-pool-a_b_c-rank1")
    assert pool_path("e", 0) != pool_path("e", 1)


def test_a_pool_larger_than_its_filesystem_is_refused_at_creation(tmp_path: Path) -> None:
    path = tmp_path / "pool"
    with pytest.raises(ConfigError, match=r"cannot reserve \d+ bytes for the shared CPU pool .*lower num_cpu_blocks"):
        create_pool(str(path), [1 << 20], 1 << 30)
    assert not path.exists()


def test_the_scheduler_side_reads_the_groups_kinds_the_worker_found(tmp_path: Path) -> None:
    path = str(tmp_path / "pool")
    kinds = ("sliding_window=64", "full")
    create_pool(path, PAGES, ROWS, kinds)
    assert open_pool(path).group_kinds == kinds
