"""kvoffload's own connector, ``KVOffloadConnector``, under vLLM's real schedulers and kvoffload's checkers.

Both sides of the connector run in process: its scheduler side inside vLLM's ``Scheduler`` or
``AsyncScheduler`` (:mod:`.build`), its worker side in a model-runner stand-in that, under async
scheduling, reports each step's output one step late, as vLLM's engine core does (:mod:`.harness`);
copies complete late (:mod:`.mover`). :mod:`.sim`, :mod:`.stateful` and :mod:`.explorer` are the
three checkers, :mod:`.mutant` a connector that ignores the one-step delay, which they must catch.
``kvoffload vllm check --connector kvoffload`` runs them (:mod:`.runner`).
"""
