"""``RedisTier``: a tier shared by engine instances on a Redis (or Valkey) server or a Redis Cluster.

A chunk's key name is the full key in hex as a hash tag (``{00ab...}``), then its scope
(kvoffload.tiers.record.Namespace: model, KV layout, tensor-parallel rank and the request's cache
salt, each length-prefixed): engines serving another model, layout or rank never see these chunks,
requests with different cache salts (tenants) never share one, and no salt can spell another
namespace. In a Redis Cluster the tag alone picks the hash slot, so chunks spread over the masters
whatever the salt holds. Values are records (kvoffload.tiers.record: the writer's id, the full key
and an XXH3-128 checksum over scope, key and chunk, then the chunk), so a value copied under
another key name is refused on read. The gets or sets of a job go in one pipeline per server on a
pooled connection, with the chunks sent from and received into the CPU blocks themselves
(kvoffload.tiers.resp).

Eviction is the server's (``maxmemory-policy``, e.g. allkeys-lru). A key gone between lookup and
read is a ``miss``; a value that does not verify, or of another type, is ``corrupt`` (only that
chunk: the pipeline stays in step) and stays on the server until a cascade overwrites it. A server
that is down, restarted, refuses the password or lacks the database gives ``fault``s (logged once
per outage, counted in ``stats``) and then misses: the request recomputes, nothing is raised, no
wrong block is served. The URL may carry a password and use TLS (``rediss://:password@host:port/0``).
In a cluster the same holds per master; a key answered MOVED is asked again of its new master in the
same job (once), and one whose slot is still migrating (ASK) is a miss (kvoffload.tiers.redis_cluster).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.connection import Connection, parse_url

from kvoffload.offload.types import OffloadKey
from kvoffload.tiers.protocol import CORRUPT, FAULT, MISS, OK, TierConfigError, TierJob
from kvoffload.tiers.record import Namespace, header_bytes, key_bytes, pack_header, verify_header
from kvoffload.tiers.redis_cluster import UNAVAILABLE, ClusterRoutes, Node, SingleServer
from kvoffload.tiers.resp import (
    ErrorReply,
    ReplyReader,
    RespError,
    exists_command,
    get_command,
    send_all,
    set_command,
)

# Error replies that send a key elsewhere (a Redis Cluster moving or migrating its slot).
REDIRECTIONS = ("MOVED", "ASK")
# Error replies of a server that cannot serve right now: an outage of that server.
UNAVAILABLE_REPLIES = ("CLUSTERDOWN", "LOADING", "MASTERDOWN", "BUSY")


def _setting_error(name: str, value: object, expected: str) -> TierConfigError:
    return TierConfigError(f"RedisTierConfig.{name}={value!r}: {expected}")


@dataclass(frozen=True)
class RedisTierConfig:
    """Where the server is and how chunks are namespaced; every setting is checked here.

    ``url``: ``redis://[:password@]host:port/db`` or ``rediss://`` for TLS; ``password`` (never
    shown by ``repr``) overrides the URL's; ``ssl_ca_certs`` for a private CA; ``model``,
    ``layout`` and ``rank`` (the tensor-parallel rank) name the namespace; ``socket_timeout_s``
    (> 0) bounds every connect and reply; ``ttl_s`` (a whole number of seconds > 0, or None for
    no expiry) is set on every chunk written. ``cluster=True``: the URL names any node of a Redis
    Cluster (database 0, the only one a cluster has), and each chunk goes to its hash slot's
    master (see kvoffload.tiers.redis_cluster).
    """

    url: str = "redis://127.0.0.1:6379/0"
    model: str = "model"
    layout: str = "layout"
    password: str | None = field(default=None, repr=False)
    ssl_ca_certs: str | None = None
    socket_timeout_s: float = 2.0
    ttl_s: int | None = None
    rank: int = 0
    cluster: bool = False

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
        if not isinstance(self.cluster, bool):
            raise _setting_error("cluster", self.cluster, "must be True (a Redis Cluster) or False (one server)")
        if self.cluster and db not in ("", "0"):
            raise _setting_error("url", shown, "a Redis Cluster has only database 0 (end the URL with /0 or no path)")
        try:
            self.namespace  # noqa: B018 (building the namespace checks model, layout and rank)
        except TierConfigError as error:
            raise TierConfigError(f"RedisTierConfig: {error}") from None

    def __repr__(self) -> str:
        # Never the password, neither the config's nor the URL's.
        return (f"RedisTierConfig(url={self.display_url!r}, model={self.model!r}, layout={self.layout!r}, "
                f"rank={self.rank}, ttl_s={self.ttl_s}, socket_timeout_s={self.socket_timeout_s}, "
                f"cluster={self.cluster})")

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
    """The I/O side of one Redis tier, a single server or a Redis Cluster (``config.cluster``);
    safe to share between the driver's I/O threads (connections come from per-server pools)."""

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
        self.routes = (ClusterRoutes if config.cluster else SingleServer)(options, config.display_url)
        # The URL's server (a cluster's seed node), for callers that want plain redis-py commands.
        self.client = redis.Redis(connection_pool=self.routes.seed.pool)
        self.namespace = config.namespace

    def key_name(self, key: OffloadKey, salt: str) -> str:
        """The Redis key of ``key`` under ``salt``: the full key in hex as the hash tag, then the scope."""
        return self._key_names((key,), self.namespace.scope(salt))[0].decode()

    @staticmethod
    def _key_names(keys: Sequence[OffloadKey], scope: bytes) -> list[bytes]:
        # The name starts with its own hash tag, so a Redis Cluster places each chunk by its key
        # alone (chunks spread over the masters) and no brace in a salt or model name can pick
        # the slot: the first "{" is always this one, and hex has no "}".
        return [b"{" + key_bytes(key).hex().encode() + b"}" + scope for key in keys]

    def stats(self) -> dict[str, int]:
        """Availability counters (see kvoffload.tiers.health.Availability.stats; a cluster adds
        its own, see kvoffload.tiers.redis_cluster.ClusterRoutes.stats)."""
        return self.routes.stats()

    def write(self, job: TierJob, payloads: Sequence[memoryview], corrupt: Sequence[bool]) -> tuple[str, ...]:
        """SET every chunk, pipelined per server; a chunk whose server is unavailable is a ``fault``."""
        scope = self.namespace.scope(job.salt)
        names = self._key_names(job.keys, scope)

        def command(index: int) -> list[bytes | memoryview]:
            payload = payloads[index]
            header = pack_header(scope, job.keys[index], payload, self.writer)
            if corrupt[index]:
                flipped = bytearray(payload)
                flipped[0] ^= 0xFF
                payload = memoryview(flipped)
            return set_command(names[index], header, payload, self.config.ttl_s)

        def receive(reader: ReplyReader, index: int) -> str:
            reader.simple()
            return OK

        # A refused SET (e.g. OOM with maxmemory-policy noeviction) or a moved slot: not stored.
        return tuple(self._pipeline(names, command, receive, redirected=FAULT))

    def read(self, job: TierJob, outs: Sequence[memoryview]) -> tuple[tuple[str, ...], int]:
        """GET every chunk, pipelined per server, each reply received straight into its CPU block,
        then verified. Returns the per-key results and how many verified chunks another writer stored."""
        scope = self.namespace.scope(job.salt)
        writers = [self.writer] * len(job.keys)
        crlf = memoryview(bytearray(2))

        def receive(reader: ReplyReader, index: int) -> str:
            key, out = job.keys[index], outs[index]
            length = reader.bulk_length()
            if length < 0:
                return MISS
            header = memoryview(bytearray(header_bytes(key)))
            if length != len(header) + len(out):
                reader.skip(length + 2)
                return CORRUPT
            reader.read_into(header)
            reader.read_into(out)
            reader.read_into(crlf)
            result, writers[index] = verify_header(header, scope, key, out)
            return result

        names = self._key_names(job.keys, scope)
        # A value of another type (WRONGTYPE) is corrupt; a moved slot is not held here any more.
        results = self._pipeline(
            names, lambda index: [get_command(names[index])], receive, redirected=MISS, wrong_type=CORRUPT
        )
        # Counted at the end: a server that breaks off later makes its verified chunks faults too.
        foreign = sum(result == OK and writer != self.writer for result, writer in zip(results, writers, strict=True))
        return tuple(results), foreign

    def probe(self, job: TierJob) -> tuple[str, ...]:
        """EXISTS for every key, pipelined per server: ``ok`` (held) or ``miss`` per key, ``fault``
        where the server is unavailable. A key may still vanish before the promotion reads it."""
        names = self._key_names(job.keys, self.namespace.scope(job.salt))

        def receive(reader: ReplyReader, index: int) -> str:
            return OK if reader.integer() else MISS

        return tuple(self._pipeline(
            names, lambda index: [exists_command(names[index])], receive, redirected=MISS
        ))

    def _pipeline(
        self,
        names: Sequence[bytes],
        command: Callable[[int], Sequence[bytes | memoryview]],
        receive: Callable[[ReplyReader, int], str],
        redirected: str,
        wrong_type: str = FAULT,
    ) -> list[str]:
        """Send every key's ``command`` to its server (all servers first, then every reply is read),
        and ``receive`` each reply: the per-key results. An error reply makes that key
        ``redirected`` (MOVED, ASK), ``wrong_type`` (WRONGTYPE) or a ``fault`` (CLUSTERDOWN and the
        like also count as an outage of that server). A server that cannot be reached, or breaks
        off, makes all its keys ``fault``: nothing is raised."""
        results = [FAULT] * len(names)  # a key no server serves stays a fault
        moved = self._round(list(range(len(names))), names, command, receive, redirected, wrong_type, results)
        if moved:
            # Each MOVED reply taught the slot table its key's new master: one more round for those
            # keys, so a finished resharding costs no miss. ASK (a slot still migrating) stays a miss.
            self._round(moved, names, command, receive, redirected, wrong_type, results)
        return results

    def _round(
        self,
        wanted: list[int],
        names: Sequence[bytes],
        command: Callable[[int], Sequence[bytes | memoryview]],
        receive: Callable[[ReplyReader, int], str],
        redirected: str,
        wrong_type: str,
        results: list[str],
    ) -> list[int]:
        """One pipelined round over the keys ``wanted`` (indices into ``names``), results written
        into ``results``; returns the keys answered MOVED."""
        moved: list[int] = []
        sent = []
        for node, positions in self.routes.assign([names[index] for index in wanted]):
            indices = [wanted[position] for position in positions]
            connection = self._send(node, [buffer for index in indices for buffer in command(index)])
            if connection is not None:
                sent.append((node, indices, connection))
        for node, indices, connection in sent:
            outage = None
            try:
                reader = ReplyReader(connection._sock)
                for index in indices:
                    try:
                        results[index] = receive(reader, index)
                    except ErrorReply as error:
                        results[index], reason = self._refused(error, redirected, wrong_type)
                        outage = outage or reason
                        if str(error).startswith("MOVED ") and results[index] == redirected:
                            moved.append(index)
            except (*UNAVAILABLE, RespError, ValueError) as error:
                connection.disconnect()  # its stream is in an unknown state
                for index in indices:
                    results[index] = FAULT
                outage = f"{type(error).__name__}: {error}"
                self.routes.unreachable()
            finally:
                node.pool.release(connection)
            if outage is None:
                node.health.succeeded()
            else:
                node.health.failed(outage)
        return moved

    def _send(self, node: Node, buffers: list[bytes | memoryview]) -> Connection | None:
        """A pooled connection of ``node`` with ``buffers`` sent on it, None if it is unavailable."""
        try:
            connection = node.pool.get_connection()
        except UNAVAILABLE as error:
            node.health.failed(f"{type(error).__name__}: {error}")
            self.routes.unreachable()
            return None
        try:
            send_all(connection._sock, buffers)
        except (*UNAVAILABLE, ValueError) as error:
            connection.disconnect()
            node.pool.release(connection)
            node.health.failed(f"{type(error).__name__}: {error}")
            self.routes.unreachable()
            return None
        return connection

    def _refused(self, error: ErrorReply, redirected: str, wrong_type: str) -> tuple[str, str | None]:
        """A key's result for an error reply, and the outage it shows (None if it shows none)."""
        reply = str(error)
        kind = reply.partition(" ")[0]
        if kind == "WRONGTYPE":
            return wrong_type, None
        if kind in REDIRECTIONS:
            if self.routes.redirected(reply):
                return redirected, None
            return FAULT, f"the server answered {kind}: it is a Redis Cluster node (set RedisTierConfig.cluster=True)"
        if kind in UNAVAILABLE_REPLIES:
            self.routes.unreachable()
            return FAULT, reply
        return FAULT, None

    def close(self) -> None:
        self.routes.close()
