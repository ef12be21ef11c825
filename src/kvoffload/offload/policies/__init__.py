"""Eviction (and admission) policies of the CPU tier.

The manager owns the blocks and decides what may be evicted (nothing being loaded from or written);
a policy only orders candidates. Contract, in the order the manager calls it:

- ``admit(key)``: a store was offered for a key that is not resident; False skips storing it;
- ``on_insert(key, parent)``: the key became resident (write pending); ``parent`` is the key of the
  previous chunk of the same prefix, or None for a first chunk;
- ``on_hit(key)``: a lookup/touch used the key;
- ``victims(count, evictable, incoming)``: up to ``count`` resident keys to evict, best first,
  each passing ``evictable``; None when fewer than ``count`` can be found (the manager then changes
  nothing and reports the allocation failure);
- ``on_remove(key)``: the key left the tier (evicted, failed store, reset);
- ``reset()``: forget everything.

Policies are deterministic and copyable: the explorer copies and compares them.

Shipped policies (``POLICIES``; figures on the Mooncake conversation trace in docs/policies.md):

- ``doorkeeper_lfu`` (default): second-sighting admission dueled against admit-all, in front of
  LFU with dynamic aging; at least every peer's policy at every measured CPU-tier size.
- ``doorkeeper``: LRU with second-sighting admission (once full); the default before.
- the peers' policies, for comparison: ``lru``, ``arc`` (vLLM), ``prefix_lru`` (SGLang's radix
  cache), ``lfu`` (LFU-DA) in :mod:`~kvoffload.offload.policies.classic`, beside the default;
  ``s3fifo``, ``wtinylfu``, ``sieve`` and ``lmcache_admission`` in
  :mod:`~kvoffload.offload.policies.peers`.

This module is the one registry (:data:`POLICIES`, :func:`make_policy`); the contract's class is in
:mod:`~kvoffload.offload.policies.base`. The policies' modules import ``base`` and ``classic``,
never this one, so the package has no import circle.
"""

from __future__ import annotations

from collections.abc import Callable

from kvoffload.offload.policies.base import Evictable, EvictionPolicy, KeyHistory
from kvoffload.offload.policies.classic import (
    ARCPolicy,
    DoorkeeperLFUPolicy,
    DoorkeeperLRUPolicy,
    DuelingAdmission,
    LFUPolicy,
    LRUPolicy,
    PrefixLRUPolicy,
    SecondSightingAdmission,
)
from kvoffload.offload.policies.peers import (
    FrequencySketch,
    LMCacheAdmissionPolicy,
    S3FIFOPolicy,
    SievePolicy,
    WTinyLFUPolicy,
)
from kvoffload.offload.types import DEFAULT_POLICY

PolicyFactory = Callable[[int], EvictionPolicy]

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "ARCPolicy",
    "DoorkeeperLFUPolicy",
    "DoorkeeperLRUPolicy",
    "DuelingAdmission",
    "Evictable",
    "EvictionPolicy",
    "FrequencySketch",
    "KeyHistory",
    "LFUPolicy",
    "LMCacheAdmissionPolicy",
    "LRUPolicy",
    "PolicyFactory",
    "PrefixLRUPolicy",
    "S3FIFOPolicy",
    "SecondSightingAdmission",
    "SievePolicy",
    "WTinyLFUPolicy",
    "make_policy",
]

POLICIES: dict[str, PolicyFactory] = {
    "lru": lambda capacity: LRUPolicy(),
    "arc": ARCPolicy,
    "prefix_lru": lambda capacity: PrefixLRUPolicy(),
    "doorkeeper": DoorkeeperLRUPolicy,
    "s3fifo": S3FIFOPolicy,
    "lfu": lambda capacity: LFUPolicy(),
    "doorkeeper_lfu": DoorkeeperLFUPolicy,
    "wtinylfu": WTinyLFUPolicy,
    "sieve": lambda capacity: SievePolicy(),
    "lmcache_admission": LMCacheAdmissionPolicy,
}


def make_policy(name: str, capacity: int) -> EvictionPolicy:
    """The policy registered as ``name``, sized for ``capacity`` CPU blocks."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown eviction policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
    return factory(capacity)
