"""Fixture bodies over the product's private Redis servers (:mod:`kvoffload_lab.redis_server`):
started on free loopback ports (within ``KVOFFLOAD_REDIS_PORTS`` when set), stopped by the
fixture, and a skip naming what to install when ``redis-server`` or ``redis-cli`` is missing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvoffload_lab.redis_server import INSTALL_HINT, LocalRedisCluster, RedisServer, RedisServerMissing


def running_server(maxmemory: str = "64mb", password: str | None = None) -> Iterator[RedisServer]:
    """A started redis-server, stopped afterwards."""
    try:
        server = RedisServer(maxmemory=maxmemory, password=password)
    except RedisServerMissing:
        pytest.skip(f"redis-server is not installed: {INSTALL_HINT}")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def running_cluster(maxmemory: str = "64mb") -> Iterator[LocalRedisCluster]:
    """A started 3-master Redis Cluster, stopped afterwards."""
    try:
        servers = LocalRedisCluster(maxmemory=maxmemory).start()
    except RedisServerMissing:
        pytest.skip(f"a Redis Cluster needs redis-server and redis-cli: {INSTALL_HINT}")
    try:
        yield servers
    finally:
        servers.stop()
