"""RedisTier over a real 3-master Redis Cluster on loopback ports: chunks spread over the masters
by their own hash tag; a slot migrated (step by step, and by ``redis-cli --cluster reshard`` while
cascades and promotions run), a slot with no master (CLUSTERDOWN), a frozen master and a SIGKILLed
one give misses or faults of their chunks only, never an exception out of the driver and never
wrong bytes (every read is compared with what was stored); hits resume once the topology settles.
The tests on a real cluster are marked slow: together they take about 18 s."""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable

import pytest
import redis
from redis.crc import key_slot

from kvoffload.tiers.driver import TierDriver
from kvoffload.tiers.protocol import CORRUPT, FAULT, MISS, OK, TierConfigError, TierJob
from kvoffload.tiers.redis_cluster import Node, parse_slots
from kvoffload.tiers.redis_tier import RedisTier, RedisTierConfig
from kvoffload_lab.redis_server import LocalRedisCluster, RedisServer
from redis_servers import running_cluster

CHUNK = 4096
SALT = "tenant-{a}"  # braces: a salt that would be a hash tag if it came first in the key name

def payload(key: int) -> bytes:
    return random.Random(key).randbytes(CHUNK)


def vllm_like_keys(count: int, seed: int) -> list[int]:
    """Keys as big as vLLM's (a 256-bit block hash and a group index)."""
    rng = random.Random(seed)
    return [rng.getrandbits(256) << 8 | rng.randrange(4) for _ in range(count)]


def job(keys: list[int], kind: str = "cascade", job_id: int = 1, blocks: list[int] | None = None) -> TierJob:
    cpu_blocks = tuple(range(len(keys))) if blocks is None else tuple(blocks)
    return TierJob(job_id, kind, "redis", "r", tuple(keys), cpu_blocks, salt=SALT)  # type: ignore[arg-type]


def write(tier: RedisTier, keys: list[int]) -> tuple[str, ...]:
    return tier.write(job(keys), [memoryview(payload(key)) for key in keys], [False] * len(keys))


def read(tier: RedisTier, keys: list[int]) -> tuple[str, ...]:
    """Promote ``keys``; every chunk served must be exactly the one stored under its key."""
    outs = [memoryview(bytearray(CHUNK)) for _ in keys]
    results, _ = tier.read(job(keys, "promote"), outs)
    for key, result, out in zip(keys, results, outs, strict=True):
        assert result in (OK, MISS, FAULT), f"key {key}: {result}"
        if result == OK:
            assert out == payload(key), f"key {key}: wrong bytes served"
    return results


class Blocks:
    """CPU blocks for the driver."""

    chunk_bytes = CHUNK

    def __init__(self, count: int) -> None:
        self.data = bytearray(count * CHUNK)

    def chunk_view(self, block_id: int) -> memoryview:
        return memoryview(self.data)[block_id * CHUNK : (block_id + 1) * CHUNK]


# One cluster for the module; a test that kills or freezes a master gets a cluster of its own.
cluster = pytest.fixture(scope="module", name="cluster")(running_cluster)
own_cluster = pytest.fixture(name="own_cluster")(running_cluster)


def tier_of(servers: LocalRedisCluster, **settings: object) -> RedisTier:
    return RedisTier(RedisTierConfig(servers.url, model="m", layout="l", cluster=True, **settings))  # type: ignore[arg-type]


def holders(servers: LocalRedisCluster, tier: RedisTier, keys: list[int]) -> dict[int, RedisServer]:
    """The node each key's value lives on (asked of every node, not of the tier's slot table)."""
    names = {tier.key_name(key, SALT).encode(): key for key in keys}
    found: dict[int, RedisServer] = {}
    for node in servers.nodes:
        for name in redis.Redis(port=node.port).scan_iter(count=1000):
            if name in names:
                assert names[name] not in found, f"key {names[name]} on two nodes"
                found[names[name]] = node
    return found


def keys_in_one_slot(tier: RedisTier, count: int) -> tuple[int, list[int]]:
    """A hash slot and ``count`` keys whose names fall in it."""
    first = vllm_like_keys(1, seed=99)[0]
    slot = key_slot(tier.key_name(first, SALT).encode())
    keys = [first]
    candidate = first
    while len(keys) < count:
        candidate += 1 << 8
        if key_slot(tier.key_name(candidate, SALT).encode()) == slot:
            keys.append(candidate)
    return slot, keys


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"cluster": "yes"}, "cluster='yes': must be True .* or False"),
        ({"cluster": 1}, "cluster=1: must be True"),
        ({"url": "redis://127.0.0.1:7000/1"}, "url='redis://127.0.0.1:7000/1': a Redis Cluster has only database 0"),
        ({"url": "http://127.0.0.1:7000"}, "expected redis://"),
        ({"url": "redis://127.0.0.1:70000/0"}, "the port must be a number"),
        ({"ttl_s": 0}, "ttl_s=0: must be a whole number of seconds > 0"),
        ({"socket_timeout_s": 0}, "socket_timeout_s=0: must be a finite number"),
        ({"rank": -1}, "rank must be an integer >= 0"),
        ({"layout": ""}, "layout must be a non-empty string"),
    ],
)
def test_cluster_settings_that_can_never_work_are_refused_naming_the_setting(
    settings: dict[str, object], says: str
) -> None:
    with pytest.raises(TierConfigError, match=says):
        RedisTierConfig(**{"cluster": True, **settings})  # type: ignore[arg-type]


def test_the_cluster_setting_is_shown_and_the_password_is_not() -> None:
    config = RedisTierConfig("redis://:hunter2@127.0.0.1:7000", password="s3cret", cluster=True)
    assert "cluster=True" in repr(config) and "hunter2" not in repr(config) and "s3cret" not in repr(config)
    assert RedisTierConfig("redis://127.0.0.1:7000/0", cluster=True).cluster is True


@pytest.mark.parametrize("salt", ["", "{a}", "x{", "}{", "{}", "{tenant}{1}"])
def test_each_key_names_its_own_hash_slot_whatever_the_salt(salt: str) -> None:
    tier = RedisTier(RedisTierConfig("redis://127.0.0.1:7000", model="{m}", cluster=True))
    keys = vllm_like_keys(64, seed=3)
    slots = [key_slot(tier.key_name(key, salt).encode()) for key in keys]
    # The tag is the key alone: the slot does not depend on the salt or the model...
    assert slots == [key_slot(tier.key_name(key, "other").encode()) for key in keys]
    # ...and 64 keys do not share one slot.
    assert len(set(slots)) > 32


def test_a_slot_table_reply_is_read_or_refused_whole() -> None:
    asked = Node({"host": "10.0.0.7", "port": 7001}, "node")
    reply = [[0, 99, [b"", 7001, b"id-a"]], [100, 16383, [b"10.0.0.8", 7002, b"id-b", {}], [b"10.0.0.9", 7003]]]
    assert parse_slots(reply, asked) == [(0, 99, ("10.0.0.7", 7001)), (100, 16383, ("10.0.0.8", 7002))]
    for malformed in ([[0, 16384, [b"h", 1]]], [[5, 4, [b"h", 1]]], [[0, 1, [b"h", "port"]]], [[0, 1]]):
        with pytest.raises((ValueError, TypeError)):
            parse_slots(malformed, asked)


@pytest.mark.slow
def test_chunks_spread_over_every_master_and_come_back_exact(cluster: LocalRedisCluster) -> None:
    tier = tier_of(cluster)
    keys = vllm_like_keys(48, seed=1)
    assert write(tier, keys) == (OK,) * len(keys)
    placed = holders(cluster, tier, keys)
    assert sorted(placed) == sorted(keys)
    assert len({node.port for node in placed.values()}) == 3
    assert read(tier, keys) == (OK,) * len(keys)
    assert tier.probe(job(keys, "probe")) == (OK,) * len(keys)
    assert tier.probe(job(keys, "probe")._replace(salt="tenant-b")) == (MISS,) * len(keys)
    other = RedisTier(RedisTierConfig(cluster.url, model="m", layout="l", cluster=True), writer=1)
    outs = [memoryview(bytearray(CHUNK)) for _ in keys]
    assert other.read(job(keys, "promote"), outs) == ((OK,) * len(keys), len(keys))  # all by writer 0
    stats = tier.stats()
    assert (stats["available"], stats["masters"], stats["outages"]) == (1, 3, 0)


@pytest.mark.slow
def test_a_migrating_slot_misses_its_moved_keys_then_hits_as_soon_as_it_moved(cluster: LocalRedisCluster) -> None:
    tier = tier_of(cluster)
    slot, (first, second, late) = keys_in_one_slot(tier, 3)
    assert write(tier, [first, second]) == (OK, OK)
    source = holders(cluster, tier, [first])[first]
    target = next(node for node in cluster.nodes if node is not source)
    source_id, target_id = cluster.node_id(source), cluster.node_id(target)
    assert cluster.command(target, "CLUSTER", "SETSLOT", str(slot), "IMPORTING", source_id) == "OK"
    assert cluster.command(source, "CLUSTER", "SETSLOT", str(slot), "MIGRATING", target_id) == "OK"
    assert read(tier, [first, second]) == (OK, OK)  # still on the source
    # A new key in a migrating slot belongs to the target already: the source answers ASK.
    assert write(tier, [late]) == (FAULT,)
    assert tier.stats()["redirected"] == 1
    migrate = ("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS")
    assert cluster.command(source, *migrate, tier.key_name(first, SALT)) == "OK"
    assert read(tier, [first, second]) == (MISS, OK)  # ASK for the moved key
    assert cluster.command(source, *migrate, tier.key_name(second, SALT)) == "OK"
    for node in cluster.nodes:
        assert cluster.command(node, "CLUSTER", "SETSLOT", str(slot), "NODE", target_id) == "OK"
    redirected = tier.stats()["redirected"]
    # The source answers MOVED: the slot table learns the new master and the same read asks it.
    assert read(tier, [first, second]) == (OK, OK)
    assert tier.stats()["redirected"] == redirected + 2
    assert read(tier, [first, second]) == (OK, OK)
    assert tier.stats()["redirected"] == redirected + 2  # no redirection once the table knows
    assert write(tier, [late]) == (OK,) and read(tier, [late]) == (OK,)
    assert holders(cluster, tier, [first, second, late]) == {first: target, second: target, late: target}
    assert tier.stats()["available"] == 1


@pytest.mark.slow
def test_resharding_during_cascades_and_promotions_serves_exact_bytes_or_misses(cluster: LocalRedisCluster) -> None:
    tier = tier_of(cluster)
    keys = vllm_like_keys(240, seed=2)
    assert write(tier, keys) == (OK,) * len(keys)
    blocks = Blocks(2 * len(keys))
    driver = TierDriver({"redis": tier}, blocks)
    source, target = cluster.nodes[0], cluster.nodes[1]
    on_source = [key for key, node in holders(cluster, tier, keys).items() if node is source]
    reshard = subprocess.Popen(
        cluster.reshard_command(source, target, 1365), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    counts = dict.fromkeys((OK, MISS, FAULT, CORRUPT), 0)
    rounds = 0
    job_id = 0
    try:
        while reshard.poll() is None or rounds < 3:
            rounds += 1
            batch = random.Random(rounds).sample(keys, 24)
            for block, key in enumerate(batch):
                blocks.chunk_view(block)[:] = payload(key)
            reads = list(range(len(keys), len(keys) + len(batch)))
            jobs = []
            for kind, cpu_blocks in (("cascade", range(len(batch))), ("promote", reads), ("probe", ())):
                job_id += 1
                jobs.append(job(batch, kind, job_id, list(cpu_blocks) if kind != "probe" else []))
            driver.submit(jobs, rounds)
            _, promoted, _ = driver.drain()
            for key, result, block in zip(batch, promoted.results, reads, strict=True):
                counts[result] += 1
                if result == OK:
                    assert blocks.chunk_view(block) == payload(key), f"key {key}: wrong bytes during resharding"
        assert reshard.wait() == 0, reshard.stderr.read() if reshard.stderr else ""
    finally:
        if reshard.poll() is None:
            reshard.kill()
            reshard.wait()
        driver.close()
    assert counts[CORRUPT] == 0 and counts[OK] > 0
    moved = [key for key, node in holders(cluster, tier, on_source).items() if node is target]
    assert moved, "the reshard moved none of the written keys"
    # After the move, every key hits again (the first read of a moved slot may answer MOVED).
    read(tier, keys)
    assert write(tier, keys) == (OK,) * len(keys)
    assert read(tier, keys) == (OK,) * len(keys)
    assert tier.stats()["redirected"] > 0


@pytest.mark.slow
def test_a_slot_with_no_master_faults_its_chunks_only_and_is_logged_once(
    cluster: LocalRedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kvoffload.tiers")
    tier = tier_of(cluster)
    slot, unserved = keys_in_one_slot(tier, 2)
    served = vllm_like_keys(24, seed=5)
    assert write(tier, unserved + served) == (OK,) * 26
    owner = holders(cluster, tier, unserved[:1])[unserved[0]]
    assert cluster.command(owner, "CLUSTER", "DELSLOTS", str(slot)) == "OK"
    try:
        for _ in range(3):  # CLUSTERDOWN from the owner, or no master in the refreshed table
            assert read(tier, unserved + served) == (FAULT, FAULT) + (OK,) * 24
        assert tier.stats()["available"] == 0
    finally:
        assert cluster.command(owner, "CLUSTER", "ADDSLOTS", str(slot)) == "OK"
    wait_for(lambda: read(tier, unserved) == (OK, OK))
    assert tier.stats()["available"] == 1
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warnings and len(warnings) <= 2, warnings  # the owner's outage and/or the slot table's, once
    assert any("CLUSTERDOWN" in warning or "no known master" in warning for warning in warnings)


@pytest.mark.slow
def test_a_master_frozen_or_killed_misses_its_chunks_while_the_others_hit(
    own_cluster: LocalRedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kvoffload.tiers")
    tier = tier_of(own_cluster, socket_timeout_s=0.3)
    keys = vllm_like_keys(60, seed=4)
    assert write(tier, keys) == (OK,) * len(keys)
    victim = own_cluster.nodes[2]
    placed = holders(own_cluster, tier, keys)
    on_victim = {key for key, node in placed.items() if node is victim}
    assert on_victim and len(on_victim) < len(keys)
    expected = tuple(FAULT if key in on_victim else OK for key in keys)
    driver = TierDriver({"redis": tier}, Blocks(len(keys)))

    def promote_all(job_id: int) -> tuple[str, ...]:
        driver.submit([job(keys, "promote", job_id)], job_id)
        (outcome,) = driver.drain()
        for key, result in zip(keys, outcome.results, strict=True):
            if result == OK:
                assert driver.cpu.chunk_view(keys.index(key)) == payload(key)
        return outcome.results

    try:
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGSTOP)  # a timeout
        try:
            assert promote_all(1) == expected
        finally:
            os.kill(victim.pid, signal.SIGCONT)
        wait_for(lambda: promote_all(2) == (OK,) * len(keys))
        victim.kill()
        for job_id in range(3, 6):
            assert promote_all(job_id) == expected
        # The others keep serving once the cluster has marked the dead master failed too
        # (cluster-require-full-coverage no).
        wait_for(lambda: "cluster_slots_fail:0" not in own_cluster.command(own_cluster.nodes[0], "CLUSTER", "INFO"))
        assert promote_all(6) == expected
        stats = driver.stats()["redis"]
        assert (stats["available"], stats["outages"]) == (0, 2)  # frozen once, dead once
        victim.start()  # empty: nothing is persisted
        own_cluster.wait_ok()
        wait_for(lambda: promote_all(7) == tuple(MISS if key in on_victim else OK for key in keys))
        assert write(tier, keys) == (OK,) * len(keys)
        assert promote_all(8) == (OK,) * len(keys)
    finally:
        driver.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and all(f"127.0.0.1:{victim.port}" in warning for warning in warnings), warnings
    recoveries = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(recoveries) == 2 and "available again" in recoveries[-1]


def test_a_cluster_config_on_a_single_server_faults_and_says_why(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kvoffload.tiers")
    tier = RedisTier(RedisTierConfig(redis_url, cluster=True))
    driver = TierDriver({"redis": tier}, Blocks(2))
    try:
        driver.submit([job([1, 2]), job([1, 2], "promote", 2), job([1, 2], "probe", 3, [])], 1)
        assert [outcome.results for outcome in driver.drain()] == [(FAULT, FAULT)] * 3
    finally:
        driver.close()
    (warning,) = [record.getMessage() for record in caplog.records]
    assert "cluster support disabled" in warning


@pytest.mark.slow
def test_a_single_server_config_on_a_cluster_node_faults_and_says_why(
    cluster: LocalRedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kvoffload.tiers")
    tier = RedisTier(RedisTierConfig(cluster.url, model="m", layout="l"))
    keys = vllm_like_keys(24, seed=6)
    results = write(tier, keys)
    assert FAULT in results and OK in results  # keys of the URL's node's slots are stored there
    (warning,) = [record.getMessage() for record in caplog.records]
    assert "set RedisTierConfig.cluster=True" in warning
