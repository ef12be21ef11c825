"""The live check's connector registry: every vLLM connector it runs in live engines, by the name
``kvoffload vllm check --connector`` gives it.

Each row (:class:`~kvoffload_lab.vllm.common.live.interface.LiveConnector`) lives beside its
connector's judge, in its folder: vLLM's ``OffloadingConnector`` in
:mod:`kvoffload_lab.vllm.offloading.live.judge`, ``SimpleCPUOffloadConnector`` in
:mod:`kvoffload_lab.vllm.simple.live.judge`. Only this module and the driver's entry point
(:mod:`.__main__`) name them all.
"""

from __future__ import annotations

from kvoffload_lab.vllm.common.live.interface import LiveConnector
from kvoffload_lab.vllm.offloading.live.judge import OFFLOADING
from kvoffload_lab.vllm.simple.live.judge import SIMPLE

CONNECTORS: dict[str, LiveConnector] = {row.name: row for row in (OFFLOADING, SIMPLE)}
