"""``RedisTier``: a tier shared by engine instances on a Redis (or Valkey) server.

Keys are ``{namespace}:{salt}:{chained block hash}`` where the namespace names the model and the KV
layout: engines serving another model or layout never see these chunks, and requests with
different cache salts (tenants) never share one. Values are records (kvoffload.tiers.record: the
writer's id, the key and an XXH3 checksum, then the chunk). The gets or sets of a job go in one
pipeline on one pooled connection, with the chunks sent from and received into the CPU blocks
themselves (kvoffload.tiers.resp).

Eviction is the server's (``maxmemory-policy``, e.g. allkeys-lru). A key gone between lookup and
read is a ``miss``; a server that is down or restarted gives ``fault``s (connection refused,
timeouts) and then misses: the request recomputes, nothing crashes, no wrong block is served.
The URL may carry a password and use TLS (``rediss://:password@host:port/0``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from kvoffload.offload.types import OffloadKey
from kvoffload.tiers.protocol import CORRUPT, FAULT, MISS, OK, TierJob
from kvoffload.tiers.record import HEADER_BYTES, pack_header, verify_header
from kvoffload.tiers.resp import ReplyReader, RespError, exists_command, get_command, send_all, set_command

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
        buffers: list[bytes | memoryview] = []
        for key, payload, flip in zip(job.keys, payloads, corrupt, strict=True):
            header = pack_header(key, payload, self.writer)
            if flip:
                flipped = bytearray(payload)
                flipped[0] ^= 0xFF
                payload = memoryview(flipped)
            buffers += set_command(self.key_name(key, job.salt).encode(), header, payload, self.config.ttl_s)
        results: list[str] = []

        def exchange(reader: ReplyReader) -> None:
            send_all(reader.sock, buffers)
            for _ in job.keys:
                try:
                    reader.simple()
                    results.append(OK)
                except RespError:  # e.g. OOM with maxmemory-policy noeviction
                    results.append(FAULT)

        if not self._exchange(exchange):
            return (FAULT,) * len(job.keys)
        return tuple(results)

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]:
        """GET every chunk in one pipeline, each reply received straight into its CPU block, then
        verified. Returns the per-key results and how many verified chunks another writer stored."""
        results: list[str] = []
        foreign = 0

        def exchange(reader: ReplyReader) -> None:
            nonlocal foreign
            send_all(reader.sock, [get_command(self.key_name(key, job.salt).encode()) for key in job.keys])
            header = memoryview(bytearray(HEADER_BYTES))
            crlf = memoryview(bytearray(2))
            for key, out in zip(job.keys, outs, strict=True):
                length = reader.bulk_length()
                if length < 0:
                    results.append(MISS)
                    continue
                if length != HEADER_BYTES + len(out):
                    reader.skip(length + 2)
                    results.append(CORRUPT)
                    continue
                reader.read_into(header)
                reader.read_into(out)
                reader.read_into(crlf)
                result, writer = verify_header(header, key, out)
                foreign += result == OK and writer != self.writer
                results.append(result)

        if not self._exchange(exchange):
            return (FAULT,) * len(job.keys), 0
        return tuple(results), foreign

    def probe(self, job: TierJob) -> tuple[str, ...]:
        """EXISTS for every key in one pipeline: ``ok`` (held) or ``miss`` per key, all ``fault``
        if the server is unavailable. A key may still vanish before the promotion reads it."""
        results: list[str] = []

        def exchange(reader: ReplyReader) -> None:
            send_all(reader.sock, [exists_command(self.key_name(key, job.salt).encode()) for key in job.keys])
            results.extend(OK if reader.integer() else MISS for _ in job.keys)

        if not self._exchange(exchange):
            return (FAULT,) * len(job.keys)
        return tuple(results)

    def _exchange(self, exchange: Callable[[ReplyReader], None]) -> bool:
        """Run ``exchange`` on a pooled connection; False if the server is unavailable (the
        connection is then dropped: its stream is in an unknown state)."""
        pool = self.client.connection_pool
        try:
            connection = pool.get_connection()
        except UNAVAILABLE:
            return False
        try:
            exchange(ReplyReader(connection._sock))
        except (*UNAVAILABLE, RespError, ValueError):
            connection.disconnect()
            return False
        finally:
            pool.release(connection)
        return True

    def close(self) -> None:
        self.client.close()
