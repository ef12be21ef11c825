"""KVOffloadConnector with a bug-zoo mutant's scheduler (``kv_connector_extra_config["bugzoo_mutant"]``):
the real-engine checks must catch the mutant's bug as they catch a real one."""

from __future__ import annotations

from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

from kvoffload.vllm.connector import KVOffloadConnector
from kvoffload.vllm.connector.scheduler_side import SchedulerSide
from kvoffload_lab.verify.bugzoo import MUTANTS


class MutantConnector(KVOffloadConnector):
    """The connector, its scheduler side built by the named mutant."""

    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        if self.kvoffload_scheduler is not None:
            mutant = MUTANTS[vllm_config.kv_transfer_config.kv_connector_extra_config["bugzoo_mutant"]]
            side = self.kvoffload_scheduler
            scheduler = mutant.make_scheduler(self.config, side.scheduler.manager)
            self.kvoffload_scheduler = SchedulerSide(scheduler, side.checking)


def mutant_transfer_config(name: str, num_cpu_chunks: int, blocks_per_chunk: int = 1) -> dict[str, Any]:
    """``kv_transfer_config`` for :class:`MutantConnector` running mutant ``name``."""
    from kvoffload_lab.vllm.common.engine import connector_transfer_config

    config = connector_transfer_config(
        num_cpu_chunks, blocks_per_chunk=blocks_per_chunk, connector_module="vllm_mutant_connector",
        connector_name="MutantConnector",
    )
    config["kv_connector_extra_config"]["bugzoo_mutant"] = name
    return config
