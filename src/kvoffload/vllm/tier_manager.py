"""The scheduler side's tiering manager under vLLM (no vLLM import).

vLLM mixes a request's cache salt into its first block hash, so the CPU and file tiers keep
tenants apart through the keys alone; the Redis tier also puts the salt in its key names
(:meth:`~kvoffload.tiers.manager.TieringManager.set_cache_salt`). The salt must be set between the
manager's ``on_new_request`` and the request's first lookup, which both happen inside one call
of the scheduler: :class:`SaltedTieringManager` takes the salts noted just before that call.
"""

from __future__ import annotations

from kvoffload.offload.manager import CPUOffloadingManager
from kvoffload.offload.types import RequestId
from kvoffload.tiers.index import LocalTierIndex, SharedTierIndex, TierIndex
from kvoffload.tiers.manager import TieringManager
from kvoffload.vllm.tier_settings import TierSettings


class SaltedTieringManager(TieringManager):
    """A TieringManager that sets each new request's cache salt from :meth:`note_salt`."""

    def __init__(self, cpu: CPUOffloadingManager, tiers: list[TierIndex]) -> None:
        super().__init__(cpu, tiers)
        self._salts: dict[RequestId, str] = {}

    def note_salt(self, request_id: RequestId, salt: str | None) -> None:
        """The salt of a request about to be announced (None: no salt)."""
        if salt:
            self._salts[request_id] = salt

    def on_new_request(self, request_id: RequestId) -> None:
        super().on_new_request(request_id)
        salt = self._salts.pop(request_id, None)
        if salt is not None:
            self.set_cache_salt(request_id, salt)


def tiering_manager(cpu: CPUOffloadingManager, settings: TierSettings, file_slots: int) -> SaltedTieringManager:
    """The CPU tier ``cpu`` with the configured tiers below it, in lookup order: file, then Redis."""
    indexes: list[TierIndex] = []
    if settings.file is not None:
        indexes.append(LocalTierIndex("file", file_slots))
    if settings.redis is not None:
        indexes.append(SharedTierIndex("redis"))
    return SaltedTieringManager(cpu, indexes)
