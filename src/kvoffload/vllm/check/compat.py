"""Every read or write of vLLM's private state, in one place per range of vLLM versions.

Everything else in this package uses vLLM's public API (constructors, methods, dataclass fields),
which 0.26.0 to 0.33.0 share. When a release moves one of these names, add a range here.
"""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version


class PrivateReads:
    """vLLM 0.26.x: the connector scheduler keeps per-request state in ``_req_status`` and jobs in
    ``_jobs``; a ``KVCacheBlock`` keeps its prefix-cache hash in ``_block_hash`` (no setter)."""

    def tracked_requests(self, connector: Any) -> list[str]:
        return sorted(connector._req_status)

    def jobs_in_flight(self, connector: Any) -> list[int]:
        return sorted(connector._jobs)

    def reset_jobs_pending(self, connector: Any) -> list[int]:
        return []

    def jobs_to_flush(self, connector: Any) -> list[int]:
        """Jobs a cache reset handed to the next step's metadata (a second reset asserts there are none)."""
        return sorted(connector._current_batch_jobs_to_flush)

    def mark_cached(self, block: Any, block_hash_with_group: bytes) -> None:
        block._block_hash = block_hash_with_group


class PrivateReads027(PrivateReads):
    """vLLM 0.27.0 and later: a cache reset also keeps the flushed jobs in ``_reset_fence`` until
    the workers reported them."""

    def reset_jobs_pending(self, connector: Any) -> list[int]:
        return sorted(getattr(connector, "_reset_fence", {}))


def private_reads(version: str) -> PrivateReads:
    """The private reads for vLLM ``version`` (a development version counts as its release)."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return PrivateReads027()
    return PrivateReads() if parsed.release[:2] <= (0, 26) else PrivateReads027()
