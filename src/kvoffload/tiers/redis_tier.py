"""``RedisTier``: a tier shared by engine instances on a Redis (or Valkey) server.

Keys are ``{namespace}:{salt}:{chained block hash}`` where the namespace names the model and the KV
layout: engines serving another model or layout never see these chunks, and requests with
different cache salts (tenants) never share one. Values are records (kvoffload.tiers.record: the
writer's id, the key and a CRC-32, then the chunk). Gets and sets of a job go in one pipeline.

Eviction is the server's (``maxmemory-policy``, e.g. allkeys-lru). A key gone between lookup and
read is a ``miss``; a server that is down or restarted gives ``fault``s (connection refused,
timeouts) and then misses: the request recomputes, nothing crashes, no wrong block is served.
The URL may carry a password and use TLS (``rediss://:password@host:port/0``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from kvoffload.offload.types import OffloadKey
from kvoffload.tiers.protocol import FAULT, MISS, OK, TierJob
from kvoffload.tiers.record import HEADER_BYTES, pack_header, verify

# Errors that mean "the tier is unavailable right now", never "the program is wrong".
UNAVAILABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


@dataclass(frozen=True)
class RedisTierConfig:
    """Where the server is and how chunks are namespaced.

    ``url``: ``redis://[:password@]host:port/db`` or ``rediss://`` for TLS; ``password`` overrides
    the URL's; ``ssl_ca_certs`` for a private CA; ``model`` and ``layout`` name the namespace.
    """

    url: str = "redis://127.0.0.1:6379/0"
    model: str = "model"
    layout: str = "layout"
    password: str | None = None
    ssl_ca_certs: str | None = None
    socket_timeout_s: float = 2.0
    ttl_s: int | None = None

    @property
    def namespace(self) -> str:
        return f"kvoffload:{self.model}:{self.layout}"


class RedisTier:
    """The I/O side of one Redis tier (a redis-py client is thread-safe through its pool)."""

    def __init__(self, config: RedisTierConfig, writer: int = 0) -> None:
        self.config = config
        self.writer = writer
        options: dict[str, object] = {
            "socket_timeout": config.socket_timeout_s,
            "socket_connect_timeout": config.socket_timeout_s,
        }
        if config.password is not None:
            options["password"] = config.password
        if config.ssl_ca_certs is not None:
            options["ssl_ca_certs"] = config.ssl_ca_certs
        self.client = redis.Redis.from_url(config.url, **options)

    def key_name(self, key: OffloadKey, salt: str) -> str:
        return f"{self.config.namespace}:{salt}:{key & ((1 << 64) - 1):016x}"

    def write(self, job: TierJob, payloads: Sequence[memoryview], corrupt: Sequence[bool]) -> tuple[str, ...]:
        """SET every chunk in one pipeline; every key is a ``fault`` if the server is unavailable."""
        pipe = self.client.pipeline(transaction=False)
        for key, payload, flip in zip(job.keys, payloads, corrupt, strict=True):
            value = bytearray(pack_header(key, payload, self.writer))
            value += payload
            if flip:
                value[HEADER_BYTES] ^= 0xFF
            pipe.set(self.key_name(key, job.salt), memoryview(value), ex=self.config.ttl_s)
        try:
            replies = pipe.execute(raise_on_error=False)
        except UNAVAILABLE:
            return (FAULT,) * len(job.keys)
        return tuple(OK if reply is True else FAULT for reply in replies)

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]:
        """GET every chunk in one pipeline; verify; copy verified payloads into ``outs``.
        Returns the per-key results and how many verified chunks another writer stored."""
        pipe = self.client.pipeline(transaction=False)
        for key in job.keys:
            pipe.get(self.key_name(key, job.salt))
        try:
            replies = pipe.execute(raise_on_error=False)
        except UNAVAILABLE:
            return (FAULT,) * len(job.keys), 0
        results = []
        foreign = 0
        for key, out, reply in zip(job.keys, outs, replies, strict=True):
            if reply is None:
                results.append(MISS)
                continue
            if isinstance(reply, Exception):
                results.append(FAULT)
                continue
            result, writer = verify(reply, key, len(out))
            if result == OK:
                out[:] = memoryview(reply)[HEADER_BYTES : HEADER_BYTES + len(out)]
                foreign += writer != self.writer
            results.append(result)
        return tuple(results), foreign

    def close(self) -> None:
        self.client.close()
