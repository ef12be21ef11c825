"""``RedisClusterTier``: the shared tier on a Redis Cluster (``"redis_tier": {"cluster": true}``).

The same key names and records as :class:`~kvoffload.tiers.redis_tier.RedisTier` (the scope, then
the full key in hex; a header binding scope, key and an XXH3-128 checksum), so a value is
verified on every read. The commands of a job go in one redis-py cluster pipeline, which sends
each node its keys and follows the cluster's redirections (``MOVED`` after a slot migration,
``ASK`` during one). The chunks are copied (no zero-copy socket path as on a single server).

Anything the cluster answers with an error, or a node that is down, is a ``fault`` of that key or
of the whole job: the request recomputes, nothing is raised into the engine step. One log line
per outage, and counters, through :class:`~kvoffload.tiers.health.Availability`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster

from kvoffload.tiers.health import Availability
from kvoffload.tiers.protocol import CORRUPT, FAULT, MISS, OK, TierJob
from kvoffload.tiers.record import Namespace, header_bytes, key_bytes, pack_header, verify_header

# Errors that mean "the cluster, or part of it, is unavailable right now".
UNAVAILABLE = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError)


class RedisClusterTier:
    """The I/O side of a Redis tier on a cluster (redis-py's cluster client is thread-safe)."""

    def __init__(
        self, url: str, namespace: Namespace, password: str | None, socket_timeout_s: float, ttl_s: int | None,
        writer: int = 0,
    ) -> None:
        self.namespace = namespace
        self.ttl_s = ttl_s
        self.writer = writer
        self.health = Availability(f"redis cluster tier {url}")
        self._options: dict[str, Any] = {
            "password": password, "socket_timeout": socket_timeout_s, "socket_connect_timeout": socket_timeout_s,
            "require_full_coverage": False,
        }
        self._url = url
        # Made at first use (it asks the cluster for its slots), so an engine starts while the cluster is down.
        self._client: RedisCluster | None = None
        self._lock = threading.Lock()

    def _cluster(self) -> RedisCluster:
        with self._lock:
            if self._client is None:
                self._client = RedisCluster.from_url(self._url, **self._options)
            return self._client

    def _names(self, job: TierJob) -> tuple[bytes, list[bytes]]:
        scope = self.namespace.scope(job.salt)
        return scope, [scope + key_bytes(key).hex().encode() for key in job.keys]

    def _pipeline(self, queue: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[Any] | None:
        """Each command's reply (an exception for a failed one), or None if the cluster is unreachable."""
        try:
            pipe = self._cluster().pipeline()
            for command, args, options in queue:
                getattr(pipe, command)(*args, **options)
            replies = pipe.execute(raise_on_error=False)
        except UNAVAILABLE as error:
            self.health.failed(type(error).__name__)
            return None
        if any(isinstance(reply, Exception) for reply in replies):
            self.health.failed("a node refused a command")
        else:
            self.health.succeeded()
        return replies

    def write(self, job: TierJob, payloads: Sequence[memoryview], corrupt: Sequence[bool]) -> tuple[str, ...]:
        """SET every chunk (with the TTL); a key whose node refused is a ``fault``."""
        scope, names = self._names(job)
        queue = []
        for key, name, payload, flip in zip(job.keys, names, payloads, corrupt, strict=True):
            value = bytearray(pack_header(scope, key, payload, self.writer)) + payload
            if flip:
                value[-len(payload)] ^= 0xFF
            queue.append(("set", (name, bytes(value)), {"ex": self.ttl_s}))
        replies = self._pipeline(queue)
        if replies is None:
            return (FAULT,) * len(job.keys)
        return tuple(OK if reply is True else FAULT for reply in replies)

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]:
        """GET every chunk into ``outs`` and verify it; returns the results and the verified chunks
        another writer stored."""
        scope, names = self._names(job)
        replies = self._pipeline([("get", (name,), {}) for name in names])
        if replies is None:
            return (FAULT,) * len(job.keys), 0
        results: list[str] = []
        foreign = 0
        for key, out, reply in zip(job.keys, outs, replies, strict=True):
            if reply is None:
                results.append(MISS)
                continue
            if isinstance(reply, redis.exceptions.ResponseError) and "WRONGTYPE" in str(reply):
                results.append(CORRUPT)
                continue
            if isinstance(reply, Exception):
                results.append(FAULT)
                continue
            head = header_bytes(key)
            if len(reply) != head + len(out):
                results.append(CORRUPT)
                continue
            out[:] = memoryview(reply)[head:]
            result, writer = verify_header(memoryview(reply)[:head], scope, key, out)
            foreign += result == OK and writer != self.writer
            results.append(result)
        return tuple(results), foreign

    def probe(self, job: TierJob) -> tuple[str, ...]:
        """EXISTS for every key: ``ok`` (held), ``miss``, or ``fault`` where a node did not answer."""
        _, names = self._names(job)
        replies = self._pipeline([("exists", (name,), {}) for name in names])
        if replies is None:
            return (FAULT,) * len(job.keys)
        return tuple(FAULT if isinstance(reply, Exception) else OK if reply else MISS for reply in replies)

    def stats(self) -> dict[str, int]:
        return self.health.stats()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
