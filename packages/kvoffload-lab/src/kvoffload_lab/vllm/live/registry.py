"""The live check's connector registry: every vLLM connector it runs in live engines, by the name
``kvoffload vllm check --connector`` gives it.

Each row (:class:`~.interface.LiveConnector`) lives beside its connector's judge: vLLM's
``OffloadingConnector`` in :mod:`.checker`, ``SimpleCPUOffloadConnector`` in :mod:`.simple`. Only
this module and the driver's entry point (:mod:`.__main__`) name them all.
"""

from __future__ import annotations

from kvoffload_lab.vllm.live.checker import OFFLOADING
from kvoffload_lab.vllm.live.interface import LiveConnector
from kvoffload_lab.vllm.live.simple import SIMPLE

CONNECTORS: dict[str, LiveConnector] = {row.name: row for row in (OFFLOADING, SIMPLE)}
