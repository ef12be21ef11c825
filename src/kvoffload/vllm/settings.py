"""Reading ``kv_connector_extra_config``: one error type, one line naming the key and the value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ConfigError(ValueError):
    """``kv_connector_extra_config`` cannot be used: the message names the key and the value."""


def flag(extra: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """The boolean setting ``key`` (absent: ``default``). Only JSON booleans are accepted: a string
    such as ``"false"`` would otherwise read as true."""
    value = extra.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"kv_connector_extra_config[{key!r}] must be true or false, got {value!r}")
    return value
