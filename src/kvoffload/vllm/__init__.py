"""kvoffload against vLLM's own code (the optional ``kvoffload[vllm]`` extra).

The core package never imports vLLM. :mod:`kvoffload.vllm.locate` finds a vLLM (the installed
package, or a folder of vLLM sources: an unpacked wheel or a git checkout) and reports its version;
:mod:`kvoffload.vllm.check` drives vLLM's real ``OffloadingConnectorScheduler`` and managers with
kvoffload's checkers (``kvoffload vllm check``).
"""

from kvoffload.vllm.locate import VllmInstall, VllmNotFound, locate_vllm

__all__ = ["VllmInstall", "VllmNotFound", "locate_vllm"]
