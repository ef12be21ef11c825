"""Every read or write of vLLM's private state, and what vLLM's scheduler does differently, in one
place per range of vLLM versions.

Everything else in this package uses vLLM's public API (constructors, methods, dataclass fields),
which 0.26.0 to 0.34.0 share. When a release moves one of these names, add a range here.
"""

from __future__ import annotations

from typing import Any

from packaging.version import InvalidVersion, Version


class PrivateReads:
    """vLLM 0.26.x: the connector scheduler keeps per-request state in ``_req_status`` and jobs in
    ``_jobs``."""

    def tracked_requests(self, connector: Any) -> list[str]:
        return sorted(connector._req_status)

    def jobs_in_flight(self, connector: Any) -> list[int]:
        return sorted(connector._jobs)

    def reset_jobs_pending(self, connector: Any) -> list[int]:
        return []

    def second_reset_asserts(self) -> bool:
        """Whether a second ``reset_cache`` between two steps with a job in flight fails vLLM's
        assertion (docs/vllm-double-reset.md): the checkers then reset at most once between
        steps, to look for bugs behind that known one."""
        return True

    def jobs_to_flush(self, connector: Any) -> list[int]:
        """Jobs a cache reset handed to the next step's metadata (a second reset asserts there are none)."""
        return sorted(connector._current_batch_jobs_to_flush)

    def resumed_as_new_request(self) -> bool:
        """Whether vLLM's scheduler re-sends a request resumed after a preemption or a load in
        ``scheduled_new_reqs`` (else in ``scheduled_cached_reqs`` with ``resumed_req_ids``)."""
        return False


class PrivateReads027(PrivateReads):
    """vLLM 0.27.0 and later: a cache reset also keeps the flushed jobs in ``_reset_fence`` until
    the workers reported them."""

    def reset_jobs_pending(self, connector: Any) -> list[int]:
        return sorted(getattr(connector, "_reset_fence", {}))


class PrivateReads034(PrivateReads027):
    """vLLM 0.34.0 and later: a resumed request is re-sent in full in ``scheduled_new_reqs``, like a
    new one (``CachedRequestData`` lost ``resumed_req_ids``); a second cache reset between two
    steps merges its flushed jobs into the first one's instead of asserting there are none."""

    def resumed_as_new_request(self) -> bool:
        return True

    def second_reset_asserts(self) -> bool:
        return False


def private_reads(version: str) -> PrivateReads:
    """The private reads for vLLM ``version`` (a development version counts as its release, one
    whose version does not parse as the newest)."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return PrivateReads034()
    if parsed.release[:2] <= (0, 26):
        return PrivateReads()
    return PrivateReads027() if parsed.release[:2] <= (0, 33) else PrivateReads034()
