"""``KVOffloadConnector``: kvoffload's scheduler as a whole vLLM KV connector.

vLLM loads it by the path users write in their config, ``kv_connector_module_path:
"kvoffload.vllm.connector"``, and reads the class with ``getattr``; the class is imported on that
first read, so that importing :mod:`.scheduler_side` or :mod:`.worker_side` (which need no vLLM)
does not import vLLM through :mod:`.connector`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvoffload.vllm.lazy_class import served_lazily

if TYPE_CHECKING:
    from kvoffload.vllm.connector.connector import KVOffloadConnector

__all__ = ["KVOffloadConnector"]
__getattr__, __dir__ = served_lazily(__name__, "connector", "KVOffloadConnector")
