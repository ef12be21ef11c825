"""RedisTierConfig and the Redis tier's failures: settings that can never work are refused with
one line naming the setting; the config's password wins over the URL's; a server that refuses
the password, lacks the database or is down gives faults (never an exception out of the driver),
logged once per outage with the recovery, and counted in ``stats``; a value of another type is
a miss of that chunk only, and a corrupt value stays until a cascade overwrites it."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis

from kvoffload.tiers.driver import TierDriver
from kvoffload.tiers.protocol import CORRUPT, FAULT, OK, TierConfigError, TierJob
from kvoffload.tiers.redis_tier import RedisTier, RedisTierConfig
from kvoffload_lab.redis_server import RedisServer
from kvoffload_lab.sim.tiered.bytes_worker import ByteModelWorker

CHUNK = 4096


def payload(seed: int) -> memoryview:
    return memoryview(bytes((seed * 11 + i) & 0xFF for i in range(CHUNK)))


def out() -> memoryview:
    return memoryview(bytearray(CHUNK))


def job(keys: tuple[int, ...], kind: str = "cascade") -> TierJob:
    return TierJob(1, kind, "redis", "r", keys, tuple(range(len(keys))))  # type: ignore[arg-type]


@pytest.fixture
def password_server(redis_server: RedisServer) -> Iterator[RedisServer]:
    # A server of its own with a password (the session fixture only proves redis-server exists).
    server = RedisServer(password="s3cret").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("ttl_s", 0, "ttl_s=0: must be a whole number of seconds > 0"),
        ("ttl_s", -5, "ttl_s=-5: must be a whole number"),
        ("ttl_s", 1.5, "ttl_s=1.5: must be a whole number"),
        ("socket_timeout_s", 0, "socket_timeout_s=0: must be a finite number of seconds > 0"),
        ("socket_timeout_s", -1, "socket_timeout_s=-1: must be"),
        ("socket_timeout_s", float("nan"), "socket_timeout_s=nan: must be"),
        ("socket_timeout_s", "2", "socket_timeout_s='2': must be"),
        ("url", "http://127.0.0.1:6379/0", "url='http://127.0.0.1:6379/0': expected redis://"),
        ("url", "redis://127.0.0.1:6379/zero", "the database .* must be an integer"),
        ("url", "redis://127.0.0.1:99999/0", "the port must be a number in 0-65535"),
        ("url", 6379, "url=6379: expected redis://"),
        ("rank", -1, "rank must be an integer >= 0, got -1"),
        ("model", "", "model must be a non-empty string"),
    ],
)
def test_settings_that_can_never_work_are_refused_naming_the_setting(setting: str, value: object, says: str) -> None:
    with pytest.raises(TierConfigError, match=says):
        RedisTierConfig(**{setting: value})  # type: ignore[arg-type]


def test_messages_and_repr_never_show_a_password() -> None:
    with pytest.raises(TierConfigError) as refused:
        RedisTierConfig("http://:hunter2@127.0.0.1:6379/0")
    assert "hunter2" not in str(refused.value)
    config = RedisTierConfig("redis://:hunter2@127.0.0.1:6379/0", password="s3cret")
    assert "s3cret" not in repr(config) and "hunter2" not in repr(config)
    assert config.display_url == "redis://127.0.0.1:6379/0"


def test_the_configs_password_overrides_the_urls(password_server: RedisServer) -> None:
    stale = f"redis://:stale@127.0.0.1:{password_server.port}/0"
    assert RedisTier(RedisTierConfig(stale)).write(job((1,)), [payload(1)], [False]) == (FAULT,)
    tier = RedisTier(RedisTierConfig(stale, password="s3cret"))
    assert tier.write(job((1,)), [payload(1)], [False]) == (OK,)
    assert tier.read(job((1,)), [out()])[0] == (OK,)


def test_a_database_the_server_lacks_faults_the_job_and_never_raises_from_the_driver(redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url.rsplit("/", 1)[0] + "/99"))
    worker = ByteModelWorker(1, num_cpu_blocks=2, chunk_bytes=CHUNK)
    driver = TierDriver({"redis": tier}, worker)
    try:
        driver.submit([job((1,)), job((2,), "promote")._replace(job_id=2), job((3,), "probe")._replace(job_id=3)], 1)
        assert [outcome.results for outcome in driver.drain()] == [(FAULT,), (FAULT,), (FAULT,)]
        stats = driver.stats()["redis"]
        assert (stats["fault"], stats["available"], stats["outages"], stats["faulted_jobs"]) == (3, 0, 1, 3)
    finally:
        driver.close()


def test_an_outage_is_logged_once_and_the_recovery_once(
    password_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kvoffload.tiers")
    tier = RedisTier(RedisTierConfig(password_server.url, socket_timeout_s=0.5))
    wrong = RedisTier(RedisTierConfig(password_server.url, password="wrong"))
    for _ in range(3):
        assert wrong.write(job((1,)), [payload(1)], [False]) == (FAULT,)
    assert tier.write(job((1,)), [payload(1)], [False]) == (OK,)
    password_server._kill()
    try:
        for _ in range(3):
            assert tier.read(job((1,)), [out()])[0] == (FAULT,)
            assert tier.probe(job((1,))) == (FAULT,)
        assert tier.stats() == {"available": 0, "outages": 1, "faulted_jobs": 6}
    finally:
        password_server.start()
    tier.write(job((1,)), [payload(1)], [False])
    assert tier.stats()["available"] == 1
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "kvoffload.tiers"]
    assert [level for level, _ in lines] == ["WARNING", "WARNING", "INFO"]
    assert "AuthenticationError" in lines[0][1] and "unavailable" in lines[1][1] and "available again" in lines[2][1]
    assert all("s3cret" not in text and "wrong" not in text.split("(")[0] for _, text in lines)
    assert wrong.stats() == {"available": 0, "outages": 1, "faulted_jobs": 3}


def test_a_value_of_another_type_fails_only_its_own_chunk(redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url))
    redis.Redis.from_url(redis_url).rpush(tier.key_name(9, ""), b"a list, not a string")
    tier.write(job((10,)), [payload(10)], [False])
    outs = [out(), out()]
    assert tier.read(job((9, 10), "promote"), outs)[0] == (CORRUPT, OK)
    assert outs[1] == payload(10)
    assert tier.stats()["outages"] == 0


def test_a_corrupt_value_stays_until_a_cascade_overwrites_it(redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url))
    assert tier.write(job((8,)), [payload(8)], [True]) == (OK,)
    assert tier.read(job((8,), "promote"), [out()])[0] == (CORRUPT,)
    assert redis.Redis.from_url(redis_url).exists(tier.key_name(8, "")) == 1  # not deleted by the read
    assert tier.read(job((8,), "promote"), [out()])[0] == (CORRUPT,)
    assert tier.write(job((8,)), [payload(8)], [False]) == (OK,)
    back = out()
    assert tier.read(job((8,), "promote"), [back])[0] == (OK,) and back == payload(8)
