"""RedisTier against a real redis-server: pipelined gets/sets, namespaces, salts, checksums, and a
server that disappears or restarts (misses and faults, never an exception or a wrong block)."""

from __future__ import annotations

import pytest
import redis

from kvoffload.tiers.protocol import CORRUPT, FAULT, MISS, OK, TierJob
from kvoffload.tiers.redis_tier import RedisTier, RedisTierConfig
from kvoffload_lab.redis_server import RedisServer, RedisServerMissing

CHUNK = 4096


def payload(seed: int) -> memoryview:
    return memoryview(bytes((seed * 7 + i) & 0xFF for i in range(CHUNK)))


def out() -> memoryview:
    return memoryview(bytearray(CHUNK))


def job(keys: tuple[int, ...], salt: str = "", kind: str = "cascade") -> TierJob:
    return TierJob(1, kind, "redis", "r", keys, tuple(range(len(keys))), salt=salt)  # type: ignore[arg-type]


def test_round_trip_is_pipelined_and_counts_foreign_writers(redis_url: str) -> None:
    writer = RedisTier(RedisTierConfig(redis_url), writer=0)
    reader = RedisTier(RedisTierConfig(redis_url), writer=1)
    assert writer.write(job((1, 2)), [payload(1), payload(2)], [False, False]) == (OK, OK)
    outs = [out(), out(), out()]
    assert reader.read(job((1, 2, 3), kind="promote"), outs) == ((OK, OK, MISS), 2)
    assert outs[0] == payload(1) and outs[1] == payload(2)
    assert writer.read(job((1,), kind="promote"), [out()]) == ((OK,), 0)


def test_salts_models_and_layouts_never_share(redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url, model="m", layout="l"))
    tier.write(job((5,), salt="tenant-a"), [payload(5)], [False])
    assert tier.read(job((5,), salt="tenant-b"), [out()])[0] == (MISS,)
    other_model = RedisTier(RedisTierConfig(redis_url, model="other", layout="l"))
    assert other_model.read(job((5,), salt="tenant-a"), [out()])[0] == (MISS,)
    assert tier.read(job((5,), salt="tenant-a"), [out()])[0] == (OK,)


def test_corrupt_or_foreign_values_are_never_served(redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url))
    assert tier.write(job((8,)), [payload(8)], [True]) == (OK,)
    # The reply lands in the promotion's write-pending CPU block; CORRUPT means it is never served.
    assert tier.read(job((8,)), [out()])[0] == (CORRUPT,)
    redis.Redis.from_url(redis_url).set(tier.key_name(9, ""), b"garbage")
    tier.write(job((10,)), [payload(10)], [False])
    outs = [out(), out()]
    assert tier.read(job((9, 10)), outs)[0] == (CORRUPT, OK)  # the stream stays in step
    assert outs[1] == payload(10)


def test_a_probe_says_which_keys_the_server_holds(redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url))
    tier.write(job((1, 3)), [payload(1), payload(3)], [False, False])
    assert tier.probe(job((1, 2, 3), salt="")) == (OK, MISS, OK)
    assert tier.probe(job((1,), salt="other")) == (MISS,)


def test_a_key_evicted_between_lookup_and_read_is_a_miss(redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url))
    tier.write(job((4,)), [payload(4)], [False])
    redis.Redis.from_url(redis_url).delete(tier.key_name(4, ""))  # what maxmemory-policy does
    assert tier.read(job((4,)), [out()])[0] == (MISS,)


def test_a_server_down_or_restarted_gives_faults_then_misses(redis_server: RedisServer, redis_url: str) -> None:
    tier = RedisTier(RedisTierConfig(redis_url, socket_timeout_s=0.5))
    tier.write(job((3,)), [payload(3)], [False])
    redis_server._kill()
    try:
        assert tier.read(job((3,)), [out()])[0] == (FAULT,)
        assert tier.probe(job((3,))) == (FAULT,)
        assert tier.write(job((3,)), [payload(3)], [False]) == (FAULT,)
    finally:
        redis_server.start()
    assert tier.read(job((3,)), [out()])[0] == (MISS,)  # nothing survives a restart
    assert tier.write(job((3,)), [payload(3)], [False]) == (OK,)


def test_password_in_config_and_in_url(redis_server: RedisServer) -> None:
    # A second server of its own (the fixture's only proves redis-server is installed).
    server = RedisServer(password="s3cret").start()
    try:
        plain_url = f"redis://127.0.0.1:{server.port}/0"
        assert RedisTier(RedisTierConfig(plain_url)).write(job((1,)), [payload(1)], [False]) == (FAULT,)
        with_config = RedisTier(RedisTierConfig(plain_url, password="s3cret"))
        assert with_config.write(job((1,)), [payload(1)], [False]) == (OK,)
        assert RedisTier(RedisTierConfig(server.url)).read(job((1,)), [out()])[0] == (OK,)
    finally:
        server.stop()


def test_a_tls_server_through_a_rediss_url(redis_server: RedisServer) -> None:
    try:
        server = RedisServer(password="pw", tls=True).start()
    except (RedisServerMissing, RuntimeError) as error:  # openssl missing, or a server built without TLS
        pytest.skip(f"no TLS redis-server here: {error}")
    try:
        tier = RedisTier(RedisTierConfig(server.url, ssl_ca_certs=server.ca_file))
        assert server.url.startswith("rediss://:pw@")
        assert tier.write(job((1, 2)), [payload(1), payload(2)], [False, False]) == (OK, OK)
        outs = [out(), out()]
        assert tier.read(job((1, 2)), outs) == ((OK, OK), 0)
        assert outs[0] == payload(1) and outs[1] == payload(2)
    finally:
        server.stop()


def test_a_tls_url_configures_a_tls_connection() -> None:
    tier = RedisTier(RedisTierConfig("rediss://:pw@127.0.0.1:1/0", ssl_ca_certs="/nonexistent/ca.pem"))
    kwargs = tier.client.connection_pool.connection_kwargs
    assert tier.client.connection_pool.connection_class.__name__ == "SSLConnection"
    assert kwargs["password"] == "pw" and kwargs["ssl_ca_certs"] == "/nonexistent/ca.pem"


def test_free_port_keeps_to_the_configured_range(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from kvoffload_lab.redis_server import PORTS_VARIABLE, free_port

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        monkeypatch.setenv(PORTS_VARIABLE, f"{port}-{port}")
        with pytest.raises(RuntimeError, match=f"no free loopback port in {PORTS_VARIABLE}={port}-{port}"):
            free_port()
    assert free_port() == port
    monkeypatch.setenv(PORTS_VARIABLE, "low-high")
    with pytest.raises(ValueError, match="expected LOW-HIGH"):
        free_port()
