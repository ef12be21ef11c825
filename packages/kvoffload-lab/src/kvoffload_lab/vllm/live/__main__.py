"""``python -m kvoffload_lab.vllm.live PLAN.json OUT.json``: the driver
(:mod:`kvoffload_lab.vllm.common.live.driver`) with the connectors of the registry (:mod:`.registry`),
in a process of its own per run mode."""

from __future__ import annotations

import sys

from kvoffload_lab.vllm.common.live.driver import main
from kvoffload_lab.vllm.live.registry import CONNECTORS

sys.exit(main(sys.argv[1:], CONNECTORS))
