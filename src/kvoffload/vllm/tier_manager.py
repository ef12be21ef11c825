"""The scheduler side's tiering manager under vLLM (no vLLM import).

vLLM mixes a request's cache salt into its first block hash, so the CPU and file tiers keep
tenants apart through the keys alone; the Redis tier also puts the salt in its key names: the
scheduler hands each request's salt to the manager in the
:class:`~kvoffload.offload.types.RequestContext` it announces the request with.
"""

from __future__ import annotations

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.tiers.index import LocalTierIndex, SharedTierIndex, TierIndex
from kvoffload.tiers.manager import TieringManager
from kvoffload.vllm.tier_settings import TierSettings


def tiering_manager(cpu: CPUOffloadingManager, settings: TierSettings, file_slots: int) -> TieringManager:
    """The CPU tier ``cpu`` with the configured tiers below it, in lookup order: file, then Redis."""
    indexes: list[TierIndex] = []
    if settings.file is not None:
        indexes.append(LocalTierIndex("file", file_slots))
    if settings.redis is not None:
        indexes.append(SharedTierIndex("redis"))
    return TieringManager(cpu, indexes)
