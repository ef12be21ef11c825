"""The simulator with secondary tiers (``kvoffload simulate --tiers``): engines whose CPU tier
cascades to file and Redis tiers through the real tiering manager and I/O driver, and a worker that
moves real bytes (the Mooncake replay with tiers is :mod:`kvoffload_lab.tracestudy.tiered_replay`).

Public API: ``TierSimOptions``, ``simulate_tiered`` and ``print_summary`` (:mod:`.runner`),
``ByteModelWorker`` (:mod:`.bytes_worker`).
"""
