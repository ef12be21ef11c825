"""The sans-IO tier protocol: tier jobs handed out by the tiering manager, outcomes fed back.

A *secondary tier* sits below the CPU tier. The manager never does I/O: it hands out
:class:`TierJob` records (``take_tier_jobs``) and learns their outcomes as inputs
(``complete_tier_job``), exactly like GPU<->CPU transfer jobs. An I/O driver
(:class:`kvoffload.tiers.driver.TierDriver`) runs the jobs on real tiers.

- ``cascade``: copy ready CPU blocks (pinned for the job's lifetime) into the tier.
- ``promote``: read chunks from the tier into CPU blocks that are allocated and write-pending for
  the job's lifetime; only chunks whose bytes match their key and checksum are served.
- ``probe``: ask a shared tier which chunks it holds (no CPU block is involved), so that CPU
  blocks are only allocated, and other chunks evicted, for chunks that are there (vLLM #49902:
  speculative promotions filled the CPU pool).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from kvoffload.offload.types import OffloadKey, RequestId

TierJobKind = Literal["cascade", "promote", "probe"]

# Per-key outcome of a tier job.
OK = "ok"  # done; for a probe: the tier holds the key
MISS = "miss"  # the tier does not hold the key (evicted, never written, server restarted)
CORRUPT = "corrupt"  # bytes whose checksum or key does not match: never served
FAULT = "fault"  # I/O error, connection refused, timeout
KEY_RESULTS: frozenset[str] = frozenset({OK, MISS, CORRUPT, FAULT})


class TierConfigError(ValueError):
    """A tier setting that can never work (its message names the setting and the value), or a
    tier file that another tier holds or that belongs to another model, layout or chunk size."""


class TierJob(NamedTuple):
    """One batched transfer between CPU blocks and one secondary tier.

    ``slots`` are the tier's slots (one per key) for tiers that place chunks themselves (the file
    tier); empty for tiers that address chunks by key only (Redis). ``salt`` namespaces the keys
    in shared tiers: requests with different cache salts never share a chunk there.
    """

    job_id: int
    kind: TierJobKind
    tier: str
    request_id: RequestId
    keys: tuple[OffloadKey, ...]
    cpu_block_ids: tuple[int, ...]
    slots: tuple[int, ...] = ()
    salt: str = ""


class TierOutcome(NamedTuple):
    """What happened to each key of a job, in the job's key order (values of ``KEY_RESULTS``).

    ``foreign`` counts promoted keys that another engine instance wrote (shared tiers only).
    """

    job_id: int
    results: tuple[str, ...]
    foreign: int = 0
