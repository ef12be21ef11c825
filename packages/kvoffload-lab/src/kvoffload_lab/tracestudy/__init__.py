"""Studies of production request traces in the Mooncake format (``kvoffload replay``).

Here a trace is a Mooncake request trace and a replay is that trace run through the real
scheduler and manager: the reader (:mod:`.mooncake`), the replay (:mod:`.replay`; with secondary
tiers, :mod:`.tiered_replay`), the offline bounds (:mod:`.bounds`), the CPU oracle and the bounds
told part of the future (:mod:`.cpu_oracle`, :mod:`.oracle_breakdown`), the conversation
structure (:mod:`.structure`) and the sweep over CPU sizes (:mod:`.sweep`).
"""
