"""Where the CPU oracle's advantage comes from: half-clairvoyant policies in the same replay.

The CPU oracle (:mod:`kvoffload_lab.tracestudy.cpu_oracle`) knows, for every offered block, whether and when it
is used again. These policies know only part of that, so the hit ratio of each one bounds what a
class of online policies can reach (each is run by the real manager, through the same scheduler
and GPU prefix cache):

- :class:`SecondSightingBelady`: the doorkeeper's admission (a block is stored the second time it
  is offered, once the tier is full) with Belady's eviction (furthest next use first). It bounds
  every policy that admits on second sighting, whatever it evicts.
- :class:`ReuseKnowingLRU`: admits exactly the blocks used again within ``horizon`` requests (any
  later time when ``horizon`` is None) and evicts the least recently used. It bounds what a perfect
  reuse predictor earns without knowing *when* the reuse comes; the best of the horizons tried is
  reported once more as the ``reuse_knowing_lru_best_horizon`` row, the bound of admission by
  predicted reuse with LRU eviction.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Hashable, Sequence
from typing import Any

from kvoffload.offload.policies import Evictable, EvictionPolicy, LRUPolicy
from kvoffload.offload.types import OffloadKey
from kvoffload_lab.tracestudy.cpu_oracle import NEVER, BeladyCPUPolicy, ClairvoyantPolicy
from kvoffload_lab.tracestudy.replay import TraceReplay, cpu_oracle

# How many keys the second-sighting admission remembers, per CPU block (the doorkeeper's default).
GHOST_FACTOR = 4
# Reuse horizons (in requests) of the ReuseKnowingLRU rows besides "ever": a grid wide enough that
# the best of them bounds "a perfect predictor of reuse within some horizon, with LRU eviction" (on
# the Mooncake conversation trace the best lies at 300-1,600 requests for C = 1,000-8,000).
DEFAULT_HORIZONS: tuple[int, ...] = (100, 200, 300, 400, 500, 600, 700, 800, 1000, 1300, 1600, 2000, 3000)
BEST_HORIZON = "reuse_knowing_lru_best_horizon"


class SecondSightingBelady(BeladyCPUPolicy):
    """Stores a key the second time it is offered (once the tier is full, as the doorkeeper does)
    and evicts the resident key used furthest in the future; the incoming key is never bypassed."""

    name = "second_sighting_belady"

    def __init__(self, chains: Sequence[Sequence[OffloadKey]], capacity: int) -> None:
        super().__init__(chains, capacity)
        self._seen: OrderedDict[OffloadKey, None] = OrderedDict()

    def _remember(self, key: OffloadKey) -> None:
        self._seen[key] = None
        self._seen.move_to_end(key)
        while len(self._seen) > GHOST_FACTOR * self.capacity:
            self._seen.popitem(last=False)

    def admit(self, key: OffloadKey) -> bool:
        if len(self._next) + self._promised < self.capacity:
            self._promised += 1
            return True
        if key in self._seen:
            del self._seen[key]
            return True
        self._remember(key)
        return False

    def victims(
        self, count: int, evictable: Evictable, incoming: Collection[OffloadKey]
    ) -> list[OffloadKey] | None:
        chosen = super().victims(count, evictable, incoming)
        for key in chosen or ():
            self._remember(key)
        return chosen

    def reset(self) -> None:
        super().reset()
        self._seen.clear()

    def fingerprint(self) -> Hashable:
        return (super().fingerprint(), tuple(self._seen))


class ReuseKnowingLRU(ClairvoyantPolicy, LRUPolicy):
    """Admits a key only if it is used again within ``horizon`` requests (None: ever) and evicts
    the least recently used resident key."""

    name = "reuse_knowing_lru"

    def __init__(self, chains: Sequence[Sequence[OffloadKey]], horizon: int | None = None) -> None:
        if horizon is not None and horizon < 1:
            raise ValueError(f"horizon must be positive or None, got {horizon}")
        LRUPolicy.__init__(self)
        ClairvoyantPolicy.__init__(self, chains)
        self.horizon = horizon

    def admit(self, key: OffloadKey) -> bool:
        upcoming = self.next_use(key)
        return upcoming != NEVER and (self.horizon is None or upcoming - self._clock <= self.horizon)

    def fingerprint(self) -> Hashable:
        return (self._clock, self.horizon, LRUPolicy.fingerprint(self))


def oracle_breakdown(
    chains: Sequence[list[int]],
    gpu_blocks: int,
    cpu_blocks: int,
    horizons: Sequence[int] = DEFAULT_HORIZONS,
    oracle_hit_ratio: float | None = None,
) -> list[dict[str, Any]]:
    """One row per half-clairvoyant policy (hit ratio, ratio to the CPU oracle, violations, leaks),
    replayed at the same GPU and CPU sizes; the CPU oracle is replayed too unless its hit ratio is
    given."""
    if oracle_hit_ratio is None:
        oracle_hit_ratio = cpu_oracle(chains, gpu_blocks, cpu_blocks).hit_ratio
    policies: list[EvictionPolicy] = [SecondSightingBelady(chains, cpu_blocks), ReuseKnowingLRU(chains)]
    policies += [ReuseKnowingLRU(chains, horizon) for horizon in horizons]
    rows = []
    for policy in policies:
        run = TraceReplay(gpu_blocks, cpu_blocks, policy, check_every=len(chains) + 1).run(chains)
        rows.append({
            "policy": policy.name,
            "horizon": getattr(policy, "horizon", None),
            "hit_ratio": run.hit_ratio,
            "ratio_to_cpu_oracle": run.hit_ratio / oracle_hit_ratio if oracle_hit_ratio else None,
            "violations": run.violations,
            "leaks": run.leaks,
        })
    best = max((row for row in rows if row["policy"] == ReuseKnowingLRU.name), key=lambda row: row["hit_ratio"])
    rows.append({**best, "policy": BEST_HORIZON})
    return rows
