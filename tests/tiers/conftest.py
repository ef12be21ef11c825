"""Fixtures of the tier tests: a private redis-server on a free loopback port (temporary directory,
nothing persisted), started once per test session and stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvoffload_lab.redis_server import RedisServer
from redis_servers import running_server


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    yield from running_server()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The server's URL, emptied before each test (and restarted if a test stopped it)."""
    import redis

    try:
        redis.Redis.from_url(redis_server.url).flushall()
    except redis.exceptions.ConnectionError:
        redis_server.restart()
    yield redis_server.url
