"""``KVOffloadSpec``: kvoffload's manager, policies and mover inside vLLM's own ``OffloadingConnector``.

vLLM loads it by the path users write in their config, ``spec_module_path: "kvoffload.vllm.spec"``,
and reads the class with ``getattr``; the class is imported on that first read, so that importing
:mod:`.shared_pool` (which needs no vLLM) does not import vLLM through :mod:`.spec`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvoffload.vllm.spec.spec import KVOffloadSpec

__all__ = ["KVOffloadSpec"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.spec"), name)
    globals()[name] = value  # later reads find it without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
