"""Secondary tiers below the CPU tier (product code, like :mod:`kvoffload.offload`): a sans-IO
tiering manager (cascade on store, promotion on lookup), a local file tier and a shared Redis tier,
and their I/O driver. Their lifecycles are declared in :mod:`kvoffload.lifecycles.tier`; the
simulator with tiers is :mod:`kvoffload_lab.sim.tiered`, their explorer model and mutants
:mod:`kvoffload_lab.verify.tiering`. Nothing here imports a checker, the simulator or a command.
"""
