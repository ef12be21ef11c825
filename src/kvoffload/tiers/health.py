"""Whether a tier is reachable, as its jobs find out: one log line when it becomes unavailable
(wrong password, unreachable server, missing database, an I/O error), one when it is back, and
counters a user can export (``stats``). A job that finds the tier unavailable faults: its
requests recompute, nothing is raised into the engine step."""

from __future__ import annotations

import logging
import threading

logger = logging.getLogger("kvoffload.tiers")


class Availability:
    """The outage state of one tier, shared by the driver's I/O threads."""

    def __init__(self, tier: str) -> None:
        self.tier = tier
        self._lock = threading.Lock()
        self.available = True
        self.outages = 0
        self.faulted_jobs = 0

    def failed(self, reason: str) -> None:
        """A job found the tier unavailable; logs a warning if it was available until now."""
        with self._lock:
            self.faulted_jobs += 1
            if not self.available:
                return
            self.available = False
            self.outages += 1
        logger.warning("%s is unavailable (%s): its jobs fault and requests recompute until it is back",
                       self.tier, reason)

    def succeeded(self) -> None:
        """A job reached the tier; logs the recovery if it was unavailable."""
        if self.available:
            return
        with self._lock:
            if self.available:
                return
            self.available = True
            faulted = self.faulted_jobs
        logger.info("%s is available again (%d job(s) faulted since the first outage)", self.tier, faulted)

    def stats(self) -> dict[str, int]:
        """``available`` (1 or 0), ``outages`` (times it became unavailable), ``faulted_jobs``."""
        with self._lock:
            return {"available": int(self.available), "outages": self.outages, "faulted_jobs": self.faulted_jobs}
