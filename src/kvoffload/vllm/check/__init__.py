"""``kvoffload vllm check``: vLLM's real offloading connector driven by kvoffload's checkers.

:mod:`.build` builds vLLM's ``OffloadingConnectorScheduler`` with a real manager (LRU, ARC, or
tiering) as vLLM's ``OffloadingConnector`` does; :mod:`.proxy` wraps the manager and checks the
manager contract on every call; :mod:`.adapter` puts the connector behind kvoffload's engine
(:class:`kvoffload.sim.Engine`) with the :mod:`.worker` that moves pattern bytes on CPU tensors as
vLLM's worker would; :mod:`.harness` steps it with every check; :mod:`.sim`, :mod:`.stateful` and
:mod:`.explorer` are the three checkers, :mod:`.runner` runs managers x checkers, :mod:`.compat`
holds every private read per vLLM version range, :mod:`.release` is ``make check-vllm`` and
:mod:`.repro_double_reset` reproduces the failing assertion found in 0.26.0-0.33.0 with vLLM's
classes alone (:mod:`.repro_double_reset_engine`: through a real engine), and :mod:`.fresh_venv`
checks ``kvoffload[vllm]`` alone in a fresh virtual environment.
"""
