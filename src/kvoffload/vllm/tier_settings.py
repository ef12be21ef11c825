"""Secondary tiers from ``kv_connector_extra_config`` (no vLLM import: checked at engine start).

Two optional keys, each an object::

    "file_tier":  {"path": "/var/tmp/kvoffload.tier", "size_bytes": 1073741824}
    "redis_tier": {"url": "redis://127.0.0.1:6379/0", "password_env": "KVOFFLOAD_REDIS_PASSWORD",
                   "ttl_s": 3600, "socket_timeout_s": 2.0, "cluster": false}

Lookups ask the file tier first (local), then Redis (shared). The Redis password is read from the
environment variable whose *name* ``password_env`` gives, never from the configuration text: a URL
that carries a password is refused (the message masks it), and the password is never logged.
Every bad value gets one :class:`~kvoffload.vllm.settings.ConfigError` line naming the key and
the value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kvoffload.vllm.settings import ConfigError

FILE_KEYS = frozenset({"path", "size_bytes"})
REDIS_KEYS = frozenset({"url", "password_env", "ttl_s", "socket_timeout_s", "cluster"})
# The file tier's layout (kvoffload.tiers.file_tier): a header page, then slots of the chunk padded
# to the page and a one-page trailer.
PAGE = 4096


@dataclass(frozen=True)
class FileTierSettings:
    path: str
    size_bytes: int

    def slots(self, chunk_bytes: int) -> int:
        """Slots of ``chunk_bytes`` chunks that fit ``size_bytes`` (at least one, else ConfigError)."""
        slot_bytes = -(-chunk_bytes // PAGE) * PAGE + PAGE
        slots = (self.size_bytes - PAGE) // slot_bytes
        if slots < 1:
            raise ConfigError(
                f"kv_connector_extra_config['file_tier']['size_bytes'] = {self.size_bytes} is less than the "
                f"header page and one slot ({PAGE} + {slot_bytes} bytes for a {chunk_bytes}-byte chunk)"
            )
        return slots


@dataclass(frozen=True)
class RedisTierSettings:
    url: str
    password_env: str | None = None
    ttl_s: int | None = None
    socket_timeout_s: float = 2.0
    # A Redis Cluster: ``url`` names one of its nodes.
    cluster: bool = False

    def password(self) -> str | None:
        """The password from the environment (checked to be set at start)."""
        return None if self.password_env is None else os.environ[self.password_env]


@dataclass(frozen=True)
class TierSettings:
    file: FileTierSettings | None = None
    redis: RedisTierSettings | None = None

    @property
    def any(self) -> bool:
        return self.file is not None or self.redis is not None

    def for_rank(self, rank: int, world_size: int) -> TierSettings:
        """The settings of one tensor-parallel rank: with several, each rank's file tier is its
        own file, ``path.rankN`` (Redis keys carry the rank in their namespace)."""
        if world_size == 1 or self.file is None:
            return self
        return replace(self, file=replace(self.file, path=f"{self.file.path}.rank{rank}"))


def _where(section: str, key: str | None = None) -> str:
    return f"kv_connector_extra_config[{section!r}]" + ("" if key is None else f"[{key!r}]")


def _section(extra: Mapping[str, Any], section: str, known: frozenset[str]) -> Mapping[str, Any] | None:
    value = extra.get(section)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{_where(section)} must be an object, got {value!r}")
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(f"{_where(section, unknown[0])} is not a setting; known: {', '.join(sorted(known))}")
    return value


def _positive_int(section: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{_where(section, key)} must be a positive integer, got {value!r}")
    return value


def _file(section: Mapping[str, Any]) -> FileTierSettings:
    path = section.get("path")
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{_where('file_tier', 'path')} must be a file path, got {path!r}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"{_where('file_tier', 'path')} = {path!r}: directory {directory!r} does not exist")
    if os.path.isdir(path):
        raise ConfigError(f"{_where('file_tier', 'path')} = {path!r} is a directory, not a file")
    return FileTierSettings(path, _positive_int("file_tier", "size_bytes", section.get("size_bytes")))


def _masked(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, parts.fragment))


def _redis(section: Mapping[str, Any]) -> RedisTierSettings:
    url = section.get("url")
    if not isinstance(url, str):
        raise ConfigError(f"{_where('redis_tier', 'url')} must be a redis:// or rediss:// URL, got {url!r}")
    try:
        parts = urlsplit(url)
        port = parts.port
        database = parts.path.strip("/")
    except ValueError:
        raise ConfigError(f"{_where('redis_tier', 'url')} = {_masked(url)!r} is not a valid URL") from None
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ConfigError(f"{_where('redis_tier', 'url')} must be a redis:// or rediss:// URL, got {_masked(url)!r}")
    if parts.password is not None:
        raise ConfigError(
            f"{_where('redis_tier', 'url')} = {_masked(url)!r} carries a password: put it in an environment "
            "variable and name that variable in 'password_env'"
        )
    if port == 0:
        raise ConfigError(f"{_where('redis_tier', 'url')} = {url!r}: port 0")
    if database and not database.isdigit():
        raise ConfigError(f"{_where('redis_tier', 'url')} = {url!r}: database {database!r} is not a number")
    password_env = section.get("password_env")
    if password_env is not None:
        if not isinstance(password_env, str) or not password_env:
            raise ConfigError(f"{_where('redis_tier', 'password_env')} must name an environment variable, "
                              f"got {password_env!r}")
        if password_env not in os.environ:
            raise ConfigError(f"{_where('redis_tier', 'password_env')} = {password_env!r}: that environment "
                              "variable is not set")
    ttl = section.get("ttl_s")
    timeout = section.get("socket_timeout_s", 2.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ConfigError(f"{_where('redis_tier', 'socket_timeout_s')} must be a positive number, got {timeout!r}")
    cluster = section.get("cluster", False)
    if not isinstance(cluster, bool):
        raise ConfigError(f"{_where('redis_tier', 'cluster')} must be true or false, got {cluster!r}")
    return RedisTierSettings(
        url, password_env, None if ttl is None else _positive_int("redis_tier", "ttl_s", ttl), float(timeout), cluster
    )


def tier_settings(extra: Mapping[str, Any]) -> TierSettings:
    """The secondary tiers ``extra`` (``kv_connector_extra_config``) asks for; ConfigError naming the
    key and the value when one cannot work."""
    file_section = _section(extra, "file_tier", FILE_KEYS)
    redis_section = _section(extra, "redis_tier", REDIS_KEYS)
    return TierSettings(
        _file(file_section) if file_section is not None else None,
        _redis(redis_section) if redis_section is not None else None,
    )
