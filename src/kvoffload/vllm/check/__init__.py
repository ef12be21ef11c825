"""``kvoffload vllm check``: vLLM's real offloading connector driven by kvoffload's checkers.

:mod:`.connector` builds vLLM's ``OffloadingConnectorScheduler`` with a real manager (LRU, ARC, or
tiering) behind a :mod:`.proxy` that checks the manager contract on every call; :mod:`.adapter`
puts it behind kvoffload's engine (:class:`kvoffload.sim.Engine`) with a :mod:`.worker` that moves
pattern bytes on CPU tensors as vLLM's worker would; :mod:`.sim`, :mod:`.stateful` and
:mod:`.explorer` are the three checkers and :mod:`.runner` runs managers x checkers.
"""
