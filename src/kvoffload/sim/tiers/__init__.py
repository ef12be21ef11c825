"""The simulator with secondary tiers (``kvoffload simulate --tiers``, ``kvoffload replay
--tier-blocks``): engines whose CPU tier cascades to file and Redis tiers through the real tiering
manager and I/O driver, a worker that moves real bytes, and the production-trace replay with tiers.

Public API: ``TierSimOptions``, ``simulate_tiered`` and ``print_summary`` (:mod:`.runner`),
``replay_tiered`` (:mod:`.replay`), ``ByteModelWorker`` (:mod:`.bytes_worker`).
"""
