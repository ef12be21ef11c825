"""``RedisTier``: a tier shared by engine instances on a Redis (or Valkey) server.

A chunk's key name is its scope (kvoffload.tiers.record.Namespace: model, KV layout,
tensor-parallel rank and the request's cache salt, each length-prefixed) followed by the full
key in hex: engines serving another model, layout or rank never see these chunks, requests with
different cache salts (tenants) never share one, and no salt can spell another namespace. Values
are records (kvoffload.tiers.record: the writer's id, the full key and an XXH3-128 checksum over
scope, key and chunk, then the chunk), so a value copied under another key name is refused on
read. The gets or sets of a job go in one pipeline on one pooled connection, with the chunks sent
from and received into the CPU blocks themselves (kvoffload.tiers.resp).

Eviction is the server's (``maxmemory-policy``, e.g. allkeys-lru). A key gone between lookup and
read is a ``miss``; a value that does not verify, or of another type, is ``corrupt`` (only that
chunk: the pipeline stays in step) and stays on the server until a cascade overwrites it. A server
that is down, restarted, refuses the password or lacks the database gives ``fault``s (logged once
per outage, counted in ``stats``) and then misses: the request recomputes, nothing is raised, no
wrong block is served. The URL may carry a password and use TLS (``rediss://:password@host:port/0``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.connection import parse_url

from kvoffload.offload.types import OffloadKey
from kvoffload.tiers.health import Availability
from kvoffload.tiers.protocol import CORRUPT, FAULT, MISS, OK, TierConfigError, TierJob
from kvoffload.tiers.record import Namespace, header_bytes, key_bytes, pack_header, verify_header
from kvoffload.tiers.resp import (
    ErrorReply,
    ReplyReader,
    RespError,
    exists_command,
    get_command,
    send_all,
    set_command,
)

# Errors that mean "the tier is unavailable right now" (unreachable, timed out, wrong password,
# a database the server lacks: redis-py raises ResponseError for that), never "the program is wrong".
UNAVAILABLE = (redis.exceptions.RedisError, OSError)


def _setting_error(name: str, value: object, expected: str) -> TierConfigError:
    return TierConfigError(f"RedisTierConfig.{name}={value!r}: {expected}")


@dataclass(frozen=True)
class RedisTierConfig:
    """Where the server is and how chunks are namespaced; every setting is checked here.

    ``url``: ``redis://[:password@]host:port/db`` or ``rediss://`` for TLS; ``password`` (never
    shown by ``repr``) overrides the URL's; ``ssl_ca_certs`` for a private CA; ``model``,
    ``layout`` and ``rank`` (the tensor-parallel rank) name the namespace; ``socket_timeout_s``
    (> 0) bounds every connect and reply; ``ttl_s`` (a whole number of seconds > 0, or None for
    no expiry) is set on every chunk written.
    """

    url: str = "redis://127.0.0.1:6379/0"
    model: str = "model"
    layout: str = "layout"
    password: str | None = field(default=None, repr=False)
    ssl_ca_certs: str | None = None
    socket_timeout_s: float = 2.0
    ttl_s: int | None = None
    rank: int = 0

    def __post_init__(self) -> None:
        shown = self.display_url if isinstance(self.url, str) else self.url
        try:
            parts = urlsplit(self.url) if isinstance(self.url, str) else None
        except ValueError:  # e.g. an unclosed [IPv6 address
            parts = None
        if parts is None or parts.scheme not in ("redis", "rediss"):
            raise _setting_error("url", shown, "expected redis://host:port/db or rediss://...")
        try:
            parts.port  # noqa: B018 (parsing the port is the check)
        except ValueError:
            raise _setting_error("url", shown, "the port must be a number in 0-65535") from None
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise _setting_error("url", shown, "the database (after the last /) must be an integer >= 0")
        if self.password is not None and not isinstance(self.password, str):
            raise TierConfigError("RedisTierConfig.password: must be a string or None")
        timeout = self.socket_timeout_s
        if (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not math.isfinite(timeout)
                or timeout <= 0):
            raise _setting_error("socket_timeout_s", timeout, "must be a finite number of seconds > 0")
        ttl = self.ttl_s
        if ttl is not None and (not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0):
            raise _setting_error("ttl_s", ttl, "must be a whole number of seconds > 0, or None for no expiry")
        try:
            self.namespace  # noqa: B018 (building the namespace checks model, layout and rank)
        except TierConfigError as error:
            raise TierConfigError(f"RedisTierConfig: {error}") from None

    def __repr__(self) -> str:
        # Never the password, neither the config's nor the URL's.
        return (f"RedisTierConfig(url={self.display_url!r}, model={self.model!r}, layout={self.layout!r}, "
                f"rank={self.rank}, ttl_s={self.ttl_s}, socket_timeout_s={self.socket_timeout_s})")

    @property
    def namespace(self) -> Namespace:
        return Namespace(self.model, self.layout, self.rank)

    @property
    def display_url(self) -> str:
        """The URL without its password (for messages and logs)."""
        if not isinstance(self.url, str):
            return repr(self.url)
        try:
            parts = urlsplit(self.url)
            netloc = parts.netloc.rpartition("@")[2]
        except ValueError:
            return "<unparsable url>"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class RedisTier:
    """The I/O side of one Redis tier (a redis-py client is thread-safe through its pool)."""

    def __init__(self, config: RedisTierConfig, writer: int = 0) -> None:
        self.config = config
        self.writer = writer
        options: dict[str, object] = {
            "socket_timeout": config.socket_timeout_s,
            "socket_connect_timeout": config.socket_timeout_s,
        }
        if config.ssl_ca_certs is not None:
            options["ssl_ca_certs"] = config.ssl_ca_certs
        options.update(parse_url(config.url))
        if config.password is not None:
            options["password"] = config.password  # the config's password wins over the URL's
        self.client = redis.Redis(connection_pool=redis.ConnectionPool(**options))
        self.namespace = config.namespace
        self.health = Availability(f"redis tier {config.display_url}")

    def key_name(self, key: OffloadKey, salt: str) -> str:
        """The Redis key of ``key`` under ``salt``: the scope, then the full key in hex."""
        return self._key_names((key,), self.namespace.scope(salt))[0].decode()

    @staticmethod
    def _key_names(keys: Sequence[OffloadKey], scope: bytes) -> list[bytes]:
        return [scope + key_bytes(key).hex().encode() for key in keys]

    def stats(self) -> dict[str, int]:
        """Availability counters (see kvoffload.tiers.health.Availability.stats)."""
        return self.health.stats()

    def write(self, job: TierJob, payloads: Sequence[memoryview], corrupt: Sequence[bool]) -> tuple[str, ...]:
        """SET every chunk in one pipeline; every key is a ``fault`` if the server is unavailable."""
        scope = self.namespace.scope(job.salt)
        buffers: list[bytes | memoryview] = []
        for key, name, payload, flip in zip(job.keys, self._key_names(job.keys, scope), payloads, corrupt, strict=True):
            header = pack_header(scope, key, payload, self.writer)
            if flip:
                flipped = bytearray(payload)
                flipped[0] ^= 0xFF
                payload = memoryview(flipped)
            buffers += set_command(name, header, payload, self.config.ttl_s)
        results: list[str] = []

        def exchange(reader: ReplyReader) -> None:
            send_all(reader.sock, buffers)
            for _ in job.keys:
                try:
                    reader.simple()
                    results.append(OK)
                except ErrorReply:  # e.g. OOM with maxmemory-policy noeviction
                    results.append(FAULT)

        if not self._exchange(exchange):
            return (FAULT,) * len(job.keys)
        return tuple(results)

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]:
        """GET every chunk in one pipeline, each reply received straight into its CPU block, then
        verified. Returns the per-key results and how many verified chunks another writer stored."""
        scope = self.namespace.scope(job.salt)
        results: list[str] = []
        foreign = 0

        def exchange(reader: ReplyReader) -> None:
            nonlocal foreign
            send_all(reader.sock, [get_command(name) for name in self._key_names(job.keys, scope)])
            crlf = memoryview(bytearray(2))
            for key, out in zip(job.keys, outs, strict=True):
                try:
                    length = reader.bulk_length()
                except ErrorReply:  # e.g. WRONGTYPE: a value of another type under this name
                    results.append(CORRUPT)
                    continue
                if length < 0:
                    results.append(MISS)
                    continue
                header = memoryview(bytearray(header_bytes(key)))
                if length != len(header) + len(out):
                    reader.skip(length + 2)
                    results.append(CORRUPT)
                    continue
                reader.read_into(header)
                reader.read_into(out)
                reader.read_into(crlf)
                result, writer = verify_header(header, scope, key, out)
                foreign += result == OK and writer != self.writer
                results.append(result)

        if not self._exchange(exchange):
            return (FAULT,) * len(job.keys), 0
        return tuple(results), foreign

    def probe(self, job: TierJob) -> tuple[str, ...]:
        """EXISTS for every key in one pipeline: ``ok`` (held) or ``miss`` per key, all ``fault``
        if the server is unavailable. A key may still vanish before the promotion reads it."""
        results: list[str] = []
        names = self._key_names(job.keys, self.namespace.scope(job.salt))

        def exchange(reader: ReplyReader) -> None:
            send_all(reader.sock, [exists_command(name) for name in names])
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
        except UNAVAILABLE as error:
            self.health.failed(f"{type(error).__name__}: {error}")
            return False
        try:
            exchange(ReplyReader(connection._sock))
        except (*UNAVAILABLE, RespError, ValueError) as error:
            connection.disconnect()
            self.health.failed(f"{type(error).__name__}: {error}")
            return False
        finally:
            pool.release(connection)
        self.health.succeeded()
        return True

    def close(self) -> None:
        self.client.close()
