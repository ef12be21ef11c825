"""``kvoffload vllm check``: vLLM's real offloading connector driven by kvoffload's checkers.

:mod:`.build` builds vLLM's ``OffloadingConnectorScheduler`` with a real manager (LRU, ARC, or
tiering) as vLLM's ``OffloadingConnector`` does; :mod:`.proxy` wraps the manager and checks the
manager contract on every call; :mod:`.adapter` puts the connector behind kvoffload's engine
(:class:`kvoffload_lab.sim.Engine`) with the :mod:`.worker` that moves pattern bytes on CPU tensors as
vLLM's worker would; :mod:`.harness` steps it with every check; :mod:`.sim`, :mod:`.stateful` and
:mod:`.explorer` are the three checkers, :mod:`.runner` runs managers x checkers, :mod:`.compat`
holds every private read per vLLM version range, and :mod:`.repro_double_reset_engine` shows the
failing assertion found in 0.26.0-0.33.0 through a real engine. What only CI and reproductions run
(``make check-vllm``'s release checks, the double reset with vLLM's classes alone, ``kvoffload[vllm]``
in a fresh venv) lives in scripts/, outside the installed package.
"""
