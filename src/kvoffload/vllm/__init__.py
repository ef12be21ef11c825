"""kvoffload and vLLM (the optional ``kvoffload[vllm]`` extra); the core package never imports vLLM.

- :mod:`kvoffload_lab.vllm.common.locate` finds a vLLM (the installed package, or a folder of vLLM sources: an
  unpacked wheel or a git checkout) and reports its version;
- :mod:`kvoffload_lab.vllm.offloading` drives vLLM's real ``OffloadingConnectorScheduler`` and managers with
  kvoffload's checkers (``kvoffload vllm check``);
- :mod:`kvoffload.vllm.spec` (``KVOffloadSpec``, an ``OffloadingSpec`` for vLLM's own
  ``OffloadingConnector``) and :mod:`kvoffload.vllm.connector` (``KVOffloadConnector``, kvoffload's
  scheduler as a whole KV connector) run kvoffload inside a vLLM engine; they import vLLM.
"""
