"""Fixtures of the tier tests: a private redis-server on a free loopback port (temporary directory,
nothing persisted), started once per test session and stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvoffload.tiers.redis_server import INSTALL_HINT, RedisServer, RedisServerMissing


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    try:
        server = RedisServer(maxmemory="64mb")
    except RedisServerMissing:
        pytest.skip(f"redis-server is not installed: {INSTALL_HINT}")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The server's URL, emptied before each test (and restarted if a test stopped it)."""
    import redis

    try:
        redis.Redis.from_url(redis_server.url).flushall()
    except redis.exceptions.ConnectionError:
        redis_server.restart()
    yield redis_server.url
