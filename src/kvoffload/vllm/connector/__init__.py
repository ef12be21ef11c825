"""``KVOffloadConnector``: kvoffload's scheduler as a whole vLLM KV connector.

vLLM loads it by the path users write in their config, ``kv_connector_module_path:
"kvoffload.vllm.connector"``, and reads the class with ``getattr``; the class is imported on that
first read, so that importing :mod:`.scheduler_side` or :mod:`.worker_side` (which need no vLLM)
does not import vLLM through :mod:`.connector`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvoffload.vllm.connector.connector import KVOffloadConnector

__all__ = ["KVOffloadConnector"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.connector"), name)
    globals()[name] = value  # later reads find it without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
