"""FileTier: real pwrite/preadv on a preallocated file; every read is checked against key + CRC."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from kvoffload.tiers.driver import TierDriver, TierFaults
from kvoffload.tiers.file_tier import FileTier
from kvoffload.tiers.protocol import CORRUPT, FAULT, OK, TierJob
from kvoffload_lab.sim.tiered.bytes_worker import ByteModelWorker

CHUNK = 8192


@pytest.fixture
def tier(tmp_path: Path):
    file_tier = FileTier(str(tmp_path / "t.tier"), num_slots=4, chunk_bytes=CHUNK)
    yield file_tier
    file_tier.close(remove=True)


def payload(seed: int) -> memoryview:
    return memoryview(bytes((seed * 31 + i) & 0xFF for i in range(CHUNK)))


def test_the_file_is_preallocated_and_slots_are_aligned(tier: FileTier) -> None:
    assert tier.slot_bytes % 4096 == 0 and tier.slot_bytes >= CHUNK
    assert os.path.getsize(tier.path) == 4096 + 4 * tier.slot_bytes  # the header page, then the slots


def test_page_aligned_chunks_move_without_a_bounce_buffer(tier: FileTier) -> None:
    arena = memoryview(mmap.mmap(-1, 2 * CHUNK))
    arena[:CHUNK] = payload(4)
    job = TierJob(1, "cascade", "file", "r", (10,), (0,), slots=(1,))
    assert tier.write(job, [arena[:CHUNK]], [False]) == (OK,)
    assert tier.read(job, [arena[CHUNK:]]) == ((OK,), 0)
    assert arena[CHUNK:] == payload(4)


def test_round_trip_and_every_mismatch_is_corrupt(tier: FileTier) -> None:
    job = TierJob(1, "cascade", "file", "r", (10, 11), (0, 1), slots=(2, 3))
    assert tier.write(job, [payload(1), payload(2)], [False, False]) == (OK, OK)
    outs = [memoryview(bytearray(CHUNK)) for _ in range(2)]
    assert tier.read(job._replace(kind="promote"), outs) == ((OK, OK), 0)
    assert outs[0] == payload(1) and outs[1] == payload(2)
    # Another key in the slot, a flipped byte on disk, a slot never written: all corrupt.
    out = memoryview(bytearray(CHUNK))
    assert tier.read(job._replace(keys=(99,), slots=(2,)), [out]) == ((CORRUPT,), 0)
    with open(tier.path, "r+b") as raw:
        raw.seek(tier.slot_offset(3) + 100)
        raw.write(b"\xff")
    assert tier.read(job._replace(keys=(11,), slots=(3,)), [out]) == ((CORRUPT,), 0)
    assert tier.read(job._replace(keys=(12,), slots=(0,)), [out]) == ((CORRUPT,), 0)


def test_injected_corruption_is_caught_on_read(tier: FileTier) -> None:
    job = TierJob(1, "cascade", "file", "r", (10,), (0,), slots=(0,))
    assert tier.write(job, [payload(3)], [True]) == (OK,)
    assert tier.read(job, [memoryview(bytearray(CHUNK))]) == ((CORRUPT,), 0)


def test_the_driver_moves_cpu_blocks_through_the_pool_and_injects_faults(tmp_path: Path) -> None:
    worker = ByteModelWorker(1, num_cpu_blocks=4, chunk_bytes=CHUNK)
    worker.chunk_view(0)[:] = payload(5)
    file_tier = FileTier(str(tmp_path / "d.tier"), num_slots=2, chunk_bytes=CHUNK)
    driver = TierDriver({"file": file_tier}, worker, threads=2, delay_steps=1)
    try:
        driver.submit([TierJob(1, "cascade", "file", "r", (7,), (0,), slots=(1,))], step=1)
        assert driver.poll(1) == []  # due one step later
        assert driver.poll(2)[0].results == (OK,)
        driver.submit([TierJob(2, "promote", "file", "r", (7,), (3,), slots=(1,))], step=2)
        assert driver.drain()[0].results == (OK,)
        assert worker.chunk_view(3) == payload(5)
        failing = TierDriver({"file": file_tier}, worker, faults=TierFaults(io_error_rate=1.0))
        failing.submit([TierJob(3, "promote", "file", "r", (7,), (2,), slots=(1,))], step=1)
        assert failing.drain()[0].results == (FAULT,)
        assert failing.injected_io_errors == 1
        failing.close()
    finally:
        driver.close()
        file_tier.close(remove=True)


def test_a_bad_size_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="num_slots=0"):
        FileTier(str(tmp_path / "x"), 0, CHUNK)


@pytest.mark.parametrize("direct", [True, False], ids=["o_direct", "buffered"])
def test_a_chunk_size_that_is_not_a_page_multiple_round_trips(tmp_path: Path, direct: bool) -> None:
    odd = 5000
    file_tier = FileTier(str(tmp_path / "odd.tier"), num_slots=2, chunk_bytes=odd, direct=direct)
    try:
        data = memoryview(bytes(range(256)) * 19 + bytes(odd - 256 * 19))
        job = TierJob(1, "cascade", "file", "r", (3,), (0,), slots=(1,))
        assert file_tier.write(job, [data], [False]) == (OK,)
        back = memoryview(bytearray(odd))
        assert file_tier.read(job, [back]) == ((OK,), 0) and back == data
        assert file_tier.direct == (direct and file_tier.direct)
    finally:
        file_tier.close(remove=True)
