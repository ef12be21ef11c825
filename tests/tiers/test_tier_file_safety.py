"""What a FileTier refuses at open (one line naming the file and what is wrong, nothing left
behind) and what it guarantees afterwards: a lock per file, a header naming model, layout, rank
and chunk size, a tier that starts empty after a restart, sizes the disk can hold, and chunks of
the CPU block's size only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvoffload.tiers.driver import TierDriver
from kvoffload.tiers.file_tier import FileTier
from kvoffload.tiers.index import LocalTierIndex
from kvoffload.tiers.protocol import CORRUPT, FAULT, OK, TierConfigError, TierJob
from kvoffload.tiers.record import Namespace
from kvoffload_lab.sim.tiered.bytes_worker import ByteModelWorker

CHUNK = 8192


def payload(seed: int, size: int = CHUNK) -> memoryview:
    return memoryview(bytes((seed * 17 + i) & 0xFF for i in range(size)))


def job(keys: tuple[int, ...], slots: tuple[int, ...]) -> TierJob:
    return TierJob(1, "cascade", "file", "r", keys, tuple(range(len(keys))), slots)


def test_a_second_tier_on_one_file_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    path = str(tmp_path / "one.tier")
    first = FileTier(path, 2, CHUNK, namespace=Namespace("model-a", "l"))
    with pytest.raises(TierConfigError, match=f"{path}: already open by another FileTier"):
        FileTier(path, 2, CHUNK, namespace=Namespace("model-a", "l"))
    assert first.write(job((1,), (0,)), [payload(1)], [False]) == (OK,)  # the refused open changed nothing
    assert first.read(job((1,), (0,)), [memoryview(bytearray(CHUNK))]) == ((OK,), 0)
    first.close()
    FileTier(path, 2, CHUNK, namespace=Namespace("model-a", "l")).close(remove=True)


@pytest.mark.parametrize(
    ("namespace", "chunk", "named"),
    [
        (Namespace("model-b", "l"), CHUNK, "model 'model-a' (this tier: 'model-b')"),
        (Namespace("model-a", "l2"), CHUNK, "layout 'l' (this tier: 'l2')"),
        (Namespace("model-a", "l", rank=1), CHUNK, "rank 0 (this tier: 1)"),
        (Namespace("model-a", "l"), 2 * CHUNK, f"chunk_bytes {CHUNK} (this tier: {2 * CHUNK})"),
    ],
)
def test_a_file_of_another_model_layout_rank_or_chunk_size_is_refused(
    tmp_path: Path, namespace: Namespace, chunk: int, named: str
) -> None:
    path = str(tmp_path / "kv.tier")
    FileTier(path, 2, CHUNK, namespace=Namespace("model-a", "l")).close()
    before = Path(path).read_bytes()
    with pytest.raises(TierConfigError, match=f"^file tier {path}: the file holds .*{named}".replace("(", r"\(")
                       .replace(")", r"\)")):
        FileTier(path, 2, chunk, namespace=namespace)
    assert Path(path).read_bytes() == before


def test_a_file_that_is_not_a_tier_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("precious")
    with pytest.raises(TierConfigError, match="not a kvoffload tier file"):
        FileTier(str(path), 2, CHUNK)
    assert path.read_text() == "precious"


def test_a_tier_file_with_a_damaged_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "damaged.tier"
    FileTier(str(path), 2, CHUNK).close()
    with open(path, "r+b") as raw:
        raw.seek(8)
        raw.write(b"[1, 2]\n")
    with pytest.raises(TierConfigError, match="its header is damaged; remove the file"):
        FileTier(str(path), 2, CHUNK)


def test_after_a_restart_the_tier_starts_empty_and_old_records_never_verify(tmp_path: Path) -> None:
    path = str(tmp_path / "restart.tier")
    first = FileTier(path, 2, CHUNK)
    assert first.write(job((5,), (1,)), [payload(5)], [False]) == (OK,)
    first.close()
    again = FileTier(path, 4, CHUNK)  # same model, layout, chunk: reused, resized, header rewritten
    assert os.path.getsize(path) == again.slot_offset(4)
    assert again.read(job((5,), (1,)), [memoryview(bytearray(CHUNK))]) == ((CORRUPT,), 0)
    again.close()
    smaller = FileTier(path, 1, CHUNK)
    assert os.path.getsize(path) == smaller.slot_offset(1)  # fewer slots: the file shrinks
    smaller.close(remove=True)


def test_a_path_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "x.tier"
    with pytest.raises(TierConfigError, match=f"^file tier {path}: cannot open it \\(No such file or directory\\)$"):
        FileTier(str(path), 2, CHUNK)


def test_an_io_error_is_one_outage_per_job_and_the_recovery_is_seen(tmp_path: Path) -> None:
    tier = FileTier(str(tmp_path / "io.tier"), 2, CHUNK)
    fd = tier.fd
    tier.fd = os.open(os.devnull, os.O_RDONLY)  # every write now fails with EBADF
    try:
        assert tier.write(job((1, 2), (0, 1)), [payload(1), payload(2)], [False, False]) == (FAULT, FAULT)
        assert tier.stats() == {"available": 0, "outages": 1, "faulted_jobs": 1}
    finally:
        os.close(tier.fd)
        tier.fd = fd
    assert tier.write(job((1,), (0,)), [payload(1)], [False]) == (OK,)
    assert tier.stats() == {"available": 1, "outages": 1, "faulted_jobs": 1}
    tier.close(remove=True)


def test_a_deleted_tier_file_keeps_serving_from_its_open_inode(tmp_path: Path) -> None:
    path = str(tmp_path / "gone.tier")
    tier = FileTier(path, 2, CHUNK)
    tier.write(job((3,), (0,)), [payload(3)], [False])
    os.unlink(path)
    back = memoryview(bytearray(CHUNK))
    assert tier.read(job((3,), (0,)), [back]) == ((OK,), 0) and back == payload(3)
    tier.close()


@pytest.mark.parametrize(
    ("num_slots", "chunk_bytes", "named"),
    [(4.5, CHUNK, "num_slots=4.5"), (4, "8192", "chunk_bytes='8192'"), (True, CHUNK, "num_slots=True"),
     (4, 0, "chunk_bytes=0")],
)
def test_a_size_that_is_not_a_positive_integer_names_the_parameter_and_leaves_no_file(
    tmp_path: Path, num_slots: object, chunk_bytes: object, named: str
) -> None:
    path = tmp_path / "bad.tier"
    with pytest.raises(TierConfigError, match=f"{named} must be an integer >= 1"):
        FileTier(str(path), num_slots, chunk_bytes)  # type: ignore[arg-type]
    assert not path.exists()


def test_a_tier_larger_than_the_free_disk_space_is_refused_at_open(tmp_path: Path) -> None:
    space = os.statvfs(tmp_path)
    # Beyond the free space, and beyond ext4's largest file (16 TiB): should the check ever go,
    # posix_fallocate fails at once (EFBIG) instead of allocating the whole disk before ENOSPC.
    too_big = max(space.f_bavail * space.f_frsize, 1 << 45)
    path = tmp_path / "huge.tier"
    with pytest.raises(TierConfigError, match=r"do not fit in the \d+ bytes free"):
        FileTier(str(path), too_big // CHUNK, CHUNK)
    assert not path.exists()


def test_an_index_with_more_slots_than_the_file_is_refused(tmp_path: Path) -> None:
    tier = FileTier(str(tmp_path / "small.tier"), 4, CHUNK)
    worker = ByteModelWorker(1, num_cpu_blocks=2, chunk_bytes=CHUNK)
    try:
        with pytest.raises(TierConfigError, match=r"its index 'file' has 8 slots, its file 4"):
            TierDriver({"file": tier}, worker, indexes=[LocalTierIndex("file", 8)])
        size = os.path.getsize(tier.path)
        # A slot past the file is a fault, never a file that grows.
        assert tier.write(job((1,), (7,)), [payload(1)], [False]) == (FAULT,)
        assert os.path.getsize(tier.path) == size
    finally:
        tier.close(remove=True)


@pytest.mark.parametrize("factor", [2, 3])
def test_a_file_chunk_smaller_than_the_cpu_block_is_refused(tmp_path: Path, factor: int) -> None:
    tier = FileTier(str(tmp_path / "c.tier"), 4, CHUNK)
    worker = ByteModelWorker(1, num_cpu_blocks=2, chunk_bytes=factor * CHUNK)
    try:
        refusal = f"tier 'file': chunk_bytes={CHUNK}, the CPU blocks' {factor * CHUNK}"
        with pytest.raises(TierConfigError, match=refusal):
            TierDriver({"file": tier}, worker)
        # Driven directly, a block of another size is a fault, not an error in the I/O thread.
        big = memoryview(bytearray(factor * CHUNK))
        assert tier.write(job((1,), (0,)), [big], [False]) == (FAULT,)
        assert tier.read(job((1,), (0,)), [big]) == ((FAULT,), 0)
    finally:
        tier.close(remove=True)
