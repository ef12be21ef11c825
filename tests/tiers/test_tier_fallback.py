"""A damaged file chunk is never served: the lookup falls back to the next tier (Redis), and to
recomputation when no tier below holds it. Real FileTier, RedisTier and driver, real bytes."""

from __future__ import annotations

from pathlib import Path

from tiers_support import tiering

from kvoffload.tiers.driver import TierDriver
from kvoffload.tiers.file_tier import FileTier
from kvoffload.tiers.manager import TieringManager
from kvoffload.tiers.redis_tier import RedisTier, RedisTierConfig
from kvoffload_lab.sim.tiered.bytes_worker import ByteModelWorker

CHUNK = 4096


def payload(seed: int) -> bytes:
    return bytes((seed * 5 + i) & 0xFF for i in range(CHUNK))


def run_jobs(manager: TieringManager, driver: TierDriver) -> None:
    driver.submit(manager.take_tier_jobs(), 0)
    for outcome in driver.drain():
        manager.complete_tier_job(outcome)


def store_bytes(manager: TieringManager, worker: ByteModelWorker, request_id: str, keys: list[int]) -> None:
    manager.on_new_request(request_id)
    plan = manager.prepare_store(request_id, keys)
    assert plan is not None
    for key, block in zip(plan.keys_to_store, plan.cpu_block_ids, strict=True):
        worker.chunk_view(block)[:] = payload(key)
    manager.complete_store(request_id, plan.keys_to_store, True)


def test_a_damaged_file_chunk_is_promoted_from_redis_instead(tmp_path: Path, redis_url: str) -> None:
    manager = tiering(cpu_blocks=2, file_slots=4, shared=True)
    worker = ByteModelWorker(1, num_cpu_blocks=2, chunk_bytes=CHUNK)
    file_tier = FileTier(str(tmp_path / "f.tier"), 4, CHUNK)
    driver = TierDriver({"file": file_tier, "redis": RedisTier(RedisTierConfig(redis_url))}, worker,
                        delay_steps=0, indexes=list(manager.tiers.values()))
    try:
        store_bytes(manager, worker, "writer", [1])
        run_jobs(manager, driver)  # cascaded to the file and to Redis
        store_bytes(manager, worker, "evictor", [1000, 1001])
        run_jobs(manager, driver)
        assert 1 not in manager.resident_keys
        with open(file_tier.path, "r+b") as raw:  # damage every slot's first byte
            for slot in range(4):
                raw.seek(file_tier.slot_offset(slot))
                first = raw.read(1)
                raw.seek(file_tier.slot_offset(slot))
                raw.write(bytes([first[0] ^ 0xFF]))
        manager.on_new_request("reader")
        answers = []
        for _ in range(4):  # file promotion (corrupt), Redis probe, Redis promotion, ready
            answers.append(manager.lookup("reader", [1]))
            run_jobs(manager, driver)
        assert answers == [None, None, None, 1]
        assert manager.tier_stats["file"].checksum_failures == 1
        assert manager.tier_stats["redis"].promoted_keys == 1
        (block,) = manager.prepare_load("reader", [1])
        assert bytes(worker.chunk_view(block)) == payload(1)
        manager.complete_load("reader", [1])
        assert driver.stats()["file"]["corrupt"] == 1 and driver.stats()["redis"]["ok"] >= 2
    finally:
        driver.close()
        file_tier.close(remove=True)
