"""A chunk is served only under its full key, in its own namespace: keys that share their low 64
bits, namespaces whose parts contain the separator, and values moved to another tenant's key or
another model's namespace never reach a CPU block."""

from __future__ import annotations

from pathlib import Path

import redis

from kvoffload.tiers.file_tier import FileTier
from kvoffload.tiers.protocol import CORRUPT, MISS, OK, TierJob
from kvoffload.tiers.record import Namespace
from kvoffload.tiers.redis_tier import RedisTier, RedisTierConfig

CHUNK = 4096
# Two keys that agree in their low 64 bits, as two vLLM keys (block hash + group index) can.
LOW = 0x0123456789ABCDEF
HIGH = (0xFEED << 200) | LOW


def payload(seed: int) -> memoryview:
    return memoryview(bytes((seed * 13 + i) & 0xFF for i in range(CHUNK)))


def out() -> memoryview:
    return memoryview(bytearray(CHUNK))


def job(keys: tuple[int, ...], salt: str = "", slots: tuple[int, ...] = ()) -> TierJob:
    return TierJob(1, "cascade", "t", "r", keys, tuple(range(len(keys))), slots, salt)


def test_redis_keys_that_share_their_low_64_bits_never_share_a_value(redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url))
    assert tier.key_name(HIGH, "") != tier.key_name(LOW, "")
    assert tier.write(job((HIGH,)), [payload(1)], [False]) == (OK,)
    assert tier.probe(job((LOW,))) == (MISS,)
    assert tier.read(job((LOW,)), [out()])[0] == (MISS,)
    back = out()
    assert tier.read(job((HIGH,)), [back])[0] == (OK,) and back == payload(1)


def test_a_file_slot_holding_a_key_that_shares_the_low_64_bits_is_corrupt(tmp_path: Path) -> None:
    tier = FileTier(str(tmp_path / "k.tier"), 2, CHUNK)
    try:
        assert tier.write(job((HIGH,), slots=(0,)), [payload(2)], [False]) == (OK,)
        assert tier.read(job((LOW,), slots=(0,)), [out()]) == ((CORRUPT,), 0)
        assert tier.read(job((HIGH,), slots=(0,)), [out()]) == ((OK,), 0)
    finally:
        tier.close(remove=True)


def test_namespaces_whose_parts_hold_the_separator_never_alias(redis_url: str) -> None:
    # Joined with ":" these were all "kvoffload:m:l:s:t:<key>".
    spellings = [("m", "l", "s:t"), ("m", "l:s", "t"), ("m:l", "s", "t")]
    tiers = [(RedisTier(RedisTierConfig(redis_url, model=m, layout=lay)), salt) for m, lay, salt in spellings]
    names = {tier.key_name(7, salt) for tier, salt in tiers}
    assert len(names) == len(spellings)
    first, salt = tiers[0]
    assert first.write(job((7,), salt), [payload(3)], [False]) == (OK,)
    for other, other_salt in tiers[1:]:
        assert other.read(job((7,), other_salt), [out()])[0] == (MISS,)


def test_the_rank_is_part_of_the_namespace(redis_url: str) -> None:
    rank0 = RedisTier(RedisTierConfig(redis_url, model="m", layout="l", rank=0))
    rank1 = RedisTier(RedisTierConfig(redis_url, model="m", layout="l", rank=1))
    assert rank0.key_name(7, "") != rank1.key_name(7, "")
    rank0.write(job((7,)), [payload(4)], [False])
    assert rank1.read(job((7,)), [out()])[0] == (MISS,)


def test_a_value_moved_to_another_tenants_or_models_key_is_refused(redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url, model="m", layout="l"))
    other_model = RedisTier(RedisTierConfig(redis_url, model="m2", layout="l"))
    assert tier.write(job((9,), "tenant-a"), [payload(5)], [False]) == (OK,)
    client = redis.Redis.from_url(redis_url)
    value = client.get(tier.key_name(9, "tenant-a"))
    client.set(tier.key_name(9, "tenant-b"), value)
    client.set(other_model.key_name(9, "tenant-a"), value)
    client.set(tier.key_name(10, "tenant-a"), value)
    assert tier.read(job((9,), "tenant-b"), [out()])[0] == (CORRUPT,)
    assert other_model.read(job((9,), "tenant-a"), [out()])[0] == (CORRUPT,)
    assert tier.read(job((10,), "tenant-a"), [out()])[0] == (CORRUPT,)
    assert tier.read(job((9,), "tenant-a"), [out()])[0] == (OK,)


def test_a_file_chunk_is_bound_to_its_salt(tmp_path: Path) -> None:
    tier = FileTier(str(tmp_path / "s.tier"), 2, CHUNK, namespace=Namespace("m", "l"))
    try:
        tier.write(job((9,), "tenant-a", slots=(1,)), [payload(6)], [False])
        assert tier.read(job((9,), "tenant-b", slots=(1,)), [out()]) == ((CORRUPT,), 0)
        assert tier.read(job((9,), "tenant-a", slots=(1,)), [out()]) == ((OK,), 0)
    finally:
        tier.close(remove=True)
