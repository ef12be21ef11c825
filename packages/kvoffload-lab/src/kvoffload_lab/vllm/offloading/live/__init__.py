"""vLLM's ``OffloadingConnector`` in live engines (``--connector offloading``): :mod:`.judge` (its
registry row and judge: conformance and TLA+), :mod:`.connector` (``LiveCheckConnector``, the
connector with every scheduler-side call recorded and the manager behind the recording proxy of
:mod:`kvoffload_lab.vllm.offloading.proxy`), :mod:`.offloading_spec` and :mod:`.worker` (vLLM's specs
with a worker that copies with torch and checks every loaded block), :mod:`.tier` (vLLM's in-memory
``example`` tier, made to keep its bytes) and :mod:`.conformance` (the engine model against the
traces)."""
