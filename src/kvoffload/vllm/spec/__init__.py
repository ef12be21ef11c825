"""``KVOffloadSpec``: kvoffload's manager, policies and mover inside vLLM's own ``OffloadingConnector``.

vLLM loads it by the path users write in their config, ``spec_module_path: "kvoffload.vllm.spec"``,
and reads the class with ``getattr``; the class is imported on that first read, so that importing
:mod:`.shared_pool` (which needs no vLLM) does not import vLLM through :mod:`.spec`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvoffload.vllm.lazy_class import served_lazily

if TYPE_CHECKING:
    from kvoffload.vllm.spec.spec import KVOffloadSpec

__all__ = ["KVOffloadSpec"]
__getattr__, __dir__ = served_lazily(__name__, "spec", "KVOffloadSpec")
