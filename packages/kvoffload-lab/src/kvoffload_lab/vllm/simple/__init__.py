"""vLLM's second offloading connector, ``SimpleCPUOffloadConnector``, under kvoffload's checkers.

This connector is not a manager behind vLLM's ``OffloadingConnectorScheduler``: its scheduler side
(``SimpleCPUOffloadScheduler``) keeps a CPU ``BlockPool`` of vLLM's own, reads the GPU
``BlockPool`` it is bound to, and plans stores from ``SchedulerOutput`` fields that only vLLM's
``Scheduler`` fills. So the engine around it here is vLLM's real ``Scheduler``; kvoffload supplies
the model and the worker's copies:

- :mod:`.build` builds the ``Scheduler`` with the connector, eager or lazy;
- :mod:`.backend` replaces the connector's CUDA copy engine with torch copies that run late;
- :mod:`.worker` is vLLM's own ``SimpleCPUOffloadWorker`` on that backend;
- :mod:`.model` writes each token's KV as a digest of its prefix and checks every slot it reads;
- :mod:`.harness` steps the engine with every check after each step;
- :mod:`.sim`, :mod:`.stateful`, :mod:`.explorer` are the three checkers.
"""
